//! Replay guard: refuses stale timestamps and a message id + nonce seen before in the window.
//!
//! Pure apart from a mutex: the clock is passed in (`now`), so tests drive time. Call it
//! **after** the signature has been verified: an unauthenticated caller must not be able to
//! fill the table or burn another sender's nonces.
//!
//! Differences from the reference SDKs' guards, all in the safe direction:
//! - an unparseable timestamp is refused (they let it through unchecked);
//! - a message without a nonce is remembered by its message id alone (they do not deduplicate
//!   it), so an unchanged signed message cannot be replayed even towards peers that never send
//!   nonces;
//! - an entry is kept until its timestamp leaves the window, and when the table is full of
//!   such entries new messages are refused ([`ReplayError::Overloaded`]) rather than the
//!   oldest entry forgotten: a forgotten nonce could be replayed while its timestamp is still
//!   fresh. Size `capacity` for the peak signed-message rate times twice the window.

use super::envelope::Envelope;
use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Why a message was refused as a possible replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The timestamp is further from now than the window allows (positive: in the past).
    #[error("message timestamp is {skew_secs} s away from now, outside the replay window")]
    Stale {
        /// `now - timestamp`, in whole seconds.
        skew_secs: i64,
    },
    /// This message id and nonce were already accepted within the window.
    #[error("message id and nonce were already seen")]
    Replayed,
    /// The table is full of unexpired entries; the message is refused rather than one of
    /// them forgotten.
    #[error("too many recent signed messages to remember another")]
    Overloaded,
    /// The timestamp is not an RFC 3339 time.
    #[error("message timestamp is not an RFC 3339 time")]
    BadTimestamp,
}

/// The (message id, nonce) pair, hashed: a fixed 32 bytes per entry whatever the ids' length,
/// so `capacity` bounds memory.
type Key = [u8; 32];

/// Whether `timestamp` parses and lies within `window` of `now` (either side): the freshness
/// half of the replay check, for cluster mode where first use is checked in Redis.
pub fn check_fresh(
    timestamp: &str,
    now: DateTime<Utc>,
    window: Duration,
) -> Result<(), ReplayError> {
    let sent = parse_timestamp(timestamp).ok_or(ReplayError::BadTimestamp)?;
    let window = TimeDelta::from_std(window).unwrap_or(TimeDelta::MAX);
    let skew = now.signed_duration_since(sent);
    if skew > window || skew < -window {
        return Err(ReplayError::Stale {
            skew_secs: skew.num_seconds(),
        });
    }
    Ok(())
}

/// Remembers recently accepted messages. `Send + Sync`; share it behind an `Arc`.
#[derive(Debug)]
pub struct ReplayGuard {
    window: TimeDelta,
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Key → the instant after which its timestamp is stale, so it can be forgotten.
    seen: HashMap<Key, DateTime<Utc>>,
    /// The same entries, soonest expiry first. Each key is in both or neither.
    expiries: BinaryHeap<Reverse<(DateTime<Utc>, Key)>>,
    /// The latest `now` any call passed. Freshness is judged against it, so a caller whose
    /// clock reading lost a race to the lock cannot accept a message whose entry a later
    /// reading has already evicted.
    latest: Option<DateTime<Utc>>,
}

impl ReplayGuard {
    /// A guard accepting timestamps within `window` of now (either side) and remembering at
    /// most `capacity` messages (`0` refuses every message).
    pub fn new(window: Duration, capacity: usize) -> ReplayGuard {
        ReplayGuard {
            window: TimeDelta::from_std(window).unwrap_or(TimeDelta::MAX),
            capacity,
            state: Mutex::new(State::default()),
        }
    }

    /// Accepts the message (and remembers it) or says why not. Checks, in order: the
    /// timestamp parses; it is within the window of `now`; the (message id, nonce) pair is
    /// new; there is room to remember it.
    pub fn check(
        &self,
        message_id: &str,
        nonce: Option<&str>,
        timestamp: &str,
        now: DateTime<Utc>,
    ) -> Result<(), ReplayError> {
        let sent = parse_timestamp(timestamp).ok_or(ReplayError::BadTimestamp)?;
        let key = key(message_id, nonce);
        // The state is consistent between statements, so a panic elsewhere cannot leave it
        // half-updated; carry on with it.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = state.latest.map_or(now, |latest| latest.max(now));
        state.latest = Some(now);

        let skew = now.signed_duration_since(sent);
        if skew > self.window || skew < -self.window {
            return Err(ReplayError::Stale {
                skew_secs: skew.num_seconds(),
            });
        }

        state.evict_expired(now);
        if state.seen.contains_key(&key) {
            return Err(ReplayError::Replayed);
        }
        if state.seen.len() >= self.capacity {
            return Err(ReplayError::Overloaded);
        }
        // Past this instant the timestamp is stale, so a replay is refused without the entry.
        let expiry = sent
            .checked_add_signed(self.window)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        state.seen.insert(key, expiry);
        state.expiries.push(Reverse((expiry, key)));
        Ok(())
    }

    /// [`ReplayGuard::check`] on an envelope's message id, nonce and timestamp.
    ///
    /// (Cluster mode checks freshness with [`check_fresh`] and first use in Redis instead.)
    pub fn check_envelope(&self, env: &Envelope, now: DateTime<Utc>) -> Result<(), ReplayError> {
        self.check(&env.message_id, env.nonce.as_deref(), &env.timestamp, now)
    }

    /// Entries currently remembered (expired ones linger until the next check).
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seen
            .len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl State {
    fn evict_expired(&mut self, now: DateTime<Utc>) {
        while let Some(Reverse((expiry, key))) = self.expiries.peek().copied() {
            if expiry >= now {
                break;
            }
            self.expiries.pop();
            self.seen.remove(&key);
        }
    }
}

/// RFC 3339, or an ISO 8601 time without offset read as UTC (as the Python reference does).
fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}

/// SHA-256 over length-prefixed fields, so no two (id, nonce) pairs share a key and an absent
/// nonce differs from an empty one.
fn key(message_id: &str, nonce: Option<&str>) -> Key {
    let mut h = Sha256::new();
    h.update((message_id.len() as u64).to_be_bytes());
    h.update(message_id.as_bytes());
    match nonce {
        None => h.update([0u8]),
        Some(n) => {
            h.update([1u8]);
            h.update(n.as_bytes());
        }
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(300);

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn ts(t: DateTime<Utc>) -> String {
        t.to_rfc3339()
    }

    fn secs(n: i64) -> TimeDelta {
        TimeDelta::seconds(n)
    }

    #[test]
    fn fresh_is_accepted_and_a_repeat_is_replayed() {
        let g = ReplayGuard::new(WINDOW, 10);
        let now = t0();
        assert_eq!(g.check("m1", Some("n1"), &ts(now), now), Ok(()));
        assert_eq!(
            g.check("m1", Some("n1"), &ts(now), now + secs(1)),
            Err(ReplayError::Replayed)
        );
        // Another nonce, another message id, or no nonce: different keys.
        assert_eq!(g.check("m1", Some("n2"), &ts(now), now), Ok(()));
        assert_eq!(g.check("m2", Some("n1"), &ts(now), now), Ok(()));
        assert_eq!(g.check("m1", None, &ts(now), now), Ok(()));
        assert_eq!(g.check("m1", Some(""), &ts(now), now), Ok(()));
        assert_eq!(g.len(), 5);
    }

    #[test]
    fn without_nonce_the_message_id_alone_is_deduplicated() {
        let g = ReplayGuard::new(WINDOW, 10);
        let now = t0();
        assert_eq!(g.check("m1", None, &ts(now), now), Ok(()));
        assert_eq!(
            g.check("m1", None, &ts(now), now),
            Err(ReplayError::Replayed)
        );
    }

    #[test]
    fn window_edges_both_sides() {
        let g = ReplayGuard::new(WINDOW, 10);
        let now = t0();
        assert_eq!(g.check("a", None, &ts(now - secs(300)), now), Ok(()));
        assert_eq!(
            g.check("b", None, &ts(now - secs(301)), now),
            Err(ReplayError::Stale { skew_secs: 301 })
        );
        assert_eq!(g.check("c", None, &ts(now + secs(300)), now), Ok(()));
        assert_eq!(
            g.check("d", None, &ts(now + secs(301)), now),
            Err(ReplayError::Stale { skew_secs: -301 })
        );
        // A stale message is not remembered.
        assert_eq!(g.len(), 2);
    }

    #[test]
    fn timestamps_in_the_forms_peers_send() {
        let g = ReplayGuard::new(WINDOW, 10);
        let now = t0();
        for (i, t) in [
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.123456+00:00",
            "2026-03-01T13:00:00+01:00",
            "2026-03-01T12:00:00.5",
            "2026-03-01T12:00:00",
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(g.check(&i.to_string(), None, t, now), Ok(()), "{t}");
        }
        for t in ["", "yesterday", "2026-03-01", "1740830400"] {
            assert_eq!(
                g.check("x", None, t, now),
                Err(ReplayError::BadTimestamp),
                "{t}"
            );
        }
    }

    #[test]
    fn full_table_refuses_rather_than_forgets() {
        let g = ReplayGuard::new(WINDOW, 2);
        let now = t0();
        assert_eq!(g.check("m1", Some("n"), &ts(now), now), Ok(()));
        assert_eq!(g.check("m2", Some("n"), &ts(now), now), Ok(()));
        assert_eq!(
            g.check("m3", Some("n"), &ts(now), now),
            Err(ReplayError::Overloaded)
        );
        // The remembered ones are still refused as replays, not as overload.
        assert_eq!(
            g.check("m1", Some("n"), &ts(now), now),
            Err(ReplayError::Replayed)
        );
        assert_eq!(g.len(), 2);
        // Zero capacity refuses everything.
        let none = ReplayGuard::new(WINDOW, 0);
        assert_eq!(
            none.check("m", None, &ts(now), now),
            Err(ReplayError::Overloaded)
        );
    }

    #[test]
    fn expired_entries_are_evicted_and_make_room() {
        let g = ReplayGuard::new(WINDOW, 2);
        let now = t0();
        assert_eq!(g.check("old", Some("n"), &ts(now - secs(200)), now), Ok(()));
        assert_eq!(g.check("new", Some("n"), &ts(now), now), Ok(()));
        // 101 s later the first one's timestamp is 301 s old: evicted, and its slot reused.
        let later = now + secs(101);
        assert_eq!(g.check("third", Some("n"), &ts(later), later), Ok(()));
        assert_eq!(g.len(), 2);
        // Replaying the evicted one is still refused, by its timestamp.
        assert_eq!(
            g.check("old", Some("n"), &ts(now - secs(200)), later),
            Err(ReplayError::Stale { skew_secs: 301 })
        );
        // The unexpired one is still remembered.
        assert_eq!(
            g.check("new", Some("n"), &ts(now), later),
            Err(ReplayError::Replayed)
        );
    }

    #[test]
    fn an_entry_lives_exactly_as_long_as_its_timestamp_is_fresh() {
        let g = ReplayGuard::new(WINDOW, 10);
        let now = t0();
        let sent = ts(now);
        assert_eq!(g.check("m", Some("n"), &sent, now), Ok(()));
        let edge = now + secs(300);
        assert_eq!(
            g.check("m", Some("n"), &sent, edge),
            Err(ReplayError::Replayed)
        );
        assert_eq!(
            g.check("m", Some("n"), &sent, edge + TimeDelta::microseconds(1)),
            Err(ReplayError::Stale { skew_secs: 300 })
        );
    }

    #[test]
    fn an_older_clock_reading_cannot_reopen_an_evicted_entry() {
        let g = ReplayGuard::new(WINDOW, 10);
        let now = t0();
        let sent = ts(now);
        assert_eq!(g.check("m", Some("n"), &sent, now), Ok(()));
        // A later reading evicts it (its timestamp is stale by then)...
        let late = now + secs(301);
        assert_eq!(g.check("x", None, &ts(late), late), Ok(()));
        assert_eq!(g.len(), 1);
        // ...and a thread that read the clock earlier is judged by the latest reading.
        assert_eq!(
            g.check("m", Some("n"), &sent, now + secs(299)),
            Err(ReplayError::Stale { skew_secs: 301 })
        );
    }

    #[test]
    fn check_envelope_uses_id_nonce_and_timestamp() {
        use crate::body::Body;
        use crate::payload::PayloadMode;
        let now = t0();
        let mut env = Envelope::new(
            "s",
            "a",
            "b",
            Body::TaskCancel {
                task_id: "t".into(),
            },
            PayloadMode::Text,
        );
        env.timestamp = ts(now);
        env.nonce = Some("n".into());
        let g = ReplayGuard::new(WINDOW, 10);
        assert_eq!(g.check_envelope(&env, now), Ok(()));
        assert_eq!(g.check_envelope(&env, now), Err(ReplayError::Replayed));
        env.nonce = Some("n2".into());
        assert_eq!(g.check_envelope(&env, now), Ok(()));
    }

    #[test]
    fn concurrent_checks_accept_each_pair_once() {
        let g = std::sync::Arc::new(ReplayGuard::new(WINDOW, 10_000));
        let now = t0();
        let accepted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let g = g.clone();
                    s.spawn(move || {
                        (0..500)
                            .filter(|i| g.check(&format!("m{i}"), Some("n"), &ts(now), now).is_ok())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(accepted, 500);
    }

    #[test]
    fn keys_do_not_collide_across_the_boundary() {
        assert_ne!(key("ab", Some("c")), key("a", Some("bc")));
        assert_ne!(key("a", None), key("a", Some("")));
    }
}
