//! Where client sessions are kept. Single node: this process's `SessionTable`
//! (`crate::session`). Cluster mode: every replica keeps a copy of the sessions it serves;
//! Redis holds the truth — the session and its idle TTL (`{p}:session:{id}`), its per-skill
//! upstream bindings (`{p}:session:{id}:bindings`) — so a session opened on one replica
//! continues on any other, and a close on any replica ends it everywhere. When Redis does not
//! answer, opening, finding and closing a session are refused (retryable); sharing a binding
//! only costs another replica a new upstream session.
//!
//! The store never talks to delegates: what it drops comes back as bindings for the caller to
//! close upstream.

use super::StoreError;
use crate::session::{Binding, ClientSession, NewSession, SessionLimit, SessionTable};
use std::future::Future;
use std::sync::Arc;

mod redis;
pub use redis::{RedisSessions, SharedBinding, SharedSession};

/// Why a session was not opened.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenError {
    /// A session limit is reached.
    #[error(transparent)]
    Limit(#[from] SessionLimit),
    /// The shared state did not answer.
    #[error("session not opened: {0}")]
    Unavailable(#[from] StoreError),
}

/// A session lookup.
#[derive(Debug, Default)]
pub struct Found {
    /// The live session, if the caller owns it.
    pub session: Option<Arc<ClientSession>>,
    /// Upstream bindings of a copy dropped because the session is gone: close them.
    pub stale: Vec<Binding>,
}

/// Keeps client sessions and their upstream bindings.
pub trait SessionStore {
    /// This process's sessions (its copies, in cluster mode).
    fn table(&self) -> &SessionTable;

    /// Opens a session unless `overall` sessions, or `tenant` of its tenant, are open here.
    fn open(
        &self,
        new: NewSession,
        overall: usize,
        tenant: Option<usize>,
    ) -> impl Future<Output = Result<Arc<ClientSession>, OpenError>> + Send;

    /// The live session `id` if `owner` opened it; its idle clock restarts (everywhere).
    /// Unknown, expired and someone else's sessions all look the same.
    fn get(&self, id: &str, owner: &str) -> impl Future<Output = Result<Found, StoreError>> + Send;

    /// Publishes the binding of `skill` in `s` (another replica will use the same upstream
    /// session).
    fn share_binding(
        &self,
        s: &ClientSession,
        skill: &str,
        b: &Binding,
    ) -> impl Future<Output = ()> + Send;

    /// Publishes `s`'s first binding of `skill` unless another replica published one first;
    /// returns that one when it did.
    fn share_first_binding(
        &self,
        s: &ClientSession,
        skill: &str,
        b: &Binding,
    ) -> impl Future<Output = Option<Binding>> + Send;

    /// Withdraws the binding of `skill` in `s`.
    fn unshare_binding(&self, s: &ClientSession, skill: &str) -> impl Future<Output = ()> + Send;

    /// Closes session `id` of `owner` (everywhere); returns the upstream bindings to close.
    fn close(
        &self,
        id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<Vec<Binding>, StoreError>> + Send;

    /// Drops sessions idle here past their TTL: how many, and the bindings to close (those
    /// of sessions that are gone everywhere).
    fn take_expired(&self) -> impl Future<Output = (usize, Vec<Binding>)> + Send;

    /// Drops every session here (shutdown); returns the bindings to close (none in cluster
    /// mode, where the sessions live on in the other replicas).
    fn take_all(&self) -> Vec<Binding>;
}

/// The sessions chosen at start.
pub enum Sessions {
    /// Single node.
    Local(LocalSessions),
    /// Cluster mode.
    Shared(RedisSessions),
}

impl SessionStore for Sessions {
    fn table(&self) -> &SessionTable {
        match self {
            Sessions::Local(l) => l.table(),
            Sessions::Shared(r) => r.table(),
        }
    }

    async fn open(
        &self,
        new: NewSession,
        overall: usize,
        tenant: Option<usize>,
    ) -> Result<Arc<ClientSession>, OpenError> {
        match self {
            Sessions::Local(l) => l.open(new, overall, tenant).await,
            Sessions::Shared(r) => r.open(new, overall, tenant).await,
        }
    }

    async fn get(&self, id: &str, owner: &str) -> Result<Found, StoreError> {
        match self {
            Sessions::Local(l) => l.get(id, owner).await,
            Sessions::Shared(r) => r.get(id, owner).await,
        }
    }

    async fn share_binding(&self, s: &ClientSession, skill: &str, b: &Binding) {
        match self {
            Sessions::Local(l) => l.share_binding(s, skill, b).await,
            Sessions::Shared(r) => r.share_binding(s, skill, b).await,
        }
    }

    async fn share_first_binding(
        &self,
        s: &ClientSession,
        skill: &str,
        b: &Binding,
    ) -> Option<Binding> {
        match self {
            Sessions::Local(l) => l.share_first_binding(s, skill, b).await,
            Sessions::Shared(r) => r.share_first_binding(s, skill, b).await,
        }
    }

    async fn unshare_binding(&self, s: &ClientSession, skill: &str) {
        match self {
            Sessions::Local(l) => l.unshare_binding(s, skill).await,
            Sessions::Shared(r) => r.unshare_binding(s, skill).await,
        }
    }

    async fn close(&self, id: &str, owner: &str) -> Result<Vec<Binding>, StoreError> {
        match self {
            Sessions::Local(l) => l.close(id, owner).await,
            Sessions::Shared(r) => r.close(id, owner).await,
        }
    }

    async fn take_expired(&self) -> (usize, Vec<Binding>) {
        match self {
            Sessions::Local(l) => l.take_expired().await,
            Sessions::Shared(r) => r.take_expired().await,
        }
    }

    fn take_all(&self) -> Vec<Binding> {
        match self {
            Sessions::Local(l) => l.take_all(),
            Sessions::Shared(r) => r.take_all(),
        }
    }
}

/// Single node: the table in this process is the truth (every answer immediate).
#[derive(Default)]
pub struct LocalSessions {
    table: SessionTable,
}

impl SessionStore for LocalSessions {
    fn table(&self) -> &SessionTable {
        &self.table
    }

    fn open(
        &self,
        new: NewSession,
        overall: usize,
        tenant: Option<usize>,
    ) -> impl Future<Output = Result<Arc<ClientSession>, OpenError>> + Send {
        std::future::ready(
            self.table
                .open_limited(new, overall, tenant)
                .map_err(OpenError::from),
        )
    }

    fn get(&self, id: &str, owner: &str) -> impl Future<Output = Result<Found, StoreError>> + Send {
        std::future::ready(Ok(Found {
            session: self.table.get(id, owner),
            stale: Vec::new(),
        }))
    }

    fn share_binding(
        &self,
        _s: &ClientSession,
        _skill: &str,
        _b: &Binding,
    ) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    fn share_first_binding(
        &self,
        _s: &ClientSession,
        _skill: &str,
        _b: &Binding,
    ) -> impl Future<Output = Option<Binding>> + Send {
        std::future::ready(None)
    }

    fn unshare_binding(&self, _s: &ClientSession, _skill: &str) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    fn close(
        &self,
        id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<Vec<Binding>, StoreError>> + Send {
        let bindings = self
            .table
            .close(id, owner)
            .map(|s| s.take_bindings())
            .unwrap_or_default();
        std::future::ready(Ok(bindings))
    }

    fn take_expired(&self) -> impl Future<Output = (usize, Vec<Binding>)> + Send {
        let expired = self.table.take_expired();
        let bindings = expired.iter().flat_map(|s| s.take_bindings()).collect();
        std::future::ready((expired.len(), bindings))
    }

    fn take_all(&self) -> Vec<Binding> {
        self.table
            .take_all()
            .iter()
            .flat_map(|s| s.take_bindings())
            .collect()
    }
}

#[cfg(test)]
mod tests;
