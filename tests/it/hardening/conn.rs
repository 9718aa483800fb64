//! Connections and requests that outlive their client: the write deadline and the connection
//! cap (item 6), a task whose client gave up (9), SIGHUP during start-up (12), the lingering
//! close after an oversized body (16) and the tracked background work shutdown waits for (17).

use crate::support::process::{self, output_within, py_code, pythons, Serve};
use crate::support::{eventually, eventually_async, Card, TestGateway};
use ldp_gateway::config::{BudgetConfig, TenantConfig};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Resident memory of this process (gateway and clients alike, and any test running beside
/// this one: it is reported, never asserted), MB.
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A card with `n` skills, each with a long description: `/ldp/capabilities` of a gateway in
/// front of it is a large answer.
fn big_card(n: usize) -> IdentityCard {
    (0..n)
        .fold(Card::new("big"), |c, i| {
            c.capability(
                json!({"name": format!("skill-{i:04}"), "description": "d".repeat(500),
                   "quality": {"quality_score": 0.9, "latency_p50_ms": 50}}),
            )
        })
        .build()
}

/// Reads until the peer closes (EOF or reset) or `within` passes; the bytes read and how it
/// ended (`None`: still open at the deadline).
async fn read_until_closed(tcp: &mut TcpStream, within: Duration) -> (Vec<u8>, Option<String>) {
    let mut got = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return (got, None),
            Ok(Ok(0)) => return (got, Some("eof".into())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return (got, Some(e.kind().to_string())),
        }
    }
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| w == &needle)
        .count()
}

// ---------------------------------------------------------------------------------------
// 6. Clients that do not read their answers; the connection cap
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_that_never_read_their_answers_are_cut_off_by_the_write_timeout() {
    const CLIENTS: usize = 20;
    const PIPELINED: usize = 300;
    let gw = TestGateway::builder()
        .sim(SimOptions::new(big_card(400)))
        .config(|c| c.server.write_timeout = Duration::from_secs(1))
        .spawn()
        .await;
    let answer = gw.client().get("/ldp/capabilities").await.raw.len();
    let before = rss_mb();
    let addr = gw.ldp_url().trim_start_matches("http://").to_owned();
    let request = "GET /ldp/capabilities HTTP/1.1\r\nhost: gw\r\n\r\n".repeat(PIPELINED);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        clients.push(tcp);
    }
    // Several MB of answers per connection fill both socket buffers: the gateway's writes stall.
    let mut peak = before;
    let stalled_at = Instant::now();
    let all_closed = eventually(Duration::from_secs(30), || {
        peak = peak.max(rss_mb());
        gw.open_connections() == 0
    })
    .await;
    let closed_after = stalled_at.elapsed();
    assert!(
        all_closed,
        "{} of {CLIENTS} connections that read nothing still open after 30 s (RSS {before:.0} → \
         {peak:.0} MB)",
        gw.open_connections()
    );
    // A client that reads is served as before.
    let ok = gw.client().get("/ldp/capabilities").await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.raw.len(), answer);
    // Each stalled client now finds its connection closed, most answers never sent.
    let mut answered = Vec::new();
    for tcp in &mut clients {
        let (got, end) = read_until_closed(tcp, Duration::from_secs(30)).await;
        assert!(end.is_some(), "a stalled connection is still open");
        let n = count(&got, b"HTTP/1.1 200 OK");
        assert!(n < PIPELINED, "all {n} answers were sent: nothing was cut");
        answered.push(n);
    }
    let after = rss_mb();
    println!(
        "{CLIENTS} clients × {PIPELINED} pipelined GETs of a {answer}-byte answer, never read, \
         write_timeout 1 s → all closed within {:.1} s (answers sent before the cut per \
         connection: {}–{}); RSS {before:.0} → peak {peak:.0} → {after:.0} MB",
        closed_after.as_secs_f64(),
        answered.iter().min().unwrap(),
        answered.iter().max().unwrap(),
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_are_closed_at_once() {
    let gw = TestGateway::builder()
        .config(|c| {
            c.server.max_connections = 4;
            // Idle connections must stay open for the test's length.
            c.server.header_read_timeout = Duration::from_secs(120);
        })
        .spawn()
        .await;
    let addr = gw.ldp_url().trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    assert!(
        eventually(Duration::from_secs(10), || gw.open_connections() == 4).await,
        "the four connections were accepted ({} open)",
        gw.open_connections()
    );
    let health = b"GET /healthz HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n";
    let mut fifth = TcpStream::connect(&addr).await.unwrap();
    // The write may already fail: the gateway may have closed it.
    let _ = fifth.write_all(health).await;
    let (got, end) = read_until_closed(&mut fifth, Duration::from_secs(20)).await;
    assert!(
        got.is_empty() && end.is_some(),
        "the fifth connection is closed without an answer: got {:?}, end {end:?}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(gw.open_connections(), 4);

    drop(held.pop());
    assert!(
        eventually(Duration::from_secs(10), || gw.open_connections() == 3).await,
        "a closed connection frees its slot"
    );
    let mut next = TcpStream::connect(&addr).await.unwrap();
    next.write_all(health).await.unwrap();
    let (got, _) = read_until_closed(&mut next, Duration::from_secs(20)).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    println!("max_connections 4: 4 held open, the 5th closed unanswered ({end:?}); one freed → the next gets 200");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 9. A task whose client gave up on /ldp/messages
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_whose_client_gave_up_settles_its_budget_and_writes_its_row() {
    const ABANDONED: usize = 5;
    // Reserved per task: 0.0015 × 1.25 = 0.001875 of 0.0025 a day, so a reservation that is
    // never settled shuts the tenant out for the day.
    let price = 0.0015;
    let card = Card::new("slow")
        .priced("summarize", 0.9, price, 50)
        .build();
    let mut opts = SimOptions::new(card);
    opts.latency = Duration::from_secs(5);
    let key = format!("key-{}", uuid::Uuid::new_v4().simple());
    let gw = TestGateway::builder()
        .sim(opts)
        .tenant(TenantConfig {
            name: "payer".into(),
            api_key_sha256: vec![ldp_gateway::secret::hash_key(&key)],
            trust_domains: vec!["default".into()],
            policies: vec![],
            default_policy: None,
            limits: None,
            skill_limits: None,
            budget: BudgetConfig {
                usd_per_day: Some(0.0025),
                ..BudgetConfig::default()
            },
            signing: None,
            max_sessions: None,
            trusted_rater: false,
        })
        .spawn()
        .await;
    let s = gw.sim(0);
    let client = gw.client().with_key(Some(&key));
    let long = Some(Duration::from_secs(60));
    let accept = client
        .try_post_body("", json!({"type": "SESSION_PROPOSE", "config": {}}), long)
        .await
        .unwrap()
        .json;
    let sid = accept["body"]["session_id"].as_str().unwrap().to_owned();
    let rows = || gw.ledger("tenant=payer&limit=100");
    for i in 0..ABANDONED {
        let task = json!({"type": "TASK_SUBMIT", "task_id": format!("gone-{i}"),
                          "skill": "summarize", "input": {"text": "x"}});
        let gave_up = client
            .try_post_body(&sid, task, Some(Duration::from_millis(500)))
            .await;
        assert!(
            gave_up.as_ref().is_err_and(reqwest::Error::is_timeout),
            "task {i}: the client times out waiting (a 5 s delegate): {gave_up:?}"
        );
        // Its row is written once the delegate stops it (cancelled upstream).
        eventually_async(Duration::from_secs(20), || async { rows().await.len() > i }).await;
        assert_eq!(
            rows().await.len(),
            i + 1,
            "no ledger row for abandoned task {i}"
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || s.stats().cancels
            == ABANDONED as u64)
        .await,
        "each abandoned task was cancelled upstream: {:?}",
        s.stats()
    );
    for r in rows().await {
        assert_eq!(r.error_code.as_deref(), Some("CANCELLED"), "{r:?}");
        assert_eq!(r.cost_usd, None, "{r:?}");
    }
    // Every reservation was settled: the next task is admitted and served.
    let done = client
        .try_post_body(
            &sid,
            json!({"type": "TASK_SUBMIT", "task_id": "after", "skill": "summarize", "input": {"text": "x"}}),
            long,
        )
        .await
        .unwrap()
        .json;
    assert_eq!(done["body"]["type"], "TASK_RESULT", "{done}");
    let ledger_spend: f64 = rows().await.iter().filter_map(|r| r.cost_usd).sum();
    let spent = gw.spent_today("payer");
    assert!(ledger_spend > 0.0);
    assert!(
        (spent - ledger_spend).abs() < 1e-9,
        "budget spend {spent} = ledger spend {ledger_spend}"
    );
    println!(
        "{ABANDONED} clients gave up after 0.5 s on a 5 s delegate (budget 0.0025 USD/day, \
         0.001875 reserved per task) → {ABANDONED} ledger rows CANCELLED, {} TASK_CANCELs \
         upstream; the next task served, spend {spent:.6} = ledger {ledger_spend:.6}",
        s.stats().cancels
    );
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 12. SIGHUP during start-up
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_during_a_slow_start_is_a_reload_not_an_exit() {
    // A "delegate" that accepts and never answers: the first card poll waits its deadline.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let (polled_tx, polled) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        let mut polled_tx = Some(polled_tx);
        while let Ok((tcp, _)) = silent.accept().await {
            held.push(tcp);
            if let Some(tx) = polled_tx.take() {
                let _ = tx.send(());
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    // The first card poll waits on the silent delegate for 3 s: SIGHUP arrives meanwhile.
    let config = TestGateway::builder()
        .delegate(&silent_url)
        .config(|c| c.discovery.fetch_timeout = Duration::from_secs(3))
        .config_file(dir.path())
        .await;
    let child = Serve::new(&config).spawn();
    tokio::time::timeout(Duration::from_secs(30), polled)
        .await
        .expect("the gateway fetches the silent delegate's card")
        .unwrap();
    child.signal("-HUP");
    // It finishes starting (the poll times out), then prints its URLs.
    let mut served = process::Served::ready(child).await;
    assert_eq!(served.client().get("/healthz").await.status, 200);
    // The early SIGHUP was kept and became one policy reload once the watcher ran.
    let admin = served.admin();
    let reloads = Arc::new(std::sync::Mutex::new(String::new()));
    let reloaded = eventually_async(Duration::from_secs(10), || async {
        let line = admin
            .get("/metrics")
            .await
            .text()
            .lines()
            .find(|l| l.starts_with("ldp_gateway_policy_reloads_total{result=\"ok\"}"))
            .unwrap_or("")
            .to_owned();
        *reloads.lock().unwrap() = line.clone();
        line.ends_with(" 1")
    })
    .await;
    assert!(
        reloaded,
        "one reload after the early SIGHUP: {:?}",
        reloads.lock().unwrap()
    );
    assert!(served.process.is_running(), "still running");
    println!(
        "SIGHUP during the first card poll (3 s fetch deadline) → still running, /healthz 200, {}",
        reloads.lock().unwrap()
    );
    served.kill().await;
    holder.abort();
}

// ---------------------------------------------------------------------------------------
// 16. The 413 after an oversized body
// ---------------------------------------------------------------------------------------

const TEN_MIB: usize = 10 * 1024 * 1024;

/// Sends `head` then `body` on a fresh connection and reads the answer until the gateway
/// closes; an error if the request could not be sent whole.
async fn send_raw(addr: &str, head: &str, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(body).await?;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut got))
        .await
        .map_err(|_| std::io::Error::other("no answer within 30 s"))??;
    Ok(got)
}

/// Asserts `raw` is a 413 answer with `{"error": {"code": "PAYLOAD_TOO_LARGE"}}` that closes.
fn assert_413(what: &str, raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    assert!(text.starts_with("HTTP/1.1 413"), "{what}: {text}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{what}: {head}"
    );
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"]["code"], "PAYLOAD_TOO_LARGE", "{what}: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_ten_mib_reads_the_413_instead_of_a_reset() {
    let gw = TestGateway::builder().spawn().await;
    let addr = gw.ldp_url().trim_start_matches("http://").to_owned();
    let body = vec![b' '; TEN_MIB];

    let head = format!(
        "POST /ldp/messages HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: {TEN_MIB}\r\n\r\n"
    );
    let raw = send_raw(&addr, &head, &body)
        .await
        .expect("the whole 10 MiB body is accepted and the answer read");
    assert_413("content-length", &raw);

    // Chunked: the limit is found while reading, not from a declared length.
    let chunked: Vec<u8> = body
        .chunks(1024 * 1024)
        .flat_map(|c| {
            [
                format!("{:x}\r\n", c.len()).into_bytes(),
                c.to_vec(),
                b"\r\n".to_vec(),
            ]
        })
        .flatten()
        .chain(b"0\r\n\r\n".iter().copied())
        .collect();
    let head = "POST /ldp/messages HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\n\r\n";
    let raw = send_raw(&addr, head, &chunked)
        .await
        .expect("the whole chunked body is accepted and the answer read");
    assert_413("chunked", &raw);

    // A client that waits for `100 Continue` is answered without being asked for the body.
    let head = format!(
        "POST /ldp/messages HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: {TEN_MIB}\r\nexpect: 100-continue\r\n\r\n"
    );
    let raw = send_raw(&addr, &head, b"").await.unwrap();
    assert_413("expect: 100-continue", &raw);
    println!("10 MiB bodies (content-length, chunked) → sent whole, 413 PAYLOAD_TOO_LARGE read; with expect: 100-continue → 413 before the body");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_async_http_client_reads_the_413_for_a_ten_mib_body() {
    let Some((_, python)) = pythons("httpx posting 10 MiB").into_iter().next() else {
        return;
    };
    let gw = TestGateway::builder().spawn().await;
    // The reference SDK's transport: httpx.AsyncClient.
    let script = r#"
import asyncio, json, sys, httpx
async def main():
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(sys.argv[1] + "/ldp/messages", content=b" " * (10 * 1024 * 1024),
                         headers={"content-type": "application/json"})
        print(json.dumps({"status": r.status_code, "body": r.json()}))
asyncio.run(main())
"#;
    let mut cmd = py_code(&python, script);
    cmd.arg(gw.ldp_url());
    let out = output_within(cmd, Duration::from_secs(60)).await;
    assert!(
        out.status.success(),
        "httpx.AsyncClient failed: {}",
        process::text(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], 413, "{v}");
    assert_eq!(v["body"]["error"]["code"], "PAYLOAD_TOO_LARGE", "{v}");
    println!("httpx.AsyncClient posting 10 MiB → {v}");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 17. Work spawned on request paths is tracked
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_work_a_request_left_behind() {
    let gw = TestGateway::builder().spawn().await;
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    gw.spawn_tracked(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        flag.store(true, Ordering::SeqCst);
    });
    gw.shutdown().await;
    assert!(
        finished.load(Ordering::SeqCst),
        "shutdown returned before the tracked work finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_waiting_for_tracked_work_at_the_grace_deadline() {
    let gw = TestGateway::builder()
        .config(|c| c.server.shutdown_grace = Duration::from_secs(1))
        .spawn()
        .await;
    gw.spawn_tracked(tokio::time::sleep(Duration::from_secs(3600)));
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), gw.shutdown())
        .await
        .expect("shutdown is bounded by its grace period");
    println!(
        "tracked work of 1 h, grace 1 s → shutdown took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
