//! Per-sender sequence numbers (`HEADER.s` per `HEADER.f`), checked for monotonicity in
//! bounded memory.

use std::collections::{BTreeMap, HashMap};

/// Longest sender key the checker stores, in bytes.
pub const MAX_SENDER_BYTES: usize = 256;

/// Why a sequence number was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeqError {
    /// `s` is not above the last one accepted from this sender.
    #[error("sequence {got} from '{sender}' is not above the last one, {last}")]
    NotIncreasing {
        /// The sender key.
        sender: String,
        /// The last accepted `s`.
        last: u64,
        /// The refused `s`.
        got: u64,
    },
    /// The sender key is longer than [`MAX_SENDER_BYTES`].
    #[error("sender longer than {MAX_SENDER_BYTES} bytes")]
    SenderTooLong,
}

/// Remembers the last accepted `s` of up to `capacity` senders; each `s` must be strictly
/// above the sender's last (a repeat is a replay).
///
/// Eviction: when a new sender arrives at capacity, the sender seen least recently is
/// forgotten, and its next message is accepted whatever its `s` (as a first message is).
/// Memory is at most `capacity` × ([`MAX_SENDER_BYTES`] + a few dozen bytes). Callers key
/// by tenant and sender (`"tenant\u{0}f"`) so no tenant can fill or read another's entries
/// beyond eviction order; one checker per tenant isolates them fully.
#[derive(Debug)]
pub struct SeqChecker {
    capacity: usize,
    /// sender → (last s, tick of last use)
    last: HashMap<String, (u64, u64)>,
    /// tick of last use → sender, oldest first
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl SeqChecker {
    /// A checker remembering up to `capacity` senders (at least 1).
    pub fn new(capacity: usize) -> Self {
        SeqChecker {
            capacity: capacity.max(1),
            last: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    /// Accepts `seq` from `sender` if it is above the last accepted one (or the sender is
    /// new or was evicted), and records it; refuses it otherwise, recording nothing.
    pub fn check(&mut self, sender: &str, seq: u64) -> Result<(), SeqError> {
        if sender.len() > MAX_SENDER_BYTES {
            return Err(SeqError::SenderTooLong);
        }
        self.tick += 1;
        let tick = self.tick;
        if let Some((last, used)) = self.last.get_mut(sender) {
            if seq <= *last {
                return Err(SeqError::NotIncreasing {
                    sender: sender.to_owned(),
                    last: *last,
                    got: seq,
                });
            }
            self.order.remove(used);
            *last = seq;
            *used = tick;
            self.order.insert(tick, sender.to_owned());
            return Ok(());
        }
        if self.last.len() >= self.capacity {
            if let Some((_, oldest)) = self.order.pop_first() {
                self.last.remove(&oldest);
            }
        }
        self.last.insert(sender.to_owned(), (seq, tick));
        self.order.insert(tick, sender.to_owned());
        Ok(())
    }

    /// How many senders are remembered (never above the capacity).
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no sender is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// The last accepted `s` of `sender`, if remembered.
    pub fn last(&self, sender: &str) -> Option<u64> {
        self.last.get(sender).map(|(s, _)| *s)
    }
}
