//! The session cache: one open session per (endpoint, session config), least recently used
//! closed past the bound.

use crate::transport::Session;
use ldp_wire::SessionConfig;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// An open session and what it was opened with.
#[derive(Debug, Clone)]
pub(super) struct Open {
    /// The endpoint's base URL.
    pub(super) base: String,
    /// The session the delegate accepted.
    pub(super) session: Session,
    /// The session's idle TTL, when the proposal set one.
    ttl: Option<Duration>,
    /// Last handed out.
    pub(super) last_used: Instant,
}

impl Open {
    pub(super) fn new(base: &str, session: Session, ttl_secs: Option<u64>) -> Open {
        Open {
            base: base.to_owned(),
            session,
            ttl: ttl_secs.map(Duration::from_secs),
            last_used: Instant::now(),
        }
    }

    /// Idle past `idle`, or past the session's own TTL (the delegate has forgotten it).
    pub(super) fn expired(&self, idle: Duration) -> bool {
        let limit = self.ttl.map_or(idle, |ttl| ttl.min(idle));
        self.last_used.elapsed() >= limit
    }
}

/// One cache entry: the open session, if any, behind an async lock that makes concurrent
/// callers for the same key share one handshake.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Open>>>;

/// (base URL, session config as JSON).
type Key = (String, String);

/// The cache. A plain map under a short lock: it is touched once per task, holds at most
/// `max` entries, and an LRU crate would add nothing the eviction below does not do.
pub(super) struct Sessions {
    slots: Mutex<HashMap<Key, (Slot, Instant)>>,
    max: usize,
}

impl Sessions {
    pub(super) fn new(max: usize) -> Sessions {
        Sessions {
            slots: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, (Slot, Instant)>> {
        // A poisoned cache is still a cache: the worst a panic left is a stale entry.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(base: &str, config: &SessionConfig) -> Key {
        let config = serde_json::to_string(config).unwrap_or_default();
        (base.to_owned(), config)
    }

    /// The slot for (`base`, `config`), made if new; and the sessions evicted to make room
    /// (to be closed by the caller).
    pub(super) fn slot(&self, base: &str, config: &SessionConfig) -> (Slot, Vec<Open>) {
        let key = Self::key(base, config);
        let mut slots = self.lock();
        let now = Instant::now();
        if let Some((slot, used)) = slots.get_mut(&key) {
            *used = now;
            return (slot.clone(), Vec::new());
        }
        let mut evicted = Vec::new();
        while slots.len() >= self.max {
            let Some(oldest) = slots
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((slot, _)) = slots.remove(&oldest) {
                // A slot in use (a handshake under way) keeps its session; it is simply no
                // longer cached.
                if let Ok(mut open) = slot.try_lock() {
                    evicted.extend(open.take());
                }
            }
        }
        let slot = Slot::default();
        slots.insert(key, (slot.clone(), now));
        (slot, evicted)
    }

    /// Takes out every session idle past its time.
    pub(super) fn take_expired(&self, idle: Duration) -> Vec<Open> {
        let slots = self.lock();
        let mut out = Vec::new();
        for (slot, _) in slots.values() {
            if let Ok(mut open) = slot.try_lock() {
                if open.as_ref().is_some_and(|o| o.expired(idle)) {
                    out.extend(open.take());
                }
            }
        }
        out
    }

    /// Takes out every session.
    pub(super) fn take_all(&self) -> Vec<Open> {
        let mut slots = self.lock();
        slots
            .drain()
            .filter_map(|(_, (slot, _))| slot.try_lock().ok().and_then(|mut o| o.take()))
            .collect()
    }
}
