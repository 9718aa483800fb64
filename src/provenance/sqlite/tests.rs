//! The SQLite backend's tests: migrations, the session index, the probe, files deleted or
//! replaced under it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use super::*;
use crate::provenance::{Cancel, Evidence, EvidenceSource, Feedback, Given, Outcome, Vote};
use serde_json::json;

/// A plausible row for `task` in `session`, finished at `finished_ms`.
pub(in crate::provenance) fn row(task: &str, session: &str, finished_ms: i64) -> LedgerRow {
    LedgerRow {
        task_id: task.into(),
        ingress: crate::provenance::Ingress::Ldp,
        session_id: session.into(),
        upstream_session_id: Some(format!("up-{session}")),
        tenant: "anonymous".into(),
        skill: "echo".into(),
        policy: Some("balanced".into()),
        delegate: Some("d0".into()),
        delegate_id: Some("ldp:delegate:a".into()),
        model_version: Some("a-1".into()),
        outcome: Outcome::Result,
        error_code: None,
        error_message: None,
        score: Some(0.8),
        candidates: Some(2),
        attempts: 2,
        fallbacks: vec!["payload_mode".into()],
        payload_mode: Some("text".into()),
        latency_ms: 12.5,
        upstream_ms: 10.0,
        cost_usd: Some(0.0021),
        reported_cost_usd: Some(0.0021),
        declared_cost_usd: Some(0.002),
        tokens: Some(42),
        confidence: Some(0.9),
        verification_status: Some("self_verified".into()),
        started_at: "2026-01-01T00:00:00.000000Z".into(),
        finished_at: "2026-01-01T00:00:00.012500Z".into(),
        finished_ms,
        output_sha256: Some("ab".repeat(32)),
        lineage: JsonText::of(&json!([{"delegate_id": "ldp:delegate:gateway", "step": "route"}])),
        routing: JsonText::of(&json!({"policy": "balanced", "reused_binding": false})),
        payload: None,
        votes: Vec::new(),
        trace_id: None,
        usage: None,
    }
}

fn temp_path(dir: &tempfile::TempDir) -> String {
    dir.path().join("nested/p.db").display().to_string()
}

fn columns(conn: &Connection) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info('ledger')")
        .unwrap();
    let names = stmt.query_map([], |r| r.get(0)).unwrap();
    names.map(Result::unwrap).collect()
}

#[test]
fn the_background_checkpointer_moves_pages_into_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    // Only the checkpointer can now grow the database file.
    b.connection()
        .pragma_update(None, "wal_autocheckpoint", 0)
        .unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    let rows: Vec<LedgerRow> = (0..2_000)
        .map(|i| row(&format!("t{i}"), "s", 1_000 + i))
        .collect();
    for chunk in rows.chunks(100) {
        b.insert(chunk).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut after = before;
    while after < before + 200 * 1024 && std::time::Instant::now() < deadline {
        std::thread::sleep(checkpoint::CHECKPOINT_EVERY / 2);
        after = std::fs::metadata(&path).unwrap().len();
    }
    assert!(
        after >= before + 200 * 1024,
        "database file {before} → {after} bytes: no background checkpoint"
    );
}

#[test]
fn an_empty_file_migrates_to_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(b.schema_version().unwrap(), MIGRATIONS.len() as i64);
    let mode: String = b
        .connection()
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    for col in [
        "routing",
        "payload",
        "reported_cost_usd",
        "declared_cost_usd",
    ] {
        assert!(columns(b.connection()).contains(&col.to_owned()), "{col}");
    }
    let r = row("t1", "s1", 1_000);
    b.insert(std::slice::from_ref(&r)).unwrap();
    drop(b);
    // Re-opening an up-to-date file runs nothing and keeps the rows.
    let mut b = SqliteBackend::open(&path, Durability::Fsync).unwrap();
    assert_eq!(b.schema_version().unwrap(), MIGRATIONS.len() as i64);
    assert_eq!(b.query(&Query::default()).unwrap(), vec![r]);
}

#[test]
fn a_token_count_past_i64_is_stored_as_the_largest_not_wrapped() {
    let mut b = SqliteBackend::wrap(Connection::open_in_memory().unwrap());
    b.migrate(MIGRATIONS.len()).unwrap();
    let mut r = row("t-max", "s", 1_000);
    r.tokens = Some(u64::MAX);
    b.insert(std::slice::from_ref(&r)).unwrap();
    let stored = b.query(&Query::default()).unwrap();
    assert_eq!(stored[0].tokens, Some(i64::MAX as u64));
}

#[test]
fn migrating_step_by_step_reaches_the_same_schema() {
    let mut b = SqliteBackend::wrap(Connection::open_in_memory().unwrap());
    b.migrate(1).unwrap();
    assert_eq!(b.schema_version().unwrap(), 1);
    assert!(!columns(&b.conn).contains(&"routing".to_owned()));
    b.migrate(MIGRATIONS.len()).unwrap();
    assert_eq!(b.schema_version().unwrap(), MIGRATIONS.len() as i64);
    let fresh = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    assert_eq!(columns(&b.conn), columns(&fresh.conn));
}

#[test]
fn a_first_schema_file_migrates_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    std::fs::create_dir_all(dir.path().join("nested")).unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO ledger (task_id, session_id, upstream_session_id, tenant, skill,
                policy, delegate, delegate_id, model_version, outcome, error_code,
                error_message, score, candidates, attempts, fallbacks, payload_mode,
                latency_ms, upstream_ms, cost_usd, tokens, confidence, verification_status,
                started_at, finished_at, finished_ms, output_sha256, lineage)
             VALUES ('old-task', 'old-session', NULL, 'anonymous', 'echo', 'balanced', 'd0',
                'ldp:delegate:a', 'a-1', 'failed', 'SIMULATED_FAILURE', 'boom', NULL, 1, 1,
                '[]', 'text', 3.5, 3.0, NULL, NULL, NULL, NULL, '2025-01-01T00:00:00Z',
                '2025-01-01T00:00:01Z', 1735689601000, NULL, '[]')",
            [],
        )
        .unwrap();
    }
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(b.schema_version().unwrap(), MIGRATIONS.len() as i64);
    let rows = b.query(&Query::default()).unwrap();
    assert_eq!(rows.len(), 1);
    let old = &rows[0];
    assert_eq!(
        (old.task_id.as_str(), old.outcome, old.error_code.as_deref()),
        ("old-task", Outcome::Failed, Some("SIMULATED_FAILURE"))
    );
    assert_eq!((old.finished_ms, old.latency_ms), (1_735_689_601_000, 3.5));
    // The columns the second migration added read back empty.
    assert_eq!(old.reported_cost_usd, None);
    assert_eq!(old.declared_cost_usd, None);
    assert_eq!(old.routing.to_value(), json!({}));
    assert_eq!(old.payload, None);
    // New rows go in next to it.
    let new = row("new-task", "new-session", 1_735_689_602_000);
    b.insert(std::slice::from_ref(&new)).unwrap();
    let rows = b.query(&Query::default()).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], new);
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    drop(SqliteBackend::open(&path, Durability::Commit).unwrap());
    let future = MIGRATIONS.len() as i64 + 1;
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", future)
        .unwrap();
    match SqliteBackend::open(&path, Durability::Commit) {
        Err(LedgerError::SchemaTooNew { found, known }) => {
            assert_eq!((found, known), (future, MIGRATIONS.len() as i64));
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

fn ids(b: &mut SqliteBackend, q: Query) -> Vec<String> {
    b.query(&q)
        .unwrap()
        .into_iter()
        .map(|r| r.task_id)
        .collect()
}

fn index_entries(b: &SqliteBackend) -> (i64, i64) {
    let c = b.connection();
    let n = c
        .query_row("SELECT count(*) FROM ledger_session_index", [], |r| {
            r.get(0)
        })
        .unwrap();
    let to = c
        .query_row("SELECT indexed_to FROM ledger_index_state", [], |r| {
            r.get(0)
        })
        .unwrap();
    (n, to)
}

#[test]
fn session_queries_see_merged_and_unmerged_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    let by_session = |b: &mut SqliteBackend, s: &str| {
        let q = Query {
            session_id: Some(s.into()),
            limit: Some(10_000),
            ..Query::default()
        };
        ids(b, q).len()
    };
    // Fewer rows than a merge takes, right after one: they stay in the tail.
    b.insert(&[row("a1", "A", 1), row("b1", "B", 2)]).unwrap();
    assert_eq!(index_entries(&b), (0, 0), "merged too early");
    assert_eq!((by_session(&mut b, "A"), by_session(&mut b, "B")), (1, 1));
    // A batch that reaches MERGE_ROWS merges everything so far, in the same commit.
    let big: Vec<LedgerRow> = (0..MERGE_ROWS)
        .map(|i| {
            row(
                &format!("t{i}"),
                if i % 2 == 0 { "A" } else { "B" },
                10 + i as i64,
            )
        })
        .collect();
    b.insert(&big).unwrap();
    let merged = MERGE_ROWS as i64 + 2;
    assert_eq!(index_entries(&b), (merged, merged));
    b.insert(&[row("a2", "A", 5_000)]).unwrap();
    let half = MERGE_ROWS as usize / 2;
    assert_eq!(by_session(&mut b, "A"), half + 2, "index + tail");
    assert_eq!(by_session(&mut b, "B"), half + 1);
    // Reopening merges what a crash would have left in the tail.
    drop(b);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(index_entries(&b), (merged + 1, merged + 1));
    assert_eq!(by_session(&mut b, "A"), half + 2);
    // Pruning removes index entries with their rows.
    let pruned = b.prune(10 + 100).unwrap();
    assert_eq!(pruned, 102);
    assert_eq!(index_entries(&b).0, merged + 1 - 102);
    assert_eq!(by_session(&mut b, "A"), half + 2 - 51);
    // A reader of an old file (read-only, not migrated) still filters by session.
    let old = temp_path(&dir).replace(".db", "-old.db");
    {
        let mut v2 = SqliteBackend::open(&old, Durability::Commit).unwrap();
        v2.insert(&[row("x", "X", 1)]).unwrap();
        v2.connection()
            .pragma_update(None, "user_version", 2)
            .unwrap();
    }
    let mut ro = SqliteBackend::open_read_only(&old).unwrap();
    assert_eq!(by_session(&mut ro, "X"), 1);
}

fn count(path: &str) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM ledger", [], |r| r.get(0))
        .unwrap()
}

fn remove_files(path: &str) {
    for suffix in ["", "-wal", "-shm"] {
        std::fs::remove_file(format!("{path}{suffix}")).unwrap();
    }
}

#[test]
fn the_probe_commits_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    let other = Connection::open(&path).unwrap();
    let version = || -> i64 {
        other
            .pragma_query_value(None, "data_version", |r| r.get(0))
            .unwrap()
    };
    let before = version();
    b.probe().unwrap();
    assert_ne!(version(), before, "another connection sees a commit");
    b.connection()
        .pragma_update(None, "query_only", true)
        .unwrap();
    assert!(b.probe().is_err(), "a store that takes no writes fails it");
}

#[test]
fn rows_survive_their_files_and_folder_being_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    b.insert(&[row("t1", "s", 1), row("t2", "s", 2)]).unwrap();
    remove_files(&path);
    b.insert(&[row("t3", "s", 3)]).unwrap();
    assert_eq!(count(&path), 3, "the file is back with every row");
    // Again, with the folder: the new files are the ones watched now.
    std::fs::remove_dir_all(dir.path().join("nested")).unwrap();
    b.probe().unwrap();
    assert_eq!(count(&path), 3);
    b.insert(&[row("t4", "s", 4)]).unwrap();
    drop(b);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(ids(&mut b, Query::default()), ["t4", "t3", "t2", "t1"]);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("nested"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains("rescued"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_foreign_file_at_the_path_is_left_alone_and_rows_wait_for_it_to_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    b.insert(&[row("t1", "s", 1)]).unwrap();
    remove_files(&path);
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE theirs (x); INSERT INTO theirs VALUES (1);")
        .unwrap();
    // The batch that finds the files gone commits to the old files before the check: it
    // is refused but kept (like any withheld result's row).
    assert!(matches!(
        b.insert(&[row("t2", "s", 2)]),
        Err(LedgerError::Detached { .. })
    ));
    assert!(b.probe().is_err(), "not ready");
    assert!(matches!(
        b.insert(&[row("t3", "s", 3)]),
        Err(LedgerError::Detached { .. })
    ));
    let theirs: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM theirs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(theirs, 1, "the foreign file is untouched");
    // Once it is gone, a later try puts the rows back at the path.
    std::fs::remove_file(&path).unwrap();
    let deadline = Instant::now() + 10 * RETRY_REHOME;
    while b.insert(&[row("t4", "s", 4)]).is_err() {
        assert!(Instant::now() < deadline, "the rows never came back");
        std::thread::sleep(RETRY_REHOME / 10);
    }
    assert_eq!(ids(&mut b, Query::default()), ["t4", "t2", "t1"]);
}

/// A ledger of the schema before feedback (4) gains the table on open, keeps its rows, and
/// its tasks can be rated.
#[test]
fn a_ledger_from_before_feedback_migrates_and_its_tasks_can_be_rated() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    std::fs::create_dir_all(dir.path().join("nested")).unwrap();
    {
        let mut b = SqliteBackend::wrap(Connection::open(&path).unwrap());
        b.migrate(4).unwrap();
        b.insert(&[row("old", "s", 1_000)]).unwrap();
    }
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(b.schema_version().unwrap(), MIGRATIONS.len() as i64);
    let task = b.task_of("anonymous", "old").unwrap().unwrap();
    assert_eq!(
        (task.delegate.as_deref(), task.skill.as_str()),
        (Some("d0"), "echo")
    );
    let fb = crate::provenance::Feedback {
        task_id: "old".into(),
        tenant: "anonymous".into(),
        score: 1.0,
        outcome: crate::provenance::Given::Good,
        delegate: task.delegate,
        skill: task.skill,
        created_at: "2026-01-01T00:00:00Z".into(),
        created_ms: 2_000,
    };
    assert!(b.rate(&fb).unwrap());
    assert!(!b.rate(&fb).unwrap());
    assert_eq!(b.feedback("old").unwrap(), vec![fb]);
    // Running the migration again (a file a newer build touched) changes nothing.
    b.connection().execute_batch(MIGRATIONS[4]).unwrap();
    assert_eq!(b.feedback("old").unwrap().len(), 1);
}

/// A vote of `verifier` on `producer`'s result in `round`.
fn vote(round: u32, producer: &str, verifier: &str, passed: bool, weight: f64) -> Vote {
    Vote {
        round,
        producer: producer.into(),
        skill: "echo".into(),
        verifier: verifier.into(),
        passed,
        confidence: passed.then_some(0.8),
        weight,
    }
}

/// `task`'s row, finished at `finished_ms`, with `votes`.
fn voted(task: &str, finished_ms: i64, votes: Vec<Vote>) -> LedgerRow {
    LedgerRow {
        verification_status: Some("verified".into()),
        votes,
        ..row(task, "s", finished_ms)
    }
}

/// A rating of `task` (its delegate `delegate`) given at `created_ms`.
fn rating(task: &str, delegate: Option<&str>, score: f64, created_ms: i64) -> Feedback {
    Feedback {
        task_id: task.into(),
        tenant: "anonymous".into(),
        score,
        outcome: Given::Score,
        delegate: delegate.map(str::to_owned),
        skill: "echo".into(),
        created_at: "2026-01-01T00:00:02Z".into(),
        created_ms,
    }
}

fn evidence(
    delegate: &str,
    score: f64,
    weight: f64,
    at_ms: i64,
    source: EvidenceSource,
) -> Evidence {
    Evidence {
        delegate: delegate.into(),
        skill: "echo".into(),
        score,
        weight,
        at_ms,
        // Ratings in these tests are the default row's tenant's.
        rater: (source == EvidenceSource::Feedback).then(|| "anonymous".to_owned()),
        source,
    }
}

fn by_task(task: &str) -> Query {
    Query {
        task_id: Some(task.into()),
        ..Query::default()
    }
}

fn vote_count(b: &SqliteBackend) -> i64 {
    b.connection()
        .query_row("SELECT count(*) FROM votes", [], |r| r.get(0))
        .unwrap()
}

/// A verified task's votes are stored with its row, read back with it by task id, and read
/// as evidence beside the ratings that name a delegate, oldest first, on the writer's
/// connection and on a reader alike.
#[test]
fn votes_are_stored_with_their_row_and_read_back_as_evidence() {
    use EvidenceSource::{Feedback as Rated, Vote as Voted};
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    let votes = vec![
        vote(1, "d0", "v1", true, 0.9),
        vote(1, "d0", "v2", false, 0.6),
        vote(2, "d1", "v1", true, 0.9),
    ];
    let t1 = voted("t1", 1_000, votes.clone());
    b.insert(&[row("t0", "s", 900), t1.clone(), row("t2", "s", 1_100)])
        .unwrap();
    assert!(b.rate(&rating("t1", Some("d0"), 0.75, 1_500)).unwrap());
    // A rating of a task no delegate answered is no evidence about one.
    assert!(b.rate(&rating("t2", None, 0.0, 1_600)).unwrap());
    // Each vote weighs its share of its round: round 1's 0.9 and 0.6, round 2's 0.9 alone.
    let expected = vec![
        evidence("d0", 1.0, 0.9 / (0.9 + 0.6), 1_000, Voted),
        evidence("d0", 0.0, 0.6 / (0.9 + 0.6), 1_000, Voted),
        evidence("d1", 1.0, 1.0, 1_000, Voted),
        evidence("d0", 0.75, 1.0, 1_500, Rated),
    ];
    assert_eq!(b.evidence(0, 100).unwrap(), expected);
    let reader = b.reader().unwrap();
    assert_eq!(
        reader.evidence(0, 100, &Cancel::default()).unwrap(),
        expected
    );
    // By task id the row reads back whole, its votes in the order written; other queries
    // leave them out.
    assert_eq!(b.query(&by_task("t1")).unwrap(), vec![t1.clone()]);
    assert_eq!(
        reader.query(&by_task("t1"), &Cancel::default()).unwrap(),
        vec![t1]
    );
    assert_eq!(b.query(&by_task("t0")).unwrap()[0].votes, Vec::new());
    let all = b.query(&Query::default()).unwrap();
    assert!(all.iter().all(|r| r.votes.is_empty()), "{all:?}");
    // Another tenant's task of the same id has its own votes.
    let theirs = LedgerRow {
        tenant: "acme".into(),
        ..voted("t1", 1_000, vec![vote(1, "d2", "v9", true, 1.0)])
    };
    b.insert(std::slice::from_ref(&theirs)).unwrap();
    let rows = b.query(&by_task("t1")).unwrap();
    let votes_of = |tenant: &str| {
        rows.iter()
            .find(|r| r.tenant == tenant)
            .map(|r| r.votes.clone())
            .unwrap()
    };
    assert_eq!(votes_of("anonymous"), votes);
    assert_eq!(votes_of("acme"), theirs.votes);
}

/// Evidence keeps the newest `limit` votes and the newest `limit` ratings, and nothing given
/// before `since_ms`.
#[test]
fn evidence_keeps_the_newest_within_its_limit_and_since() {
    let mut b = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    let rows: Vec<LedgerRow> = (0..5)
        .map(|i| {
            voted(
                &format!("t{i}"),
                1_000 + 100 * i,
                vec![vote(1, "d0", "v", true, 1.0)],
            )
        })
        .collect();
    b.insert(&rows).unwrap();
    for i in 0..5 {
        let rated = rating(&format!("t{i}"), Some("d0"), 0.5, 1_050 + 100 * i);
        assert!(b.rate(&rated).unwrap());
    }
    let times = |e: Vec<Evidence>| e.iter().map(|e| e.at_ms).collect::<Vec<_>>();
    assert_eq!(
        times(b.evidence(0, 2).unwrap()),
        [1_300, 1_350, 1_400, 1_450],
        "the two newest of each, oldest first"
    );
    assert_eq!(
        times(b.evidence(1_350, 100).unwrap()),
        [1_350, 1_400, 1_450],
        "since is inclusive"
    );
    assert_eq!(times(b.evidence(1_350, 1).unwrap()), [1_400, 1_450]);
    assert_eq!(b.evidence(0, 0).unwrap(), Vec::new());
    assert_eq!(b.evidence(2_000, 100).unwrap(), Vec::new());
}

/// Calibration rounds are evidence: the tenant-less `calibration-…` rows whose round taught
/// something, newest `limit` within `since`.
#[test]
fn calibration_rounds_are_read_back_as_evidence() {
    let mut b = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    let round = |task: &str, tenant: &str, at: i64, evidence: Option<f64>| LedgerRow {
        tenant: tenant.into(),
        skill: "verify".into(),
        delegate: Some("v".into()),
        routing: JsonText::of(&json!({"calibration": {"answered": 6, "evidence": evidence}})),
        ..row(task, "", at)
    };
    b.insert(&[
        round("calibration-a", "", 1_000, Some(0.5)),
        round("calibration-b", "", 1_100, None),
        round("calibration-c", "acme", 1_200, Some(1.0)),
        round("client-task", "", 1_300, Some(1.0)),
        round("calibration-d", "", 1_400, Some(0.75)),
    ])
    .unwrap();
    let seen = |e: Vec<Evidence>| {
        e.iter()
            .map(|e| (e.at_ms, e.score, e.weight, e.source))
            .collect::<Vec<_>>()
    };
    let c = EvidenceSource::Calibration;
    assert_eq!(
        seen(b.evidence(0, 10).unwrap()),
        [(1_000, 0.5, 6.0, c), (1_400, 0.75, 6.0, c)]
    );
    assert_eq!(
        seen(b.evidence(1_001, 10).unwrap()),
        [(1_400, 0.75, 6.0, c)]
    );
    assert_eq!(seen(b.evidence(0, 1).unwrap()), [(1_400, 0.75, 6.0, c)]);
}

/// A row's votes commit with it or not at all; a batch without votes writes none.
#[test]
fn votes_commit_in_their_rows_transaction() {
    let mut b = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    b.connection()
        .execute_batch(
            "CREATE TRIGGER no_votes BEFORE INSERT ON votes BEGIN SELECT RAISE(ABORT, 'no'); END;",
        )
        .unwrap();
    let refused = voted("t1", 1_000, vec![vote(1, "d0", "v", true, 1.0)]);
    assert!(b.insert(&[row("t0", "s", 999), refused]).is_err());
    assert_eq!(ids(&mut b, Query::default()), Vec::<String>::new());
    b.insert(&[row("t2", "s", 1_001)]).unwrap();
    assert_eq!(ids(&mut b, Query::default()), ["t2"]);
    assert_eq!(vote_count(&b), 0);
}

/// Pruning deletes votes older than the cut-off, with their rows: all at once, or in
/// batches that take the votes of the rows they delete.
#[test]
fn pruning_deletes_old_votes() {
    let three = || {
        vec![
            vote(1, "d0", "v1", true, 1.0),
            vote(1, "d0", "v2", true, 1.0),
            vote(2, "d1", "v1", false, 1.0),
        ]
    };
    let rows: Vec<LedgerRow> = (0..4)
        .map(|i| voted(&format!("t{i}"), 1_000 + i, three()))
        .collect();
    let mut b = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    b.insert(&rows).unwrap();
    assert!(b.rate(&rating("t0", Some("d0"), 1.0, 1_000)).unwrap());
    assert_eq!(b.prune(1_002).unwrap(), 2);
    assert_eq!(vote_count(&b), 6);
    let left = b.evidence(0, 100).unwrap();
    assert!(left.iter().all(|e| e.at_ms >= 1_002), "{left:?}");
    assert_eq!(
        left.len(),
        6,
        "no rating left: it was given before the cut-off"
    );
    // In batches: a one-row batch takes that row's three votes, not one vote.
    let mut b = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    b.insert(&rows).unwrap();
    assert_eq!(b.prune_batch(1_003, 1).unwrap(), 1);
    assert_eq!(vote_count(&b), 9);
    assert_eq!(b.prune_batch(1_003, 250).unwrap(), 2);
    assert_eq!(vote_count(&b), 3);
    assert_eq!(b.prune_batch(1_003, 250).unwrap(), 0);
    assert_eq!(b.query(&by_task("t3")).unwrap()[0].votes, three());
    // Votes left without a row before the cut-off go with the next batch.
    b.connection()
        .execute(
            "INSERT INTO votes (task_id, tenant, round, producer, skill, verifier, passed,
                weight, created_ms) VALUES ('gone', 'anonymous', 1, 'd0', 'echo', 'v', 1, 1, 5)",
            [],
        )
        .unwrap();
    assert_eq!(b.prune_batch(1_003, 250).unwrap(), 0);
    assert_eq!(vote_count(&b), 3);
}

/// A ledger of schema 5 (feedback, no votes) gains the votes table on open and keeps its
/// rows and ratings; its rows then take votes.
#[test]
fn a_ledger_from_before_votes_migrates_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    std::fs::create_dir_all(dir.path().join("nested")).unwrap();
    let old = row("old", "s", 1_000);
    {
        let mut b = SqliteBackend::wrap(Connection::open(&path).unwrap());
        b.migrate(5).unwrap();
        assert_eq!(b.schema_version().unwrap(), 5);
        b.insert(std::slice::from_ref(&old)).unwrap();
        assert!(b.rate(&rating("old", Some("d0"), 1.0, 1_100)).unwrap());
        // A read-only reader of the old file reads rows and ratings, and no votes.
        drop(b);
        let mut ro = SqliteBackend::open_read_only(&path).unwrap();
        assert_eq!(ro.query(&by_task("old")).unwrap(), vec![old.clone()]);
        // Its rows, from before the ingress column, all came in over LDP.
        let over = |i| Query {
            ingress: Some(i),
            ..Query::default()
        };
        let ldp = ro.query(&over(crate::provenance::Ingress::Ldp)).unwrap();
        assert_eq!(ldp, vec![old.clone()]);
        let openai = ro.query(&over(crate::provenance::Ingress::Openai)).unwrap();
        assert!(openai.is_empty());
        assert_eq!(ro.evidence(0, 100).unwrap().len(), 1);
    }
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    assert_eq!(b.schema_version().unwrap(), MIGRATIONS.len() as i64);
    assert_eq!(b.query(&Query::default()).unwrap(), vec![old]);
    let new = voted("new", 2_000, vec![vote(1, "d0", "v", false, 0.5)]);
    b.insert(std::slice::from_ref(&new)).unwrap();
    assert_eq!(b.query(&by_task("new")).unwrap(), vec![new]);
    assert_eq!(
        b.evidence(0, 100).unwrap(),
        vec![
            evidence("d0", 1.0, 1.0, 1_100, EvidenceSource::Feedback),
            evidence("d0", 0.0, 1.0, 2_000, EvidenceSource::Vote),
        ]
    );
    // Running the migration again (a file a newer build touched) changes nothing.
    b.connection().execute_batch(MIGRATIONS[5]).unwrap();
    assert_eq!(vote_count(&b), 1);
}

/// A rating's lookup of its task (`task_of`) goes through the (tenant, task id) index, never
/// a scan of the tenant's rows by time: its query plan names the index and no scan.
#[test]
fn a_rated_task_is_found_through_its_index() {
    let b = SqliteBackend::open(":memory:", Durability::Commit).unwrap();
    let plan: Vec<String> = b
        .connection()
        .prepare(&format!("EXPLAIN QUERY PLAN {}", super::read::TASK_OF))
        .unwrap()
        .query_map(params!["acme", "t1"], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|p| p.contains("USING INDEX ledger_tenant_task (tenant=? AND task_id=?)")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|p| p.starts_with("SCAN")), "{plan:?}");
}

#[test]
fn spend_breakdown_groups_tasks_and_cost_by_tenant_policy_and_delegate() {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(&dir);
    let mut b = SqliteBackend::open(&path, Durability::Commit).unwrap();
    let mut other = row("c", "S", 30);
    other.tenant = "acme".into();
    other.delegate = Some("d1".into());
    other.cost_usd = Some(0.5);
    let mut old = row("z", "S", 1);
    old.cost_usd = Some(100.0);
    let (mut a, mut b2) = (row("a", "S", 10), row("b", "S", 20));
    a.cost_usd = Some(0.25);
    b2.cost_usd = None;
    b.insert(&[old, a, b2, other]).unwrap();
    let mut got = b.spend_breakdown(5).unwrap();
    got.sort_by(|x, y| x.tenant.cmp(&y.tenant));
    let line = |tenant: &str, delegate: &str, tasks, cost_usd| crate::provenance::SpendRow {
        tenant: tenant.into(),
        policy: Some("balanced".into()),
        delegate: Some(delegate.into()),
        tasks,
        cost_usd,
    };
    assert_eq!(
        got,
        [line("acme", "d1", 1, 0.5), line("anonymous", "d0", 2, 0.25)]
    );
    let reader = b.reader().unwrap();
    let mut beside = reader.spend_breakdown(5, &Cancel::default()).unwrap();
    beside.sort_by(|x, y| x.tenant.cmp(&y.tenant));
    assert_eq!(beside, got, "the readers' connections answer the same");
}
