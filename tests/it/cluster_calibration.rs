//! Calibration rounds in cluster mode, against the real Redis and Postgres on this machine
//! (as `cluster.rs`): one round per interval for the whole cluster (the replica holding the
//! interval's lease in Redis runs it), and every replica learning each round from the shared
//! ledger — at each `[quality] refresh`, and at start.

use crate::cluster::{new_key, replicas_with, tenant};
use crate::support::stores::{cluster, redis_url, TempDb};
use crate::support::{eventually_async, sim, TestGateway};
use crate::verifiers::{calibration_rows, reliability, rubber_stamp, shipped_reference};
use ldp_gateway::provenance::LedgerRow;
use serde_json::Value;
use std::cell::RefCell;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// Items a round sends each verifier.
const ITEMS: u64 = 4;

/// A policy verifying `qa` tasks, its verifiers calibrated every `every` (none: never).
fn policy(every: Option<&str>) -> String {
    let mut p = "name = \"verified\"\n[verify]\nverifiers = 1\nsample = 1.0\n".to_owned();
    if let Some(every) = every {
        p += &format!(
            "[verify.calibration]\nreference = {:?}\nevery = \"{every}\"\nitems = {ITEMS}\n",
            shipped_reference().display().to_string()
        );
    }
    p
}

/// A replica's builder: the policy, the shared Postgres ledger `store`, a quick refresh.
fn replica(
    b: crate::support::gateway::Builder<'static>,
    policy: &str,
    store: &str,
) -> crate::support::gateway::Builder<'static> {
    let store = store.to_owned();
    b.policy("verified.toml", policy).config(move |c| {
        c.policies.default = "verified".into();
        c.provenance.store = store;
        c.quality.refresh = Duration::from_millis(200);
    })
}

/// A calibration row's `routing.calibration`.
fn calibration(row: &LedgerRow) -> Value {
    row.routing.to_value()["calibration"].clone()
}

/// When a row's round started, Unix ms.
fn started_ms(row: &LedgerRow) -> i64 {
    chrono::DateTime::parse_from_rfc3339(&row.started_at)
        .unwrap()
        .timestamp_millis()
}

/// The verifier `d0`'s reliability on each of `gws`.
async fn reliabilities(gws: &[TestGateway]) -> Vec<Option<f64>> {
    let mut out = Vec::new();
    for gw in gws {
        out.push(reliability(gw, "d0").await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_run_one_calibration_round_per_interval_and_all_learn_it() {
    let db = TempDb::new();
    let shared = cluster(&redis_url(), 3);
    // One rubber stamp (claims 0.9, scores 0.5 on every round): each round pulls its
    // reliability further down, so rounds and who learnt them can be told apart.
    let verifier = sim(rubber_stamp("v-stamp", "beta")).await;
    let every = Duration::from_secs(4);
    let policy = policy(Some("4s"));
    let store = db.url();
    let gws = replicas_with(3, &[verifier.url()], &shared, &tenant(&new_key()), |b| {
        replica(b, &policy, &store)
    })
    .await;

    // Two whole intervals: three rounds, counted between rounds (every item the verifier
    // received belongs to a recorded round).
    let seen = RefCell::new((Vec::new(), verifier.stats()));
    let counted = eventually_async(WAIT, || {
        let (seen, verifier, gws) = (&seen, &verifier, &gws);
        async move {
            let rows = calibration_rows(&gws[0], "d0").await;
            let stats = verifier.stats();
            let whole = rows.len() >= 3 && stats.tasks == ITEMS * rows.len() as u64;
            *seen.borrow_mut() = (rows, stats);
            whole
        }
    })
    .await;
    let (mut rows, stats) = seen.into_inner();
    assert!(counted, "{} rows, {stats:?}", rows.len());
    assert_eq!(stats.accepted, rows.len() as u64, "a session per round");
    // Oldest first: one round per interval (intervals are windows of `every` from the Unix
    // epoch), none skipped, each with its items answered.
    rows.reverse();
    let every_ms = every.as_millis() as i64;
    let starts: Vec<i64> = rows.iter().map(started_ms).collect();
    let gaps: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let intervals: Vec<i64> = starts.iter().map(|t| t.div_euclid(every_ms)).collect();
    let first = intervals[0];
    let one_each: Vec<i64> = (first..first + rows.len() as i64).collect();
    assert_eq!(
        intervals, one_each,
        "rounds {gaps:?} ms apart, every {every_ms} ms"
    );
    for row in &rows {
        assert_eq!(calibration(row)["answered"], ITEMS, "{row:?}");
    }
    // Each round started from what every earlier one taught, whichever replica ran it.
    for pair in rows.windows(2) {
        let (before, after) = (calibration(&pair[0]), calibration(&pair[1]));
        let learnt = before["reliability"].as_f64().unwrap();
        let from = after["reliability_before"].as_f64().unwrap();
        assert!((learnt - from).abs() < 1e-3, "{before} then {after}");
        assert!(
            after["reliability"].as_f64().unwrap() < from - 1e-4,
            "{after}"
        );
    }

    // Every replica shows the reliability the rounds taught (after at most one refresh,
    // between rounds).
    let shown = RefCell::new(Vec::new());
    let same = eventually_async(WAIT, || {
        let (shown, gws) = (&shown, &gws);
        async move {
            let rows = calibration_rows(&gws[0], "d0").await;
            let Some(last) = rows.first().map(calibration) else {
                return false;
            };
            let taught = last["reliability"].as_f64().unwrap();
            let now = reliabilities(gws).await;
            let all = now
                .iter()
                .all(|r| r.is_some_and(|r| (r - taught).abs() < 1e-3 && r < 0.8));
            *shown.borrow_mut() = now;
            all
        }
    })
    .await;
    let seen = shown.into_inner();
    assert!(same, "replicas show {seen:?}");
    eprintln!(
        "3 replicas, calibration every {every:?}: {} rounds, {} items at the verifier, \
         rounds {gaps:?} ms apart; reliability on each replica {seen:?}",
        rows.len(),
        stats.tasks
    );
    for gw in gws {
        gw.shutdown().await;
    }
    verifier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_started_on_a_ledger_with_a_calibration_round_shows_its_reliability() {
    let db = TempDb::new();
    let shared = cluster(&redis_url(), 2);
    let verifier = sim(rubber_stamp("v-stamp", "beta")).await;
    let key = new_key();
    let store = db.url();
    let calibrated = policy(Some("1h"));
    let first = replicas_with(1, &[verifier.url()], &shared, &tenant(&key), |b| {
        replica(b, &calibrated, &store)
    })
    .await;
    let ran = eventually_async(WAIT, || async {
        !calibration_rows(&first[0], "d0").await.is_empty()
    })
    .await;
    assert!(ran, "no calibration round");
    // Within the hour's lease: no other round comes.
    let rows = calibration_rows(&first[0], "d0").await;
    let taught = calibration(&rows[0])["reliability"].as_f64().unwrap();
    assert!(taught < 0.8, "{taught}");
    for gw in first {
        gw.shutdown().await;
    }

    // A replica that never calibrates, started on that ledger: the round is in its
    // reliability from its first scrape, and the verifier saw no other round.
    let uncalibrated = policy(None);
    let later = replicas_with(1, &[verifier.url()], &shared, &tenant(&key), |b| {
        replica(b, &uncalibrated, &store)
    })
    .await;
    let shown = reliability(&later[0], "d0").await;
    assert!(
        shown.is_some_and(|r| (r - taught).abs() < 1e-3),
        "{shown:?}, the round taught {taught}"
    );
    assert_eq!(verifier.stats().tasks, ITEMS, "one round only");
    for gw in later {
        gw.shutdown().await;
    }
    verifier.shutdown().await;
}
