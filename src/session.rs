//! Client sessions: the table of sessions the gateway issued, their per-skill upstream
//! bindings, idle expiry. This is one process's table: whether it is the truth or a copy of
//! state shared with other replicas is decided by the layer above it, which knows this one.

use crate::ldp::{NegotiatedPayload, SessionId, TaskId};
use crate::registry::Delegate;
use crate::upstream::UpstreamSession;
use dashmap::DashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A session bound upstream: the delegate serving one skill of a client session.
#[derive(Debug, Clone)]
pub struct Binding {
    /// The delegate.
    pub delegate: Arc<Delegate>,
    /// The upstream session with it.
    pub upstream: UpstreamSession,
}

/// A session the gateway issued to a client.
#[derive(Debug)]
pub struct ClientSession {
    /// Gateway-issued id.
    pub id: SessionId,
    /// Who opened it (tenant and envelope `from`); other callers cannot use it.
    pub owner: String,
    /// Its tenant.
    pub tenant: String,
    /// Spend charged to it (for `usd_per_session`).
    pub spend: crate::limits::budget::SessionSpend,
    /// The client's verified trust domain (C).
    pub client_domain: String,
    /// The domain its delegates must be in (R), if required.
    pub required_domain: Option<String>,
    /// What was agreed with the client.
    pub payload: NegotiatedPayload,
    /// Policy named at proposal time.
    pub policy: Option<String>,
    /// Idle timeout.
    pub ttl: Duration,
    last_used_ms: AtomicU64,
    /// Per-skill upstream sessions. A std mutex: held only to read or swap, never across await.
    bindings: Mutex<HashMap<String, Binding>>,
    /// Serialises opening upstream sessions, so two concurrent first tasks of one skill do not
    /// open two.
    pub handshake: tokio::sync::Mutex<()>,
    /// The delegate a task of a skill ran on with another session's upstream sessions (an A2A
    /// context's first task, `TaskCtx::binds`): this session's next task of the skill is
    /// bound to it while it fits, its affinity kept with no upstream session opened before.
    lent: Mutex<Option<(String, Arc<Delegate>)>>,
}

impl ClientSession {
    /// A stand-in for session `id` when it could not be looked up (the shared state did not
    /// answer, or no such session): never stored, it carries what the ledger row of the task
    /// failed for that reason needs, so every answered task has its row.
    pub fn stand_in(id: &str, owner: String, tenant: String) -> Self {
        ClientSession {
            id: id.into(),
            owner,
            tenant,
            spend: Default::default(),
            client_domain: String::new(),
            required_domain: None,
            payload: NegotiatedPayload::text(),
            policy: None,
            ttl: Duration::ZERO,
            last_used_ms: AtomicU64::new(0),
            bindings: Mutex::new(HashMap::new()),
            handshake: tokio::sync::Mutex::new(()),
            lent: Mutex::new(None),
        }
    }

    /// The binding for `skill`.
    pub fn binding(&self, skill: &str) -> Option<Binding> {
        self.bindings.lock().ok()?.get(skill).cloned()
    }

    /// Sets the binding for `skill`, returning the one it replaced.
    pub fn bind(&self, skill: &str, binding: Binding) -> Option<Binding> {
        self.bindings.lock().ok()?.insert(skill.to_owned(), binding)
    }

    /// Sets the binding for `skill` unless another task bound the same delegate meanwhile:
    /// `Err` with that binding (use it), else `Ok` with the one replaced (another delegate's).
    pub fn bind_first(&self, skill: &str, binding: Binding) -> Result<Option<Binding>, Binding> {
        let Ok(mut map) = self.bindings.lock() else {
            return Ok(None);
        };
        match map.get(skill) {
            Some(theirs) if Arc::ptr_eq(&theirs.delegate, &binding.delegate) => Err(theirs.clone()),
            _ => Ok(map.insert(skill.to_owned(), binding)),
        }
    }

    /// Removes the binding for `skill` if it is still the upstream session `upstream_id`.
    pub fn unbind(&self, skill: &str, upstream_id: &SessionId) -> Option<Binding> {
        let mut map = self.bindings.lock().ok()?;
        if map
            .get(skill)
            .is_some_and(|b| &b.upstream.session_id == upstream_id)
        {
            map.remove(skill)
        } else {
            None
        }
    }

    /// Removes the binding for `skill` if it is with `delegate` (after it failed the task).
    pub fn unbind_delegate(&self, skill: &str, delegate: &Arc<Delegate>) -> Option<Binding> {
        let mut map = self.bindings.lock().ok()?;
        if map
            .get(skill)
            .is_some_and(|b| Arc::ptr_eq(&b.delegate, delegate))
        {
            map.remove(skill)
        } else {
            None
        }
    }

    /// Every binding, taken out (for closing).
    pub fn take_bindings(&self) -> Vec<Binding> {
        self.bindings
            .lock()
            .map(|mut m| m.drain().map(|(_, b)| b).collect())
            .unwrap_or_default()
    }

    /// Makes this copy's bindings those of `shared` (cluster mode: another replica may have
    /// bound, rebound or dropped a skill). Unchanged bindings are kept as they are.
    pub fn sync_bindings(&self, shared: Vec<(String, Binding)>) {
        let Ok(mut map) = self.bindings.lock() else {
            return;
        };
        map.retain(|skill, _| shared.iter().any(|(s, _)| s == skill));
        for (skill, b) in shared {
            let same = map.get(&skill).is_some_and(|old| {
                old.upstream.session_id == b.upstream.session_id
                    && Arc::ptr_eq(&old.delegate, &b.delegate)
                    && old.upstream.payload == b.upstream.payload
            });
            if !same {
                map.insert(skill, b);
            }
        }
    }

    /// Notes that its task of `skill` ran on `delegate` with another session's upstream
    /// sessions.
    pub fn ran_lent(&self, skill: &str, delegate: &Arc<Delegate>) {
        if let Ok(mut lent) = self.lent.lock() {
            *lent = Some((skill.to_owned(), delegate.clone()));
        }
    }

    /// The delegate its task of `skill` ran on with another session's upstream sessions, taken
    /// (noted by [`ClientSession::ran_lent`]).
    pub fn take_lent(&self, skill: &str) -> Option<Arc<Delegate>> {
        let mut lent = self.lent.lock().ok()?;
        if lent.as_ref().is_some_and(|(s, _)| s == skill) {
            lent.take().map(|(_, d)| d)
        } else {
            None
        }
    }

    /// How many upstream sessions it holds.
    pub fn binding_count(&self) -> usize {
        self.bindings.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// A task in flight: whether it was cancelled (TASK_CANCEL, or its client left), and the
/// upstream calls it has running (the producer's, its verifiers'), so that a cancel stops it
/// from starting anything more and reaches every delegate it is running on. The proxy's table
/// of running tasks finds it for a cancel from the moment its request is admitted.
#[derive(Debug)]
pub struct RunningTask {
    /// Cancelled: nothing more starts.
    cancel: tokio_util::sync::CancellationToken,
    /// Its calls in flight are dropped (once their delegates were sent TASK_CANCEL, so that
    /// the cancel arrives while the delegate still runs the task).
    abandon: tokio_util::sync::CancellationToken,
    calls: Mutex<Vec<(u64, Binding, TaskId)>>,
    next_call: AtomicU64,
    /// Its run is over (its answer is being recorded): there is nothing left to cancel.
    finished: std::sync::atomic::AtomicBool,
}

impl RunningTask {
    /// A task not cancelled, with no call running.
    pub fn new() -> Arc<RunningTask> {
        Arc::new(RunningTask {
            cancel: tokio_util::sync::CancellationToken::new(),
            abandon: tokio_util::sync::CancellationToken::new(),
            calls: Mutex::new(Vec::new()),
            next_call: AtomicU64::new(0),
            finished: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Its run is over: a cancel no longer finds it.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// Whether its run is over.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Cancels it (nothing more starts); the calls it has running upstream (binding, the
    /// task id they were sent), to be told, then dropped ([`RunningTask::abandon`]).
    pub fn cancel(&self) -> Vec<(Binding, TaskId)> {
        self.cancel.cancel();
        self.calls
            .lock()
            .map(|c| c.iter().map(|(_, b, t)| (b.clone(), t.clone())).collect())
            .unwrap_or_default()
    }

    /// Whether it was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Its cancellation: cancelled, nothing more starts (an upstream call checks it).
    pub fn cancelled_token(&self) -> &tokio_util::sync::CancellationToken {
        &self.cancel
    }

    /// Its abandonment: its calls in flight are dropped (an upstream call may wait for it).
    pub fn abandoned_token(&self) -> &tokio_util::sync::CancellationToken {
        &self.abandon
    }

    /// Drops its calls in flight (after [`RunningTask::cancel`]).
    pub fn abandon(&self) {
        self.cancel.cancel();
        self.abandon.cancel();
    }

    /// Resolves once its calls in flight are to be dropped.
    pub async fn abandoned(&self) {
        self.abandon.cancelled().await;
    }

    /// Records a call to `binding` (sent as `task_id`) while the guard lives. A call a cancel
    /// may have missed (it started as the cancel read the list) is never made: the caller
    /// checks [`RunningTask::is_cancelled`] after taking the guard.
    pub fn call(self: &Arc<Self>, binding: &Binding, task_id: &TaskId) -> CallGuard {
        let id = self.next_call.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut c) = self.calls.lock() {
            c.push((id, binding.clone(), task_id.clone()));
        }
        CallGuard {
            task: self.clone(),
            id,
        }
    }
}

/// A call to an upstream, listed in its task while it runs ([`RunningTask::call`]).
#[derive(Debug)]
pub struct CallGuard {
    task: Arc<RunningTask>,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Ok(mut c) = self.task.calls.lock() {
            c.retain(|(id, _, _)| *id != self.id);
        }
    }
}

/// Parameters of a new session.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Tenant and envelope `from` of the proposal.
    pub owner: String,
    /// The tenant.
    pub tenant: String,
    /// Verified client domain.
    pub client_domain: String,
    /// Required delegate domain.
    pub required_domain: Option<String>,
    /// Negotiated with the client.
    pub payload: NegotiatedPayload,
    /// Named policy.
    pub policy: Option<String>,
    /// Idle timeout.
    pub ttl: Duration,
}

/// All client sessions.
pub struct SessionTable {
    map: DashMap<SessionId, Arc<ClientSession>>,
    per_tenant: DashMap<String, usize>,
    epoch: Instant,
}

impl Default for SessionTable {
    fn default() -> Self {
        SessionTable {
            map: DashMap::new(),
            per_tenant: DashMap::new(),
            epoch: Instant::now(),
        }
    }
}

/// Why a session could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionLimit {
    /// The gateway holds its maximum of sessions.
    #[error("the gateway has its maximum of {0} open sessions")]
    Overall(usize),
    /// The tenant holds its maximum.
    #[error("tenant has its maximum of {0} open sessions")]
    Tenant(usize),
}

impl SessionTable {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn forget_counts(&self, s: &ClientSession) {
        if let Some(mut n) = self.per_tenant.get_mut(&s.tenant) {
            *n = n.saturating_sub(1);
        }
    }

    /// Opens a session unless the overall or the tenant's session limit is reached. The
    /// check and the insert are not one atomic step; concurrent opens may pass a limit by at
    /// most the number of racing requests.
    pub fn open_limited(
        &self,
        new: NewSession,
        overall: usize,
        tenant: Option<usize>,
    ) -> Result<Arc<ClientSession>, SessionLimit> {
        if self.map.len() >= overall {
            return Err(SessionLimit::Overall(overall));
        }
        if let Some(max) = tenant {
            if self.per_tenant.get(&new.tenant).is_some_and(|n| *n >= max) {
                return Err(SessionLimit::Tenant(max));
            }
        }
        Ok(self.open(new))
    }

    /// Opens a session with a fresh gateway-issued id.
    pub fn open(&self, new: NewSession) -> Arc<ClientSession> {
        self.insert(crate::ldp::new_id(), new)
    }

    /// Cluster mode: this replica's copy of session `id`, which another replica may have
    /// opened; touching it restarts its idle clock here.
    pub fn adopt(&self, id: &str, new: NewSession) -> Arc<ClientSession> {
        if let Some(s) = self.map.get(id).map(|s| s.clone()) {
            s.last_used_ms.store(self.now_ms(), Ordering::Release);
            return s;
        }
        self.insert(id.to_owned(), new)
    }

    /// This replica's copy of session `id`, whoever owns it, without touching it.
    pub fn peek(&self, id: &str) -> Option<Arc<ClientSession>> {
        self.map.get(id).map(|s| s.clone())
    }

    /// Drops this replica's copy of session `id` (cluster mode: it is gone everywhere, or
    /// idle here while another replica serves it). Returns it.
    pub fn forget(&self, id: &str) -> Option<Arc<ClientSession>> {
        let (_, s) = self.map.remove(id)?;
        self.forget_counts(&s);
        Some(s)
    }

    fn insert(&self, id: String, new: NewSession) -> Arc<ClientSession> {
        *self.per_tenant.entry(new.tenant.clone()).or_insert(0) += 1;
        let session = Arc::new(ClientSession {
            id: id.into(),
            owner: new.owner,
            tenant: new.tenant,
            spend: Default::default(),
            client_domain: new.client_domain,
            required_domain: new.required_domain,
            payload: new.payload,
            policy: new.policy,
            ttl: new.ttl,
            last_used_ms: AtomicU64::new(self.now_ms()),
            bindings: Mutex::new(HashMap::new()),
            handshake: tokio::sync::Mutex::new(()),
            lent: Mutex::new(None),
        });
        self.map.insert(session.id.clone(), session.clone());
        session
    }

    /// The live session `id` if `owner` opened it; touching it resets its idle clock. Unknown,
    /// expired and someone else's sessions all look the same: `None`.
    pub fn get(&self, id: &str, owner: &str) -> Option<Arc<ClientSession>> {
        let s = self.map.get(id)?.clone();
        if s.owner != owner {
            return None;
        }
        let now = self.now_ms();
        let last = s.last_used_ms.load(Ordering::Acquire);
        if now.saturating_sub(last) > s.ttl.as_millis() as u64 {
            return None;
        }
        s.last_used_ms.store(now, Ordering::Release);
        Some(s)
    }

    /// Removes session `id` if `owner` opened it, freeing its tenant's slot.
    pub fn close(&self, id: &str, owner: &str) -> Option<Arc<ClientSession>> {
        let (_, s) = self.map.remove_if(id, |_, s| s.owner == owner)?;
        self.forget_counts(&s);
        Some(s)
    }

    /// Removes and returns every session idle past its TTL.
    pub fn take_expired(&self) -> Vec<Arc<ClientSession>> {
        let now = self.now_ms();
        let expired: Vec<SessionId> = self
            .map
            .iter()
            .filter(|e| {
                now.saturating_sub(e.last_used_ms.load(Ordering::Acquire))
                    > e.ttl.as_millis() as u64
            })
            .map(|e| e.key().clone())
            .collect();
        let gone: Vec<Arc<ClientSession>> = expired
            .into_iter()
            .filter_map(|id| self.map.remove(&id).map(|(_, s)| s))
            .collect();
        for s in &gone {
            self.forget_counts(s);
        }
        gone
    }

    /// Removes and returns every session (shutdown).
    pub fn take_all(&self) -> Vec<Arc<ClientSession>> {
        let ids: Vec<SessionId> = self.map.iter().map(|e| e.key().clone()).collect();
        let gone: Vec<Arc<ClientSession>> = ids
            .into_iter()
            .filter_map(|id| self.map.remove(&id).map(|(_, s)| s))
            .collect();
        for s in &gone {
            self.forget_counts(s);
        }
        gone
    }

    /// Sessions `tenant` holds open (the count its `max_sessions` is checked against).
    pub fn tenant_count(&self, tenant: &str) -> usize {
        self.per_tenant.get(tenant).map_or(0, |n| *n)
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every session (admin listing).
    pub fn list(&self) -> Vec<Arc<ClientSession>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(owner: &str, ttl: Duration) -> NewSession {
        NewSession {
            owner: owner.into(),
            tenant: "t".into(),
            client_domain: "default".into(),
            required_domain: None,
            payload: NegotiatedPayload::text(),
            policy: None,
            ttl,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_expire_and_use_keeps_them_alive() {
        let t = SessionTable::default();
        let s = t.open(new("a", Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(8)).await;
        assert!(t.get(&s.id, "a").is_some());
        tokio::time::advance(Duration::from_secs(8)).await;
        assert!(t.take_expired().is_empty());
        assert!(t.get(&s.id, "a").is_some());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(t.get(&s.id, "a").is_none());
        assert_eq!(t.take_expired().len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn every_exit_frees_the_tenant_slot() {
        let t = SessionTable::default();
        for _ in 0..3 {
            let s = t.open_limited(new("a", Duration::from_secs(10)), 100, Some(1));
            let s = s.unwrap();
            assert_eq!(t.tenant_count("t"), 1);
            assert!(t.close(&s.id, "a").is_some());
            assert_eq!(t.tenant_count("t"), 0);
        }
        let s = t.open(new("a", Duration::from_secs(10)));
        assert!(t.forget(&s.id).is_some());
        t.open(new("a", Duration::from_secs(10)));
        assert_eq!(t.take_all().len(), 1);
        assert_eq!(t.tenant_count("t"), 0);
    }

    #[tokio::test]
    async fn sessions_are_bound_to_their_owner() {
        let t = SessionTable::default();
        let s = t.open(new("a", Duration::from_secs(10)));
        assert!(t.get(&s.id, "b").is_none());
        assert!(t.close(&s.id, "b").is_none());
        assert!(t.close(&s.id, "a").is_some());
        assert!(t.get(&s.id, "a").is_none());
    }
}
