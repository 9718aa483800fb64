//! Logged-in browsers: a bounded table of random session ids, each with its CSRF token and
//! expiry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most sessions kept; a login beyond it ends the one closest to expiry.
pub const MAX_SESSIONS: usize = 256;

/// How long a login lasts.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// One logged-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token every POST of this session carries in a hidden field.
    pub csrf: String,
    /// When it ends.
    pub expires: Instant,
}

/// The session table.
#[derive(Debug)]
pub struct Sessions {
    table: Mutex<HashMap<String, Session>>,
    max: usize,
    lifetime: Duration,
}

/// 244 random bits as 64 hex digits (two v4 UUIDs, from the OS's generator).
pub fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Sessions {
    /// An empty table of at most `max` sessions, each lasting `lifetime`.
    pub fn new(max: usize, lifetime: Duration) -> Sessions {
        Sessions {
            table: Mutex::new(HashMap::new()),
            max: max.max(1),
            lifetime,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding it left a plain map behind: still usable.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new session: its id (the cookie's value) and itself.
    pub fn open(&self) -> (String, Session) {
        let now = Instant::now();
        let id = random_token();
        let session = Session {
            csrf: random_token(),
            expires: now + self.lifetime,
        };
        let mut t = self.lock();
        t.retain(|_, s| s.expires > now);
        while t.len() >= self.max {
            let oldest = t
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    t.remove(&k);
                }
                None => break,
            }
        }
        t.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session `id` names, if any (an expired one is removed).
    pub fn get(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let mut t = self.lock();
        match t.get(id) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                t.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id`.
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Sessions now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_expiring() {
        let s = Sessions::new(2, Duration::from_secs(60));
        let (a, _) = s.open();
        let (b, _) = s.open();
        let (c, _) = s.open();
        assert_eq!(s.len(), 2);
        assert!(s.get(&a).is_none(), "the oldest was ended");
        assert!(s.get(&b).is_some() && s.get(&c).is_some());
        s.close(&b);
        assert!(s.get(&b).is_none());
        let gone = Sessions::new(2, Duration::ZERO);
        let (d, _) = gone.open();
        assert!(gone.get(&d).is_none(), "expired");
        assert_ne!(random_token(), random_token());
        assert_eq!(random_token().len(), 64);
    }
}
