//! Client sessions in Redis: the session (`{p}:session:{id}`, JSON, its idle TTL) and its
//! per-skill bindings (`{p}:session:{id}:bindings`); this replica keeps copies in its table.

use super::{Found, OpenError, SessionStore};
use crate::registry::Registry;
use crate::session::{Binding, ClientSession, NewSession, SessionTable};
use crate::state::redis::Redis;
use crate::state::StoreError;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

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
            .key(crate::state::budget_store::session_account(&self.redis, id));
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
pub(super) fn plausible_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}
