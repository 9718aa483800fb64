//! Client sessions across replicas (cluster mode): every replica keeps a copy of the sessions
//! it serves; Redis holds the truth (the session, its idle TTL, its per-skill upstream
//! bindings), so a session opened on one replica continues on any other and a close on any
//! replica ends it everywhere. Without cluster mode these are the local table's answers.

use super::Proxy;
use crate::cluster::{SharedBinding, SharedSession};
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::session::{Binding, ClientSession, NewSession};
use std::sync::Arc;
use std::time::Duration;

impl Proxy {
    /// The live session `id` if `owner` opened it: from this replica's table, or in cluster
    /// mode from the shared state (its idle clock restarts everywhere, and this replica's
    /// copy takes the current bindings). `Err` when the shared state does not answer.
    pub(super) async fn session(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Arc<ClientSession>>, LdpError> {
        let Some(c) = &self.cluster else {
            return Ok(self.sessions.get(id, owner));
        };
        if !plausible_id(id) {
            // Not an id this gateway issues: no need to ask (and no odd Redis keys).
            return Ok(None);
        }
        let (shared, bindings) = match c.touch_session(id).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                // Closed or expired elsewhere: drop this replica's copy too, closing what it
                // still holds upstream (a second close of a shared one is harmless).
                if let Some(gone) = self.sessions.forget(id) {
                    self.close_later(gone.take_bindings());
                }
                return Ok(None);
            }
            Err(e) => {
                return Err(LdpError::gateway(
                    GatewayCode::Unavailable,
                    format!("session not checked: {e}"),
                ))
            }
        };
        if shared.owner != owner {
            return Ok(None);
        }
        let ttl = Duration::from_millis(shared.ttl_ms);
        let session = self.sessions.adopt(
            id,
            NewSession {
                owner: shared.owner,
                tenant: shared.tenant,
                client_domain: shared.client_domain,
                required_domain: shared.required_domain,
                payload: shared.payload,
                policy: shared.policy,
                ttl,
            },
        );
        let resolved = bindings
            .into_iter()
            .filter_map(|(skill, b)| {
                let delegate = self.registry.get(&b.delegate)?;
                Some((
                    skill,
                    Binding {
                        delegate,
                        upstream: b.upstream,
                    },
                ))
            })
            .collect();
        // A binding another replica replaced is not closed here: replicas may still be using
        // it (it lapses at the delegate after its idle TTL).
        session.sync_bindings(resolved);
        Ok(Some(session))
    }

    /// Cluster mode: publishes a session just opened here.
    pub(super) async fn share_session(&self, s: &ClientSession) -> Result<(), LdpError> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let shared = SharedSession {
            owner: s.owner.clone(),
            tenant: s.tenant.clone(),
            client_domain: s.client_domain.clone(),
            required_domain: s.required_domain.clone(),
            payload: s.payload.clone(),
            policy: s.policy.clone(),
            ttl_ms: s.ttl.as_millis().max(1) as u64,
        };
        c.put_session(&s.id, &shared).await.map_err(|e| {
            LdpError::gateway(GatewayCode::Unavailable, format!("session not opened: {e}"))
        })
    }

    /// Cluster mode: publishes the binding of `skill` (another replica will use the same
    /// upstream session). A failure only costs that replica a new upstream session.
    pub(super) async fn share_binding(&self, s: &ClientSession, skill: &str, b: &Binding) {
        let Some(c) = &self.cluster else { return };
        let shared = SharedBinding {
            delegate: b.delegate.name.clone(),
            upstream: b.upstream.clone(),
        };
        if let Err(e) = c.put_binding(&s.id, skill, &shared, s.ttl).await {
            tracing::warn!(session_id = %s.id, skill, error = %e, "binding not shared");
        }
    }

    /// Cluster mode: publishes the session's first binding of `skill` unless another replica
    /// published one first; returns that one (resolved here) when it did.
    pub(super) async fn share_first_binding(
        &self,
        s: &ClientSession,
        skill: &str,
        b: &Binding,
    ) -> Option<Binding> {
        let c = self.cluster.as_ref()?;
        let shared = SharedBinding {
            delegate: b.delegate.name.clone(),
            upstream: b.upstream.clone(),
        };
        match c.put_first_binding(&s.id, skill, &shared, s.ttl).await {
            Ok(Some(w)) if w.upstream.session_id != b.upstream.session_id => Some(Binding {
                delegate: self.registry.get(&w.delegate)?,
                upstream: w.upstream,
            }),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(session_id = %s.id, skill, error = %e, "binding not shared");
                None
            }
        }
    }

    /// Cluster mode: withdraws the binding of `skill`.
    pub(super) async fn unshare_binding(&self, s: &ClientSession, skill: &str) {
        let Some(c) = &self.cluster else { return };
        if let Err(e) = c.remove_binding(&s.id, skill).await {
            tracing::warn!(session_id = %s.id, skill, error = %e, "binding not withdrawn");
        }
    }

    /// Closes session `id` of `owner` (everywhere, in cluster mode); returns the upstream
    /// bindings to close, or `Err` when the shared state does not answer.
    pub(super) async fn end_session(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Vec<Binding>, LdpError> {
        let Some(c) = &self.cluster else {
            return Ok(self
                .sessions
                .close(id, owner)
                .map(|s| s.take_bindings())
                .unwrap_or_default());
        };
        if !plausible_id(id) {
            return Ok(Vec::new());
        }
        let shared = c.close_session(id, owner).await.map_err(|e| {
            LdpError::gateway(GatewayCode::Unavailable, format!("session not closed: {e}"))
        })?;
        // Another owner's copy stays; the owner's own copy goes (closed now, or already gone
        // from the shared state, e.g. a retried close).
        let local = match self.sessions.peek(id) {
            Some(s) if s.owner == owner => self.sessions.forget(id),
            _ => None,
        };
        let Some(shared) = shared else {
            return Ok(local.map(|s| s.take_bindings()).unwrap_or_default());
        };
        let mut out: Vec<Binding> = shared
            .into_iter()
            .filter_map(|(_, b)| {
                Some(Binding {
                    delegate: self.registry.get(&b.delegate)?,
                    upstream: b.upstream,
                })
            })
            .collect();
        // Upstream sessions this replica opened but never managed to share.
        for b in local.map(|s| s.take_bindings()).unwrap_or_default() {
            if !out
                .iter()
                .any(|o| o.upstream.session_id == b.upstream.session_id)
            {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// Sessions idle past their TTL here: their upstream bindings to close. In cluster mode a
    /// session idle here may be busy on another replica: only this copy is dropped unless it
    /// is gone from the shared state too.
    pub(super) async fn expired_bindings(&self) -> (usize, Vec<Binding>) {
        let expired = self.sessions.take_expired();
        let n = expired.len();
        let mut out = Vec::new();
        for s in expired {
            let gone = match &self.cluster {
                None => true,
                Some(c) => matches!(c.session_exists(&s.id).await, Ok(false)),
            };
            if gone {
                out.extend(s.take_bindings());
            }
        }
        (n, out)
    }
}

/// Whether `id` has the shape of a session id a gateway issues (a UUID's characters).
fn plausible_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_issued_looking_ids_reach_the_shared_state() {
        assert!(super::plausible_id(&crate::ldp::new_id()));
        for bad in ["", "x:bindings", "../..", &"a".repeat(65), "abc def"] {
            assert!(!super::plausible_id(bad), "{bad}");
        }
    }
}
