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

use super::redis::Redis;
use super::StoreError;
use crate::registry::Registry;
use crate::session::{Binding, ClientSession, NewSession, SessionLimit, SessionTable};
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

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

/// A client session as every replica sees it (`{p}:session:{id}`, JSON).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SharedSession {
    /// Tenant and envelope `from` of the opener.
    pub owner: String,
    /// Its tenant.
    pub tenant: String,
    /// Verified client domain.
    pub client_domain: String,
    /// Required delegate domain.
    pub required_domain: Option<String>,
    /// Negotiated with the client.
    pub payload: crate::ldp::NegotiatedPayload,
    /// Named policy.
    pub policy: Option<String>,
    /// Idle TTL, ms.
    pub ttl_ms: u64,
}

/// A session's upstream binding for one skill, as every replica sees it (a field of
/// `{p}:session:{id}:bindings`, JSON).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SharedBinding {
    /// The delegate's registry name.
    pub delegate: String,
    /// The upstream session with it.
    pub upstream: crate::upstream::UpstreamSession,
}

/// Session touch. KEYS: the session, its bindings, its budget account. Returns `{session
/// json, {skill, binding json, …}}` after restarting the TTLs (the session's own `ttl_ms`; the
/// budget account an hour more, so a live session's spend is never forgotten), or nil.
static TOUCH: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local s = redis.call('GET', KEYS[1])
if not s then return nil end
local ttl = cjson.decode(s)['ttl_ms']
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl + 3600000)
return {s, redis.call('HGETALL', KEYS[2])}
",
    )
});

/// First binding of a skill. KEYS: the bindings hash. ARGV: skill, binding json, TTL (ms).
/// Sets it if absent (nil back); otherwise returns the binding already there.
static FIRST_BINDING: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return nil
end
return redis.call('HGET', KEYS[1], ARGV[1])
",
    )
});

/// Session close. KEYS: the session, its bindings. ARGV: the owner. Deletes both if the owner
/// matches and returns the bindings `{skill, json, …}`; nil otherwise.
static CLOSE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local s = redis.call('GET', KEYS[1])
if not s or cjson.decode(s)['owner'] ~= ARGV[1] then return nil end
local b = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
return b
",
    )
});

/// Cluster mode: this replica's copies, and the truth in Redis.
pub struct RedisSessions {
    table: SessionTable,
    redis: Redis,
    /// Resolves a shared binding's delegate name to this replica's delegate.
    registry: Arc<Registry>,
}

fn json_error(e: serde_json::Error) -> StoreError {
    StoreError::Redis(e.to_string())
}

impl RedisSessions {
    /// Sessions shared through `redis`, their bindings resolved in `registry`.
    pub fn new(redis: Redis, registry: Arc<Registry>) -> RedisSessions {
        RedisSessions {
            table: SessionTable::default(),
            redis,
            registry,
        }
    }

    fn keys(&self, id: &str) -> (String, String) {
        (
            self.redis.key(format_args!("session:{id}")),
            self.redis.key(format_args!("session:{id}:bindings")),
        )
    }

    /// A shared binding as one of this replica's (`None` if its delegate is unknown here).
    fn resolve(&self, b: SharedBinding) -> Option<Binding> {
        Some(Binding {
            delegate: self.registry.get(&b.delegate)?,
            upstream: b.upstream,
        })
    }

    fn shared(b: &Binding) -> SharedBinding {
        SharedBinding {
            delegate: b.delegate.name.clone(),
            upstream: b.upstream.clone(),
        }
    }

    /// Stores a new session (it lives its TTL past its last use, on any replica).
    async fn put(&self, id: &str, s: &SharedSession) -> Result<(), StoreError> {
        let (key, _) = self.keys(id);
        let json = serde_json::to_string(s).map_err(json_error)?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(json).arg("PX").arg(s.ttl_ms.max(1));
        self.redis.query("session_put", &cmd).await
    }

    /// A session and its bindings, touched; `None` if it does not exist (never opened,
    /// expired or closed by any replica).
    async fn touch(
        &self,
        id: &str,
    ) -> Result<Option<(SharedSession, Vec<(String, SharedBinding)>)>, StoreError> {
        let (key, bindings) = self.keys(id);
        let mut inv = TOUCH.key(key);
        inv.key(bindings)
            .key(super::budgets::session_account(&self.redis, id));
        let out: Option<(String, Vec<(String, String)>)> =
            self.redis.invoke("session_touch", &inv).await?;
        let Some((json, pairs)) = out else {
            return Ok(None);
        };
        let session: SharedSession = serde_json::from_str(&json).map_err(json_error)?;
        Ok(Some((session, parse_bindings(pairs))))
    }

    /// Whether session `id` still exists anywhere.
    async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        let (key, _) = self.keys(id);
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(key);
        let n: i64 = self.redis.query("session_exists", &cmd).await?;
        Ok(n > 0)
    }
}

impl SessionStore for RedisSessions {
    fn table(&self) -> &SessionTable {
        &self.table
    }

    async fn open(
        &self,
        new: NewSession,
        overall: usize,
        tenant: Option<usize>,
    ) -> Result<Arc<ClientSession>, OpenError> {
        let s = self.table.open_limited(new, overall, tenant)?;
        let shared = SharedSession {
            owner: s.owner.clone(),
            tenant: s.tenant.clone(),
            client_domain: s.client_domain.clone(),
            required_domain: s.required_domain.clone(),
            payload: s.payload.clone(),
            policy: s.policy.clone(),
            ttl_ms: s.ttl.as_millis().max(1) as u64,
        };
        if let Err(e) = self.put(&s.id, &shared).await {
            self.table.forget(&s.id);
            return Err(e.into());
        }
        Ok(s)
    }

    /// This replica's copy takes the shared bindings; a copy of a session gone elsewhere is
    /// dropped (its bindings come back to close: a second close of a shared one is harmless).
    async fn get(&self, id: &str, owner: &str) -> Result<Found, StoreError> {
        if !plausible_id(id) {
            // Not an id this gateway issues: no need to ask (and no odd Redis keys).
            return Ok(Found::default());
        }
        let Some((shared, bindings)) = self.touch(id).await? else {
            let stale = self
                .table
                .forget(id)
                .map(|gone| gone.take_bindings())
                .unwrap_or_default();
            return Ok(Found {
                session: None,
                stale,
            });
        };
        if shared.owner != owner {
            return Ok(Found::default());
        }
        let session = self.table.adopt(
            id,
            NewSession {
                owner: shared.owner,
                tenant: shared.tenant,
                client_domain: shared.client_domain,
                required_domain: shared.required_domain,
                payload: shared.payload,
                policy: shared.policy,
                ttl: Duration::from_millis(shared.ttl_ms),
            },
        );
        let resolved = bindings
            .into_iter()
            .filter_map(|(skill, b)| Some((skill, self.resolve(b)?)))
            .collect();
        // A binding another replica replaced is not closed here: replicas may still be using
        // it (it lapses at the delegate after its idle TTL).
        session.sync_bindings(resolved);
        Ok(Found {
            session: Some(session),
            stale: Vec::new(),
        })
    }

    /// A failure only costs another replica a new upstream session.
    async fn share_binding(&self, s: &ClientSession, skill: &str, b: &Binding) {
        let (_, key) = self.keys(&s.id);
        let put = serde_json::to_string(&Self::shared(b))
            .map_err(json_error)
            .map(|json| {
                let mut pipe = redis::pipe();
                pipe.atomic()
                    .hset(&key, skill, json)
                    .ignore()
                    .pexpire(&key, s.ttl.as_millis().max(1) as i64)
                    .ignore();
                pipe
            });
        let shared = match put {
            Ok(pipe) => self.redis.pipeline::<()>("binding_put", &pipe).await,
            Err(e) => Err(e),
        };
        if let Err(e) = shared {
            tracing::warn!(session_id = %s.id, skill, error = %e, "binding not shared");
        }
    }

    async fn share_first_binding(
        &self,
        s: &ClientSession,
        skill: &str,
        b: &Binding,
    ) -> Option<Binding> {
        let (_, key) = self.keys(&s.id);
        let there: Result<Option<String>, StoreError> =
            match serde_json::to_string(&Self::shared(b)) {
                Ok(json) => {
                    let mut inv = FIRST_BINDING.key(key);
                    inv.arg(skill)
                        .arg(json)
                        .arg(s.ttl.as_millis().max(1) as u64);
                    self.redis.invoke("binding_put_first", &inv).await
                }
                Err(e) => Err(json_error(e)),
            };
        match there {
            Ok(Some(json)) => {
                let winner: SharedBinding = serde_json::from_str(&json).ok()?;
                if winner.upstream.session_id == b.upstream.session_id {
                    return None;
                }
                self.resolve(winner)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(session_id = %s.id, skill, error = %e, "binding not shared");
                None
            }
        }
    }

    async fn unshare_binding(&self, s: &ClientSession, skill: &str) {
        let (_, key) = self.keys(&s.id);
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(key).arg(skill);
        if let Err(e) = self.redis.query::<i64>("binding_remove", &cmd).await {
            tracing::warn!(session_id = %s.id, skill, error = %e, "binding not withdrawn");
        }
    }

    /// The shared bindings, and those this replica opened but never managed to share.
    async fn close(&self, id: &str, owner: &str) -> Result<Vec<Binding>, StoreError> {
        if !plausible_id(id) {
            return Ok(Vec::new());
        }
        let (key, bindings) = self.keys(id);
        let mut inv = CLOSE.key(key);
        inv.key(bindings).arg(owner);
        let shared: Option<Vec<(String, String)>> =
            self.redis.invoke("session_close", &inv).await?;
        // Another owner's copy stays; the owner's own copy goes (closed now, or already gone
        // from the shared state, e.g. a retried close).
        let local = match self.table.peek(id) {
            Some(s) if s.owner == owner => self.table.forget(id),
            _ => None,
        };
        let local = local.map(|s| s.take_bindings()).unwrap_or_default();
        let Some(shared) = shared else {
            return Ok(local);
        };
        let mut out: Vec<Binding> = parse_bindings(shared)
            .into_iter()
            .filter_map(|(_, b)| self.resolve(b))
            .collect();
        for b in local {
            if !out
                .iter()
                .any(|o| o.upstream.session_id == b.upstream.session_id)
            {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// A session idle here may be busy on another replica: only this copy is dropped unless
    /// it is gone from the shared state too.
    async fn take_expired(&self) -> (usize, Vec<Binding>) {
        let expired = self.table.take_expired();
        let n = expired.len();
        let mut out = Vec::new();
        for s in expired {
            if matches!(self.exists(&s.id).await, Ok(false)) {
                out.extend(s.take_bindings());
            }
        }
        (n, out)
    }

    fn take_all(&self) -> Vec<Binding> {
        self.table.take_all();
        Vec::new()
    }
}

/// A bindings hash as `(skill, binding)`; an entry that does not parse is skipped (the
/// session then opens a new upstream session for that skill).
fn parse_bindings(pairs: Vec<(String, String)>) -> Vec<(String, SharedBinding)> {
    pairs
        .into_iter()
        .filter_map(|(skill, b)| Some((skill, serde_json::from_str(&b).ok()?)))
        .collect()
}

/// Whether `id` has the shape of a session id a gateway issues (a UUID's characters).
fn plausible_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldp::NegotiatedPayload;
    use crate::upstream::UpstreamSession;

    #[test]
    fn only_issued_looking_ids_reach_the_shared_state() {
        assert!(plausible_id(&crate::ldp::new_id()));
        for bad in ["", "x:bindings", "../..", &"a".repeat(65), "abc def"] {
            assert!(!plausible_id(bad), "{bad}");
        }
    }

    fn new(owner: &str) -> NewSession {
        NewSession {
            owner: owner.into(),
            tenant: "acme".into(),
            client_domain: "default".into(),
            required_domain: None,
            payload: NegotiatedPayload::text(),
            policy: Some("fast".into()),
            ttl: Duration::from_secs(60),
        }
    }

    fn registry() -> Arc<Registry> {
        let cfg = crate::config::DelegateConfig {
            url: "http://127.0.0.1:9".into(),
            name: Some("d1".into()),
            weight: None,
            labels: Default::default(),
            max_in_flight: None,
            limits: None,
            signing_secret_env: None,
        };
        Arc::new(Registry::from_config(&[cfg], Default::default()).unwrap())
    }

    fn binding(registry: &Registry, upstream_id: &str) -> Binding {
        Binding {
            delegate: registry.get("d1").unwrap(),
            upstream: UpstreamSession {
                session_id: upstream_id.into(),
                payload: NegotiatedPayload::text(),
                delegate_id: "d1-id".into(),
            },
        }
    }

    #[tokio::test]
    async fn local_sessions_are_the_table() {
        let reg = registry();
        let store = Sessions::Local(LocalSessions::default());
        let s = store.open(new("a"), 10, Some(1)).await.unwrap();
        assert!(matches!(
            store.open(new("a"), 10, Some(1)).await,
            Err(OpenError::Limit(SessionLimit::Tenant(1)))
        ));
        assert!(store.get(&s.id, "b").await.unwrap().session.is_none());
        let found = store.get(&s.id, "a").await.unwrap().session.unwrap();
        assert!(Arc::ptr_eq(&found, &s));
        s.bind("echo", binding(&reg, "u1"));
        store.share_binding(&s, "echo", &binding(&reg, "u1")).await;
        assert!(store
            .share_first_binding(&s, "echo", &binding(&reg, "u2"))
            .await
            .is_none());
        assert!(store.close(&s.id, "b").await.unwrap().is_empty());
        let closed = store.close(&s.id, "a").await.unwrap();
        assert_eq!(closed.len(), 1);
        assert_eq!(store.table().len(), 0);
        let s = store.open(new("a"), 10, None).await.unwrap();
        s.bind("echo", binding(&reg, "u3"));
        assert_eq!(
            store.take_all().len(),
            1,
            "a single node closes what it holds"
        );
    }

    fn replicas() -> (Sessions, Sessions, Arc<Registry>) {
        let (redis, _) = crate::state::redis::testing::redis();
        let reg = registry();
        (
            Sessions::Shared(RedisSessions::new(redis.clone(), reg.clone())),
            Sessions::Shared(RedisSessions::new(redis, reg.clone())),
            reg,
        )
    }

    #[tokio::test]
    async fn a_session_opened_on_one_replica_is_served_and_closed_on_another() {
        let (a, b, reg) = replicas();
        let s = a.open(new("o"), 10, None).await.unwrap();
        s.bind("echo", binding(&reg, "u1"));
        a.share_binding(&s, "echo", &binding(&reg, "u1")).await;

        let copy = b.get(&s.id, "o").await.unwrap().session.unwrap();
        assert_eq!(copy.policy.as_deref(), Some("fast"));
        assert_eq!(copy.binding("echo").unwrap().upstream.session_id, "u1");
        assert!(b.get(&s.id, "intruder").await.unwrap().session.is_none());
        assert!(b.get("not an id", "o").await.unwrap().session.is_none());

        // B rebinds; A's next lookup sees it. B withdraws another skill's binding.
        copy.bind("echo", binding(&reg, "u2"));
        b.share_binding(&copy, "echo", &binding(&reg, "u2")).await;
        b.share_binding(&copy, "other", &binding(&reg, "u9")).await;
        b.unshare_binding(&copy, "other").await;
        let again = a.get(&s.id, "o").await.unwrap().session.unwrap();
        assert_eq!(again.binding("echo").unwrap().upstream.session_id, "u2");
        assert!(again.binding("other").is_none());

        // Closed on B: A's copy is dropped at its next lookup, its bindings handed back.
        assert!(b.close(&s.id, "intruder").await.unwrap().is_empty());
        let closed = b.close(&s.id, "o").await.unwrap();
        assert_eq!(closed.len(), 1);
        assert_eq!(b.table().len(), 0);
        let gone = a.get(&s.id, "o").await.unwrap();
        assert!(gone.session.is_none());
        assert_eq!(gone.stale.len(), 1);
        assert_eq!(a.table().len(), 0);
        // Shutdown leaves the shared sessions to the other replicas.
        let s = a.open(new("o"), 10, None).await.unwrap();
        s.bind("echo", binding(&reg, "u5"));
        assert!(a.take_all().is_empty());
        assert!(b.get(&s.id, "o").await.unwrap().session.is_some());
    }

    #[tokio::test]
    async fn the_first_binding_published_wins() {
        let (a, b, reg) = replicas();
        let s = a.open(new("o"), 10, None).await.unwrap();
        let copy = b.get(&s.id, "o").await.unwrap().session.unwrap();
        assert!(a
            .share_first_binding(&s, "echo", &binding(&reg, "ua"))
            .await
            .is_none());
        let winner = b
            .share_first_binding(&copy, "echo", &binding(&reg, "ub"))
            .await
            .unwrap();
        assert_eq!(winner.upstream.session_id, "ua");
        // Publishing the winner again is not a conflict.
        assert!(b
            .share_first_binding(&copy, "echo", &winner)
            .await
            .is_none());
    }

    #[tokio::test]
    async fn an_expired_copy_keeps_its_bindings_while_the_session_lives_elsewhere() {
        let (redis, _) = crate::state::redis::testing::redis();
        let reg = registry();
        let a = RedisSessions::new(redis.clone(), reg.clone());
        let b = RedisSessions::new(redis, reg.clone());
        let s = b.open(new("o"), 10, None).await.unwrap();
        // A's copy idles out (1 ms) while the session lives on in Redis (60 s).
        let expire_copy = || async {
            let mut short = new("o");
            short.ttl = Duration::ZERO;
            let copy = a.table.adopt(&s.id, short);
            copy.bind("echo", binding(&reg, "u1"));
            loop {
                let (n, bindings) = a.take_expired().await;
                if n == 1 {
                    return bindings;
                }
                tokio::task::yield_now().await;
            }
        };
        assert!(
            expire_copy().await.is_empty(),
            "another replica may still use them"
        );
        b.close(&s.id, "o").await.unwrap();
        assert_eq!(expire_copy().await.len(), 1, "gone everywhere: closed");
    }
}
