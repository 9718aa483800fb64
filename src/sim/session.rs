//! The simulated delegate's session table: the ids it issued and their idle TTL.

use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// One open session. Closed and expired sessions are removed, so every entry is ACTIVE.
#[derive(Debug)]
struct Session {
    ttl: Duration,
    last_used: Instant,
}

impl Session {
    fn expired(&self, now: Instant) -> bool {
        // `duration_since` saturates, and no `Instant + ttl` is formed, so a huge TTL is safe.
        now.duration_since(self.last_used) >= self.ttl
    }
}

/// Why a session id is not usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Missing {
    /// Never issued here, or closed.
    Unknown,
    /// Idle for longer than its TTL; removed by this lookup.
    Expired {
        /// The TTL it had.
        ttl: Duration,
    },
}

/// Open sessions by id. Pure: every call receives the current time.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    map: HashMap<String, Session>,
}

impl Sessions {
    /// Records a new ACTIVE session.
    pub(super) fn open(&mut self, id: String, ttl: Duration, now: Instant) {
        self.map.insert(
            id,
            Session {
                ttl,
                last_used: now,
            },
        );
    }

    /// Marks `id` as used now, or says why it cannot be used (an expired one is removed).
    pub(super) fn touch(&mut self, id: &str, now: Instant) -> Result<(), Missing> {
        let session = self.map.get_mut(id).ok_or(Missing::Unknown)?;
        if session.expired(now) {
            let ttl = session.ttl;
            self.map.remove(id);
            return Err(Missing::Expired { ttl });
        }
        session.last_used = now;
        Ok(())
    }

    /// Closes `id`; whether it was open.
    pub(super) fn close(&mut self, id: &str) -> bool {
        self.map.remove(id).is_some()
    }

    /// Removes every expired session; how many were removed.
    pub(super) fn sweep(&mut self, now: Instant) -> u64 {
        let before = self.map.len();
        self.map.retain(|_, s| !s.expired(now));
        (before - self.map.len()) as u64
    }

    /// Number of open sessions.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn touch_extends_idle_ttl() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        s.open("a".into(), 10 * SEC, t0);
        assert_eq!(s.touch("a", t0 + 9 * SEC), Ok(()));
        assert_eq!(
            s.touch("a", t0 + 18 * SEC),
            Ok(()),
            "use restarts the idle clock"
        );
        assert_eq!(
            s.touch("a", t0 + 28 * SEC),
            Err(Missing::Expired { ttl: 10 * SEC })
        );
        assert_eq!(
            s.touch("a", t0 + 28 * SEC),
            Err(Missing::Unknown),
            "expired ones are removed"
        );
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn close_and_unknown() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        s.open("a".into(), SEC, t0);
        assert!(s.close("a"));
        assert!(!s.close("a"));
        assert_eq!(s.touch("a", t0), Err(Missing::Unknown));
        assert_eq!(s.touch("never", t0), Err(Missing::Unknown));
    }

    #[test]
    fn sweep_counts_only_expired() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        s.open("short".into(), SEC, t0);
        s.open("long".into(), 100 * SEC, t0);
        s.open("huge".into(), Duration::MAX, t0);
        assert_eq!(s.sweep(t0), 0);
        assert_eq!(s.sweep(t0 + 2 * SEC), 1);
        assert_eq!(s.len(), 2);
        assert_eq!(s.touch("long", t0 + 3 * SEC), Ok(()));
    }
}
