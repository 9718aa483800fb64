//! The LLMX and LADP bridges in cluster mode: two replicas sharing the Redis on this machine
//! (`LDP_TEST_REDIS`, a key prefix of its own per test) behind no load balancer, each message
//! sent to the replica a balancer might pick. A sequence number used on one replica is a
//! replay on the other and the gateway's answers are numbered across both; an LADP agent's
//! rate holds across replicas; a task started on one is found by a `status-request` on the
//! other and stopped by a `halt` there.

use crate::bridge_ladp::{send, status_request, string, task_init};
use crate::bridge_llmx::post;
use crate::cluster::{new_key, tenant, two_replicas};
use crate::support::metrics::Scrape;
use crate::support::stores::{cluster, redis_url};
use crate::support::{card, eventually, sim, TestGateway};
use ldp_gateway::config::LadpConfig;
use ldp_gateway::sim::SimOptions;
use std::collections::BTreeMap;
use std::time::Duration;

/// The Redis round trips between two scrapes, by `op`, those that moved.
fn redis_ops(before: &Scrape, after: &Scrape) -> BTreeMap<String, f64> {
    let ops = |s: &Scrape| -> BTreeMap<String, f64> {
        s.samples()
            .filter_map(|l| l.strip_prefix("ldp_gateway_redis_calls_total{op=\""))
            .filter_map(|l| {
                let (op, rest) = l.split_once('"')?;
                Some((op.to_owned(), rest.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    };
    let (b, a) = (ops(before), ops(after));
    a.into_iter()
        .map(|(op, n)| (op.clone(), n - b.get(&op).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

/// `rate` LADP messages a minute per agent.
fn ladp_rate(per_minute: u32) -> impl FnOnce(&mut ldp_gateway::config::Config) {
    move |c| {
        c.ladp = LadpConfig {
            rate_per_minute: per_minute,
            ..LadpConfig::default()
        }
    }
}

/// An LLMX message from `f` numbered `s`, one REQ for `summarize`.
fn llmx_msg(f: &str, s: u64) -> String {
    format!("HEADER:{{f:{f},t:gateway,s:{s}}}\nREQ:{{o:\"x\",pr:3,exp:[summarize]}}")
}

/// One simulated delegate behind two replicas of one tenant (its key), sharing Redis.
struct Pair {
    d: ldp_gateway::sim::SimHandle,
    key: String,
    gws: Vec<TestGateway>,
}

impl Pair {
    /// `delegate` behind two replicas, with `[ladp] rate_per_minute` at `rate` when given.
    async fn start(delegate: SimOptions, rate: Option<u32>) -> Pair {
        let d = sim(delegate).await;
        let key = new_key();
        let shared = cluster(&redis_url(), 2);
        let url = d.url();
        let gws = two_replicas(&shared, &tenant(&key), || {
            let b = TestGateway::builder().delegate(&url);
            match rate {
                Some(r) => b.config(ladp_rate(r)),
                None => b,
            }
        })
        .await;
        Pair { d, key, gws }
    }

    async fn stop(self) {
        for gw in self.gws {
            gw.shutdown().await;
        }
        self.d.shutdown().await;
    }
}

/// A delegate named `name` offering `skill`.
fn offering(name: &str, skill: &str) -> SimOptions {
    SimOptions::new(card(name, "default", &[(skill, 0.9)], &["text"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_llmx_replay_on_another_replica_is_refused_and_answers_are_numbered_across_both() {
    let pair = Pair::start(offering("fast", "summarize"), None).await;
    let (d, key, gws) = (&pair.d, pair.key.as_str(), &pair.gws);
    let (one, two) = (&gws[0], &gws[1]);
    let mut answers = Vec::new();
    let a = post(one, Some(key), llmx_msg("Claude", 5)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    answers.push(a.message().header.seq);
    // The same message replayed to the other replica: LLMX's replay NACK, 409.
    let a = post(two, Some(key), llmx_msg("Claude", 5)).await;
    assert_eq!(a.status, 409, "{}", a.body);
    let m = a.message();
    assert_eq!(m.blocks[0].str("o"), Some("NACK"), "{}", a.body);
    assert_eq!(
        m.blocks[0].str("msg"),
        Some("sequence 5 from 'Claude' is not above the last one, 5")
    );
    answers.push(m.header.seq);
    for (gw, s) in [(two, 6), (one, 7), (two, 8)] {
        let a = post(gw, Some(key), llmx_msg("Claude", s)).await;
        assert_eq!(a.status, 200, "{}", a.body);
        answers.push(a.message().header.seq);
    }
    assert_eq!(answers, [1, 2, 3, 4, 5], "one numbering for both replicas");
    // Another sender has its own.
    let a = post(two, Some(key), llmx_msg("Gemini", 1)).await;
    assert_eq!((a.status, a.message().header.seq), (200, 1), "{}", a.body);
    assert_eq!(d.stats().tasks, 5, "the replay never ran");
    // Redis round trips of one more LLMX message (one REQ), on a warm replica.
    let before = one.metrics().await;
    let a = post(one, Some(key), llmx_msg("Claude", 9)).await;
    assert_eq!((a.status, a.message().header.seq), (200, 6), "{}", a.body);
    let ops = redis_ops(&before, &one.metrics().await);
    eprintln!("redis round trips per LLMX task: {ops:?}");
    // The bridge's one (the sequence number checked and the answer numbered together), then
    // the task's as on the LDP routes: the session touched, its status running and answered.
    let want = [
        ("llmx_seq", 1.0),
        ("session_touch", 1.0),
        ("status_set", 2.0),
    ];
    assert_eq!(
        ops,
        want.map(|(op, n)| (op.to_owned(), n)).into(),
        "{ops:?}"
    );
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ladp_agent_s_rate_holds_across_replicas() {
    let pair = Pair::start(offering("solo", "qa"), Some(4)).await;
    let (key, gws) = (pair.key.as_str(), &pair.gws);
    // Four messages a minute, two on each replica: all taken.
    for (i, gw) in [0, 1, 0, 1].into_iter().enumerate() {
        let said = send(&gws[gw], Some(key), status_request("ctl", i as i64 + 1)).await;
        assert_eq!(said.status, 200, "{i}: {}", said.text);
    }
    // The fifth, on either replica, is refused.
    for gw in gws {
        let said = send(gw, Some(key), status_request("ctl", 9)).await;
        assert_eq!(said.status, 429, "{}", said.text);
        assert!(
            string(&said.forms[0], "reason").contains("rate limit"),
            "{}",
            said.text
        );
    }
    // Another agent has its own allowance.
    let said = send(&gws[1], Some(key), status_request("other", 10)).await;
    assert_eq!(said.status, 200, "{}", said.text);
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_status_request_on_another_replica_finds_the_task() {
    let pair = Pair::start(offering("solo", "qa"), Some(100)).await;
    let (key, gws) = (pair.key.as_str(), &pair.gws);
    let (one, two) = (&gws[0], &gws[1]);
    // A first task (the tenant's LADP session opened), then one whose round trips count.
    let said = send(one, Some(key), task_init("ctl", 41, "warm", "")).await;
    assert_eq!(said.status, 200, "{}", said.text);
    let before = one.metrics().await;
    let said = send(one, Some(key), task_init("ctl", 42, "2 + 2?", "")).await;
    assert_eq!(said.status, 200, "{}", said.text);
    let ops = redis_ops(&before, &one.metrics().await);
    eprintln!("redis round trips per LADP task: {ops:?}");
    // The bridge's three (the agent's rate, the task's start and end in the book), then the
    // task's as on the LDP routes: the session touched, its status running and answered.
    let want = [
        ("ladp_book_finish", 1.0),
        ("ladp_book_start", 1.0),
        ("rate_limit", 1.0),
        ("session_touch", 1.0),
        ("status_set", 2.0),
    ];
    let task_id = said
        .headers
        .get("x-ldp-task-id")
        .and_then(|v| v.to_str().ok())
        .unwrap()
        .to_owned();
    let asks = [
        status_request("ctl", 43),
        "(msg status-request ctl gateway 44 (data (target-msg 42)))".to_owned(),
        format!("(msg status-request ctl gateway 45 (data (task-id {task_id:?})))"),
    ];
    for ask in asks {
        let said = send(two, Some(key), ask).await;
        assert_eq!(said.status, 200, "{}", said.text);
        assert_eq!(string(&said.forms[0], "phase"), "done", "{}", said.text);
        assert_eq!(string(&said.forms[0], "task-id"), task_id);
    }
    assert_eq!(
        ops,
        want.map(|(op, n)| (op.to_owned(), n)).into(),
        "{ops:?}"
    );
    // Another agent of the tenant has none.
    let said = send(two, Some(key), status_request("someone-else", 46)).await;
    assert_eq!(string(&said.forms[0], "phase"), "idle", "{}", said.text);
    pair.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_halt_on_another_replica_stops_the_running_task() {
    let mut slow = offering("slow", "qa");
    slow.latency = Duration::from_secs(30);
    let pair = Pair::start(slow, Some(100)).await;
    let (d, key, gws) = (&pair.d, pair.key.as_str(), &pair.gws);
    let running = {
        let c = gws[0].client();
        let body = task_init("ctl", 42, "take your time", "");
        let key = key.to_owned();
        tokio::spawn(async move {
            let resp = c
                .http
                .post(c.url("/ladp"))
                .bearer_auth(key)
                .body(body)
                .send()
                .await
                .expect("task-init");
            (
                resp.status().as_u16(),
                resp.text().await.unwrap_or_default(),
            )
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || d.stats().tasks == 1).await,
        "the task reached the delegate"
    );
    let two = &gws[1];
    let said = send(two, Some(key), status_request("ctl", 43)).await;
    assert_eq!(string(&said.forms[0], "phase"), "running", "{}", said.text);
    let task_id = string(&said.forms[0], "task-id").to_owned();
    let said = send(two, Some(key), "(msg halt ctl gateway 45 (data))").await;
    assert_eq!(said.status, 200, "{}", said.text);
    let halt = ladp::Meta::from_sexp(&said.forms[0].data[0]).unwrap();
    assert_eq!(
        halt,
        ladp::Meta::halt_controller("45", 1),
        "replica 2 stops the task replica 1 runs: {}",
        said.text
    );
    let (status, text) = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the halted task answers at once")
        .unwrap();
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("CANCELLED"), "{text}");
    assert!(text.contains(&format!("(task-id \"{task_id}\")")), "{text}");
    let said = send(two, Some(key), status_request("ctl", 46)).await;
    assert_eq!(string(&said.forms[0], "phase"), "failed", "{}", said.text);
    pair.stop().await;
}
