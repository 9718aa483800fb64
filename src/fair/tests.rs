//! The fair table's rules, one test each, and a property test of its guarantee: a tenant
//! within its share loses nothing to another tenant's volume.

use super::*;
use proptest::prelude::*;

/// A test value: who holds it, its bytes, whether it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct V {
    id: u32,
    bytes: usize,
    running: bool,
}

impl Kept<String> for V {
    fn weight(&self, key: &String) -> usize {
        key.len() + self.bytes
    }
    fn running(&self) -> bool {
        self.running
    }
}

fn v(id: u32, bytes: usize) -> V {
    V {
        id,
        bytes,
        running: false,
    }
}

/// Inserts (or replaces) `value` under `key`.
fn put(t: &FairTable<String, V>, tenant: &str, key: &str, value: V) -> Changed<(), V> {
    let made = value.clone();
    t.change(
        tenant,
        key,
        || Some((key.to_owned(), made)),
        |old| *old = value,
    )
}

fn has(t: &FairTable<String, V>, tenant: &str, key: &str) -> bool {
    t.get(tenant, key, |_| ()).is_some()
}

/// What an entry of `bytes` under a key of `key_len` bytes weighs.
const fn weighs(key_len: usize, bytes: usize) -> usize {
    key_len + bytes + ENTRY_OVERHEAD
}

#[test]
fn a_lone_tenant_may_use_the_whole_table_and_loses_its_oldest_first() {
    let max = 10 * weighs(3, 100);
    let t = FairTable::new(max, None);
    for i in 0..12u32 {
        assert!(matches!(
            put(&t, "a", &format!("k{i:02}"), v(i, 100)),
            Changed::Kept(..)
        ));
    }
    assert!(t.bytes() <= max);
    assert!(!has(&t, "a", "k00") && !has(&t, "a", "k01"));
    assert!(has(&t, "a", "k02") && has(&t, "a", "k11"));
    assert_eq!(t.stats().evicted_over_share, 2);
}

#[test]
fn a_flood_evicts_only_the_flooding_tenant() {
    let max = 100 * weighs(4, 1000);
    let t = FairTable::new(max, None);
    for i in 0..10u32 {
        put(&t, "quiet", &format!("q{i:03}"), v(i, 1000));
    }
    for i in 0..10_000u32 {
        put(&t, "flood", &format!("f{i:03}"), v(i, 1000));
    }
    for i in 0..10u32 {
        assert!(has(&t, "quiet", &format!("q{i:03}")), "q{i}");
    }
    assert!(t.bytes() <= max);
    // The flood keeps what is left: the table is full, not emptied.
    assert!(t.tenant_bytes("flood") >= max - t.tenant_bytes("quiet") - weighs(5, 1000));
    let s = t.stats();
    assert_eq!(s.evicted_within_share, 0);
    assert_eq!(s.tenants, 2);
    assert_eq!(s.bytes_within_share, t.tenant_bytes("quiet"));
    assert_eq!(s.bytes_over_share, t.tenant_bytes("flood"));
}

#[test]
fn a_tenant_over_its_share_is_trimmed_when_another_needs_room() {
    let max = 10 * weighs(2, 100);
    let t = FairTable::new(max, None);
    for i in 0..10u32 {
        put(&t, "a", &format!("a{i}"), v(i, 100));
    }
    // "b" arrives: "a" is over its half and loses its oldest, one per entry of "b".
    for i in 0..5u32 {
        assert!(matches!(
            put(&t, "b", &format!("b{i}"), v(i, 100)),
            Changed::Kept(_, evicted) if evicted == vec![v(i, 100)]
        ));
    }
    assert_eq!(t.tenant_bytes("a"), t.tenant_bytes("b"));
    // Now both are at their share: "b" growing evicts its own oldest.
    assert!(matches!(
        put(&t, "b", "b5", v(5, 100)),
        Changed::Kept(_, evicted) if evicted == vec![v(0, 100)]
    ));
    assert!(has(&t, "a", "a5") && !has(&t, "b", "b0"));
}

#[test]
fn running_entries_are_never_evicted_and_a_full_share_of_them_refuses_more() {
    let max = 4 * weighs(2, 100);
    let t = FairTable::new(max, Some(Duration::from_secs(60)));
    let running = |id| V {
        id,
        bytes: 100,
        running: true,
    };
    for i in 0..4u32 {
        assert!(matches!(
            put(&t, "a", &format!("r{i}"), running(i)),
            Changed::Kept(..)
        ));
    }
    match put(&t, "a", "r4", running(4)) {
        Changed::Refused(r, evicted) => {
            assert!(evicted.is_empty());
            let wait = r.retry_after.unwrap();
            assert!(wait > Duration::from_secs(50) && wait <= Duration::from_secs(60));
        }
        other => panic!("{other:?}"),
    }
    for i in 0..4u32 {
        assert!(has(&t, "a", &format!("r{i}")));
    }
    // Another tenant within its share is still taken: the bound gives way to its share.
    assert!(matches!(put(&t, "b", "b0", v(0, 100)), Changed::Kept(..)));
    assert!(t.bytes() > max);
    // A running entry that finishes becomes evictable.
    put(&t, "a", "r0", v(0, 100));
    assert!(matches!(put(&t, "b", "b1", v(1, 100)), Changed::Kept(_, e) if e == vec![v(0, 100)]));
    assert_eq!(t.stats().refused, 1);
}

#[test]
fn a_change_re_weighs_and_a_miss_inserts_nothing() {
    let t: FairTable<String, V> = FairTable::new(1 << 20, None);
    assert!(matches!(
        t.change("a", "k", || None, |_| ()),
        Changed::Absent
    ));
    assert_eq!((t.len(), t.stats().tenants), (0, 0));
    put(&t, "a", "k", v(1, 10));
    assert_eq!(t.bytes(), weighs(1, 10));
    t.change("a", "k", || None, |x| x.bytes = 1000);
    assert_eq!(t.bytes(), weighs(1, 1000));
    assert_eq!(t.remove("a", "k"), Some(v(1, 1000)));
    assert_eq!((t.bytes(), t.stats().tenants), (0, 0));
    assert_eq!(t.remove("a", "k"), None);
}

#[test]
fn entries_belong_to_their_tenant() {
    let t = FairTable::new(1 << 20, None);
    put(&t, "a", "k", v(1, 10));
    assert!(!has(&t, "b", "k"));
    put(&t, "b", "k", v(2, 10));
    assert_eq!(t.get("a", "k", |x| x.id), Some(1));
    assert_eq!(t.get("b", "k", |x| x.id), Some(2));
}

#[test]
fn entries_expire_and_are_swept() {
    let t = FairTable::new(1 << 20, Some(Duration::from_millis(1)));
    put(&t, "a", "k", v(1, 10));
    put(&t, "b", "k", v(1, 10));
    put(&t, "c", "k", v(1, 10));
    std::thread::sleep(Duration::from_millis(5));
    assert!(!has(&t, "a", "k"), "an expired entry is not read");
    // A change drops the expired entries of its tenant (an expired one is absent to it);
    // the sweep every tenant's. A tenant left with nothing holds no share.
    put(&t, "a", "other", v(2, 10));
    assert_eq!(t.tenant_bytes("a"), weighs(5, 10));
    assert!(matches!(
        t.change("c", "k", || None, |_| ()),
        Changed::Absent
    ));
    assert_eq!(t.stats().tenants, 2);
    t.sweep();
    assert_eq!(t.tenant_bytes("b"), 0);
    assert_eq!(t.stats().tenants, 1);
}

#[test]
fn an_entry_larger_than_its_tenants_share_is_refused_when_the_table_is_full() {
    let max = 4 * weighs(2, 100);
    let t = FairTable::new(max, None);
    put(&t, "a", "a0", v(0, 100));
    put(&t, "a", "a1", v(1, 100));
    for i in 0..2u32 {
        put(&t, "b", &format!("b{i}"), v(i, 100));
    }
    assert!(matches!(
        put(&t, "b", "big", v(9, 5 * 100)),
        Changed::Refused(r, evicted) if r.retry_after.is_none() && evicted.is_empty()
    ));
    // Nothing was evicted for it, the tenant's own older entries included.
    assert!(has(&t, "a", "a0") && has(&t, "a", "a1") && has(&t, "b", "b0"));
    assert!(t.bytes() <= max);
}

/// One step of the property test.
#[derive(Debug, Clone)]
enum Op {
    /// The quiet tenant inserts an entry of this many bytes (when it fits its share).
    Quiet(usize),
    /// The flooding tenant inserts one, running or not.
    Flood(usize, bool),
    /// The flooding tenant's oldest running entry finishes.
    FloodFinishes,
    /// The quiet tenant removes its oldest entry.
    QuietRemoves,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..3000).prop_map(Op::Quiet),
        6 => ((1usize..6000), proptest::bool::weighted(0.2)).prop_map(|(b, r)| Op::Flood(b, r)),
        1 => Just(Op::FloodFinishes),
        1 => Just(Op::QuietRemoves),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random interleavings of two tenants' inserts: the quiet tenant's entries, never more
    /// than its share (half the table) together, are never evicted nor refused, whatever the
    /// flooding tenant does; the flooding tenant's running entries are never evicted; and
    /// the table stays within its bound but for running entries.
    #[test]
    fn the_quiet_tenant_within_its_share_loses_nothing(ops in proptest::collection::vec(op(), 1..400)) {
        let max = 40_000;
        let t = FairTable::new(max, None);
        let mut quiet: std::collections::VecDeque<(String, usize)> = Default::default();
        let mut quiet_bytes = 0;
        let mut running: std::collections::VecDeque<String> = Default::default();
        let mut id = 0u32;
        for op in ops {
            id += 1;
            match op {
                Op::Quiet(b) => {
                    let key = format!("q{id:06}");
                    let w = weighs(key.len(), b);
                    if quiet_bytes + w > max / 2 {
                        continue;
                    }
                    let got = put(&t, "quiet", &key, v(id, b));
                    prop_assert!(matches!(got, Changed::Kept(..)), "quiet refused: {got:?}");
                    quiet.push_back((key, w));
                    quiet_bytes += w;
                }
                Op::Flood(b, run) => {
                    let key = format!("f{id:06}");
                    let value = V { id, bytes: b, running: run };
                    if let Changed::Kept(..) = put(&t, "flood", &key, value) {
                        if run {
                            running.push_back(key);
                        }
                    }
                }
                Op::FloodFinishes => {
                    if let Some(key) = running.pop_front() {
                        t.change("flood", key.as_str(), || None, |x| x.running = false);
                    }
                }
                Op::QuietRemoves => {
                    if let Some((key, w)) = quiet.pop_front() {
                        prop_assert!(t.remove("quiet", key.as_str()).is_some());
                        quiet_bytes -= w;
                    }
                }
            }
            for (key, _) in &quiet {
                prop_assert!(has(&t, "quiet", key), "quiet lost {key}");
            }
            for key in &running {
                prop_assert!(has(&t, "flood", key), "a running entry {key} was evicted");
            }
            prop_assert_eq!(t.tenant_bytes("quiet"), quiet_bytes);
            let running_bytes: usize = running
                .iter()
                .filter_map(|k| t.get("flood", k.as_str(), |x| weighs(k.len(), x.bytes)))
                .sum();
            prop_assert!(t.bytes() <= max.max(quiet_bytes + running_bytes) + 6000 + ENTRY_OVERHEAD);
            prop_assert_eq!(t.stats().evicted_within_share, 0);
        }
    }
}
