//! One tenant-fair bounded table ([`FairTable`]) for every table keyed by what clients send:
//! task statuses, conversations, A2A tasks and contexts, LADP rates and tasks, LLMX senders.
//!
//! A bound for the whole process is how one tenant evicts another's entries (issue 37 found it
//! six times), so each table here is bounded in bytes and shared out by tenant:
//!
//! - every entry is weighed in bytes (its key, its value, [`ENTRY_OVERHEAD`]);
//! - each tenant holding entries is guaranteed its share, the bound divided by the number of
//!   tenants holding entries; a tenant may use more while the table has room;
//! - when an insert or a change takes the table over its bound, entries go from the tenant
//!   most over its share (the oldest changed first), and only from a tenant over its share, so
//!   a tenant within its share loses nothing to another tenant's volume;
//! - an entry of a running task ([`Kept::running`]) is never evicted for room (it still
//!   expires): a new entry of a tenant over its share whose evictable entries are gone is
//!   refused ([`Refused`]), with the time until its oldest running entry expires;
//! - entries expire `ttl` after their last change (the table's, or the entry's own);
//! - evictions and refusals are counted, and [`FairTable::stats`] says how many bytes the
//!   tenants over and within their share hold (the metrics read it at each scrape).
//!
//! Not `moka`: its weigher bounds the whole cache, not each tenant's part of it, and keeps no
//! notion of an entry that must not be evicted. The parts here are plain maps with a change
//! queue each (stale records skipped when they reach the front), so a change costs a map
//! lookup and a queue push under one short lock.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Weight of an entry beyond its key and value: its map slot, its queue records, its times.
pub const ENTRY_OVERHEAD: usize = 128;

/// A JSON map entry in memory: its key's and value's slots and its share of a B-tree node's
/// links.
const JSON_ENTRY: usize = std::mem::size_of::<String>()
    + std::mem::size_of::<serde_json::Value>()
    + 2 * std::mem::size_of::<usize>();

/// Bytes `v` holds in memory beyond its own slot: each array element's slot, each map entry
/// (its key and [`JSON_ENTRY`]) and each string's bytes. A table weighs the JSON it keeps with
/// this, not with its serialised length: a map of small values holds several times its text.
/// A loop, not recursion: no depth of value overflows the stack.
pub fn json_in_memory(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    let mut total = 0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::String(s) => s.len(),
            Value::Array(a) => {
                stack.extend(a);
                a.len() * std::mem::size_of::<Value>()
            }
            Value::Object(o) => {
                stack.extend(o.values());
                o.keys().map(|k| JSON_ENTRY + k.len()).sum()
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        };
    }
    total
}

/// Bytes a JSON map holds in memory beyond its own slot ([`json_in_memory`] of its entries).
pub fn json_map_in_memory(m: &serde_json::Map<String, serde_json::Value>) -> usize {
    m.iter()
        .map(|(k, v)| JSON_ENTRY + k.len() + json_in_memory(v))
        .sum()
}

/// What a table's values say of themselves.
pub trait Kept<K> {
    /// Bytes the entry holds: its key and its value (the table adds [`ENTRY_OVERHEAD`]).
    fn weight(&self, key: &K) -> usize;

    /// Whether the entry belongs to something still running (a task, a rate that has not
    /// refilled): never evicted for room, though it expires.
    fn running(&self) -> bool {
        false
    }

    /// How long the entry lives past its last change, when not the table's `ttl`.
    fn ttl(&self) -> Option<Duration> {
        None
    }
}

/// A way to find an entry without building its key: it hashes as the key's identity and
/// says whether a stored key is the one sought. An entry is always inserted and looked up
/// through probes of one type, so the hash is the probe's alone.
pub trait Probe<K>: Hash {
    /// Whether `key` is the key this probe seeks.
    fn is(&self, key: &K) -> bool;
}

impl Probe<String> for str {
    fn is(&self, key: &String) -> bool {
        key == self
    }
}

/// A new entry refused: its tenant is over its share and holds nothing the table may evict
/// (its entries are running).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// When the tenant's oldest running entry expires (a hint for `Retry-After`), if known.
    pub retry_after: Option<Duration>,
}

/// What [`FairTable::change`] did. Either way, the values evicted for room (any tenant's;
/// usually none) come with it, for a caller whose values hold something to close.
#[derive(Debug)]
pub enum Changed<R, V> {
    /// No such entry, and none was to be made.
    Absent,
    /// Changed (or inserted and changed): what the change answered.
    Kept(R, Vec<V>),
    /// A new entry, refused (see [`Refused`]); nothing of it was kept.
    Refused(Refused, Vec<V>),
}

/// A table's figures, for its metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Bytes held by tenants over their share.
    pub bytes_over_share: usize,
    /// Bytes held by tenants within their share.
    pub bytes_within_share: usize,
    /// Entries evicted for room from tenants over their share, since start.
    pub evicted_over_share: u64,
    /// Entries evicted for room from tenants within their share, since start (the design
    /// allows none: a figure above 0 is a bug).
    pub evicted_within_share: u64,
    /// New entries refused, since start.
    pub refused: u64,
    /// Tenants holding entries.
    pub tenants: usize,
}

/// One stored entry.
struct Slot<K, V> {
    key: K,
    value: V,
    weight: usize,
    /// Its latest change: the queue record holding this tick is its place.
    tick: u64,
    /// When it expires (none: never).
    deadline: Option<Instant>,
}

/// One tenant's entries. Entries are found by the probe's hash (a collision of the
/// process-keyed 64-bit hash within one tenant's part replaces the older entry; reads compare
/// the whole key, so nothing is ever shown for another key), and each kind of entry has a
/// queue of changes, oldest first, whose records go stale when the entry changes again.
struct Part<K, V> {
    entries: HashMap<u64, Slot<K, V>>,
    /// Changes of entries that may be evicted: (tick, hash).
    idle: VecDeque<(u64, u64)>,
    /// Changes of running entries: (tick, hash).
    running: VecDeque<(u64, u64)>,
    bytes: usize,
}

impl<K, V> Default for Part<K, V> {
    fn default() -> Self {
        Part {
            entries: HashMap::new(),
            idle: VecDeque::new(),
            running: VecDeque::new(),
            bytes: 0,
        }
    }
}

/// Which queue of a part.
#[derive(Clone, Copy)]
enum Queue {
    Idle,
    Running,
}

impl<K, V> Part<K, V> {
    fn queue(&mut self, q: Queue) -> &mut VecDeque<(u64, u64)> {
        match q {
            Queue::Idle => &mut self.idle,
            Queue::Running => &mut self.running,
        }
    }

    /// The oldest current record of `q` (stale ones dropped on the way): its hash.
    fn front(&mut self, q: Queue) -> Option<u64> {
        loop {
            let &(tick, hash) = match q {
                Queue::Idle => self.idle.front(),
                Queue::Running => self.running.front(),
            }?;
            let current = self.entries.get(&hash).is_some_and(|s| s.tick == tick);
            if current {
                return Some(hash);
            }
            self.queue(q).pop_front();
        }
    }

    /// Removes the entry of `hash`: its value and weight.
    fn take(&mut self, hash: u64) -> Option<(V, usize)> {
        let slot = self.entries.remove(&hash)?;
        self.bytes -= slot.weight;
        Some((slot.value, slot.weight))
    }

    /// Drops stale records once a queue is mostly stale (a long-lived entry changed often).
    fn compact(&mut self) {
        let live = self.entries.len();
        for q in [Queue::Idle, Queue::Running] {
            if self.queue(q).len() > 2 * live + 64 {
                let entries = &self.entries;
                let queue = match q {
                    Queue::Idle => &mut self.idle,
                    Queue::Running => &mut self.running,
                };
                queue.retain(|(tick, hash)| entries.get(hash).is_some_and(|s| s.tick == *tick));
            }
        }
    }

    /// Drops entries past their deadline at the front of either queue; the bytes dropped.
    fn expire(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        for q in [Queue::Idle, Queue::Running] {
            while let Some(hash) = self.front(q) {
                let due = self
                    .entries
                    .get(&hash)
                    .and_then(|s| s.deadline)
                    .is_some_and(|d| d <= now);
                if !due {
                    break;
                }
                self.queue(q).pop_front();
                if let Some((_, w)) = self.take(hash) {
                    dropped += w;
                }
            }
        }
        dropped
    }
}

struct Inner<K, V> {
    /// Each tenant's part (an `Arc` name: naming the victim of an eviction costs no copy).
    tenants: HashMap<Arc<str>, Part<K, V>>,
    bytes: usize,
    tick: u64,
    evicted_over_share: u64,
    evicted_within_share: u64,
    refused: u64,
}

/// A table of entries by tenant and key, bounded in bytes and fair between tenants (see the
/// module's doc).
pub struct FairTable<K, V> {
    max_bytes: usize,
    /// Entries one tenant may hold at most (none: as many as its bytes allow).
    max_entries: Option<usize>,
    ttl: Option<Duration>,
    hasher: RandomState,
    inner: Mutex<Inner<K, V>>,
}

impl<K, V: Kept<K>> FairTable<K, V> {
    /// A table of at most `max_bytes` (beyond running entries of tenants over their share),
    /// its entries living `ttl` past their last change (none: until evicted), unless an
    /// entry says otherwise ([`Kept::ttl`]).
    pub fn new(max_bytes: usize, ttl: Option<Duration>) -> FairTable<K, V> {
        FairTable {
            max_bytes,
            max_entries: None,
            ttl,
            hasher: RandomState::new(),
            inner: Mutex::new(Inner {
                tenants: HashMap::new(),
                bytes: 0,
                tick: 0,
                evicted_over_share: 0,
                evicted_within_share: 0,
                refused: 0,
            }),
        }
    }

    /// With at most `n` entries per tenant besides the byte bound, for entries that each
    /// hold something counted elsewhere (an A2A context holds a session): past it, the
    /// tenant's own oldest evictable entry goes.
    pub fn with_max_entries(mut self, n: usize) -> FairTable<K, V> {
        self.max_entries = Some(n.max(1));
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner<K, V>> {
        // A poisoned table still holds whole entries: changes update the books before they
        // call anything of the caller's that could panic, so the worst left is a stale entry.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn deadline(&self, value: &V, now: Instant) -> Option<Instant> {
        value
            .ttl()
            .or(self.ttl)
            .and_then(|ttl| now.checked_add(ttl))
    }

    /// Reads `tenant`'s entry `key` (not a change: its place in the order stays).
    pub fn get<Q, R>(&self, tenant: &str, key: &Q, read: impl FnOnce(&V) -> R) -> Option<R>
    where
        Q: Probe<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let inner = self.lock();
        let slot = inner.tenants.get(tenant)?.entries.get(&hash)?;
        let live = slot.deadline.is_none_or(|d| d > Instant::now());
        (live && key.is(&slot.key)).then(|| read(&slot.value))
    }

    /// Changes `tenant`'s entry `key` with `change`, first inserting what `new` makes when
    /// there is none (with `new` answering `None`, nothing is inserted: [`Changed::Absent`]).
    /// The entry is then the tenant's most recently changed; it is weighed again, and the
    /// table makes room for it (evicting from tenants over their share). A new entry that
    /// finds no room in its tenant's share is refused.
    pub fn change<Q, R>(
        &self,
        tenant: &str,
        key: &Q,
        new: impl FnOnce() -> Option<(K, V)>,
        change: impl FnOnce(&mut V) -> R,
    ) -> Changed<R, V>
    where
        Q: Probe<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let now = Instant::now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.tick += 1;
        let tick = inner.tick;
        let found = match inner.tenants.get_mut(tenant) {
            Some(part) => {
                inner.bytes -= part.expire(now);
                match part.entries.get(&hash) {
                    Some(slot) if key.is(&slot.key) => true,
                    Some(_) => {
                        // Another key of the same hash: replaced (see `Part`).
                        if let Some((_, w)) = part.take(hash) {
                            inner.bytes -= w;
                        }
                        false
                    }
                    None => false,
                }
            }
            None => false,
        };
        let made = if found {
            None
        } else {
            match new() {
                Some(made) => Some(made),
                None => {
                    // An expiry may have emptied the part: it holds no share then.
                    if inner
                        .tenants
                        .get(tenant)
                        .is_some_and(|p| p.entries.is_empty())
                    {
                        inner.tenants.remove(tenant);
                    }
                    return Changed::Absent;
                }
            }
        };
        let part = match inner.tenants.get_mut(tenant) {
            Some(part) => part,
            None => inner.tenants.entry(tenant.into()).or_default(),
        };
        if let Some((key, value)) = made {
            let slot = Slot {
                key,
                value,
                weight: 0,
                tick,
                deadline: None,
            };
            part.entries.insert(hash, slot);
        }
        let Some(slot) = part.entries.get_mut(&hash) else {
            return Changed::Absent;
        };
        let answer = change(&mut slot.value);
        let weight = slot.value.weight(&slot.key) + ENTRY_OVERHEAD;
        let running = slot.value.running();
        slot.deadline = self.deadline(&slot.value, now);
        slot.tick = tick;
        let old = std::mem::replace(&mut slot.weight, weight);
        part.bytes = part.bytes - old + weight;
        inner.bytes = inner.bytes - old + weight;
        let q = if running { Queue::Running } else { Queue::Idle };
        part.queue(q).push_back((tick, hash));
        part.compact();
        let mut capped = Vec::new();
        while self.max_entries.is_some_and(|n| part.entries.len() > n) {
            let Some(oldest) = part.front(Queue::Idle).filter(|&h| h != hash) else {
                break;
            };
            if let Some((value, w)) = part.take(oldest) {
                inner.bytes -= w;
                inner.evicted_over_share += 1;
                capped.push(value);
            }
        }
        // A new entry that can never fit its tenant's share is refused before anything of
        // the tenant's is evicted for it.
        let alone = (!found && !running).then_some(weight);
        let (mut evicted, refused) = inner.make_room(self.max_bytes, tenant, hash, alone, now);
        evicted.append(&mut capped);
        match refused {
            None => Changed::Kept(answer, evicted),
            Some(refused) if !found => {
                if let Some(part) = inner.tenants.get_mut(tenant) {
                    if let Some((_, w)) = part.take(hash) {
                        inner.bytes -= w;
                    }
                    if part.entries.is_empty() {
                        inner.tenants.remove(tenant);
                    }
                }
                inner.refused += 1;
                Changed::Refused(refused, evicted)
            }
            // A change of an entry already kept is not undone: the table is over its bound
            // until the tenant's running entries end or expire.
            Some(_) => Changed::Kept(answer, evicted),
        }
    }

    /// Removes `tenant`'s entry `key`: its value.
    pub fn remove<Q>(&self, tenant: &str, key: &Q) -> Option<V>
    where
        Q: Probe<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.lock();
        let inner = &mut *guard;
        let part = inner.tenants.get_mut(tenant)?;
        if !part.entries.get(&hash).is_some_and(|s| key.is(&s.key)) {
            return None;
        }
        let (value, w) = part.take(hash)?;
        inner.bytes -= w;
        if part.entries.is_empty() {
            inner.tenants.remove(tenant);
        }
        Some(value)
    }

    /// Drops every expired entry (the changes drop those they meet; this is for a sweeper).
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        for part in inner.tenants.values_mut() {
            inner.bytes -= part.expire(now);
        }
        inner.tenants.retain(|_, p| !p.entries.is_empty());
    }

    /// Bytes held, every tenant together.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Bytes `tenant` holds.
    pub fn tenant_bytes(&self, tenant: &str) -> usize {
        self.lock().tenants.get(tenant).map_or(0, |p| p.bytes)
    }

    /// Entries held, every tenant together.
    pub fn len(&self) -> usize {
        self.lock().tenants.values().map(|p| p.entries.len()).sum()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The table's figures now.
    pub fn stats(&self) -> TableStats {
        let inner = self.lock();
        let share = share(self.max_bytes, inner.tenants.len());
        let mut stats = TableStats {
            evicted_over_share: inner.evicted_over_share,
            evicted_within_share: inner.evicted_within_share,
            refused: inner.refused,
            tenants: inner.tenants.len(),
            ..TableStats::default()
        };
        for part in inner.tenants.values() {
            if part.bytes > share {
                stats.bytes_over_share += part.bytes;
            } else {
                stats.bytes_within_share += part.bytes;
            }
        }
        stats
    }
}

/// Each tenant's share of `max_bytes` when `tenants` hold entries.
fn share(max_bytes: usize, tenants: usize) -> usize {
    max_bytes / tenants.max(1)
}

impl<K, V> Inner<K, V> {
    /// Brings the table within `max` bytes after `tenant` changed its entry `hash` (which is
    /// not evicted here): expired entries first, then the oldest evictable entry of the
    /// tenant most over its share, while one is over its share. Answers the values evicted
    /// and, when the table is still over its bound with `tenant` over its share, why its
    /// entry does not fit. `alone`: the weight of a new entry that may be evicted, refused at
    /// once when it is over its tenant's share by itself.
    fn make_room(
        &mut self,
        max: usize,
        tenant: &str,
        hash: u64,
        alone: Option<usize>,
        now: Instant,
    ) -> (Vec<V>, Option<Refused>) {
        let mut evicted = Vec::new();
        if self.bytes <= max {
            return (evicted, None);
        }
        for part in self.tenants.values_mut() {
            self.bytes -= part.expire(now);
        }
        self.tenants
            .retain(|name, p| !p.entries.is_empty() || &**name == tenant);
        if self.bytes > max && alone.is_some_and(|w| w > share(max, self.tenants.len())) {
            return (evicted, Some(Refused { retry_after: None }));
        }
        while self.bytes > max {
            let share = share(max, self.tenants.len());
            // The tenant most over its share with an entry it may lose. The entry being
            // changed is its tenant's newest: when it is that tenant's oldest evictable
            // one, the tenant has nothing else to lose.
            let victim = self
                .tenants
                .iter_mut()
                .filter(|(_, p)| p.bytes > share)
                .filter_map(|(name, p)| {
                    let oldest = p.front(Queue::Idle)?;
                    let own = oldest == hash && &**name == tenant;
                    (!own).then(|| (p.bytes - share, name.clone(), oldest))
                })
                .max_by_key(|(excess, _, _)| *excess);
            let Some((_, name, oldest)) = victim else {
                break;
            };
            let Some(part) = self.tenants.get_mut(&name) else {
                break;
            };
            let within = part.bytes <= share;
            if let Some((value, w)) = part.take(oldest) {
                self.bytes -= w;
                evicted.push(value);
                if within {
                    self.evicted_within_share += 1;
                } else {
                    self.evicted_over_share += 1;
                }
            }
            if part.entries.is_empty() {
                self.tenants.remove(&name);
            }
        }
        if self.bytes <= max {
            return (evicted, None);
        }
        let share = share(max, self.tenants.len());
        let Some(part) = self.tenants.get_mut(tenant) else {
            return (evicted, None);
        };
        if part.bytes <= share {
            // Within its share: kept, the table over its bound by other tenants' running
            // entries until they end.
            return (evicted, None);
        }
        let retry_after = part.front(Queue::Running).and_then(|h| {
            part.entries
                .get(&h)
                .and_then(|s| s.deadline)
                .map(|d| d.saturating_duration_since(now))
        });
        (evicted, Some(Refused { retry_after }))
    }
}

#[cfg(test)]
mod tests;
