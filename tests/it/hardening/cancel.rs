//! Item 8: verification outlived its task. After TASK_CANCEL (answered "cancelled") or a
//! client leaving, more producer rounds and verifier calls ran and were charged. Now the
//! cancel reaches the running task: no round, verifier or failover starts after it, its calls
//! in flight are dropped, and every delegate it runs on (producer and verifiers) is sent
//! TASK_CANCEL. Verifiers written in the test hold each vote until the test lets them go,
//! then vote the result down (which, uncancelled, starts another round), and count every
//! call.

use super::liar::{handshake, is_card, ldp_card, Asked, Lie};
use crate::support::{eventually, Client, TestGateway};
use crate::verify::{policy, producer, question};
use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A verifier that holds every vote until released, then votes the result down.
#[derive(Clone)]
struct Judge {
    id: String,
    url: String,
    /// TASK_SUBMITs received.
    submits: Arc<AtomicUsize>,
    /// Task ids it was sent TASK_CANCEL for.
    cancels: Arc<Mutex<Vec<String>>>,
    /// Task ids it was sent.
    tasks: Arc<Mutex<Vec<String>>>,
    release: watch::Sender<bool>,
}

fn envelope(id: &str, body: Value) -> Lie {
    let env = json!({
        "message_id": uuid::Uuid::new_v4().to_string(), "session_id": format!("{id}-session"),
        "from": format!("ldp:delegate:{id}"), "to": "ldp:delegate:gateway", "body": body,
        "payload_mode": "text", "timestamp": chrono::Utc::now().to_rfc3339(), "provenance": null
    });
    Lie::new(200).json(&env)
}

fn respond(lie: Lie) -> Response {
    let mut resp = (StatusCode::from_u16(lie.status).unwrap(), lie.body).into_response();
    for (name, value) in lie.headers {
        resp.headers_mut()
            .insert(name, axum::http::HeaderValue::from_str(&value).unwrap());
    }
    resp
}

impl Judge {
    async fn start(id: &str) -> Judge {
        let (release, _) = watch::channel(false);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let judge = Judge {
            id: id.to_owned(),
            url: format!("http://{}", l.local_addr().unwrap()),
            submits: Arc::default(),
            cancels: Arc::default(),
            tasks: Arc::default(),
            release,
        };
        let j = judge.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, body: Bytes| {
            let j = j.clone();
            async move { respond(j.answer(uri, body).await) }
        });
        tokio::spawn(async move { axum::serve(l, app).await });
        judge
    }

    async fn answer(&self, uri: Uri, body: Bytes) -> Lie {
        let asked = Asked {
            path: uri.path().to_owned(),
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        if is_card(&asked.path) {
            return Lie::new(200).json(&ldp_card(&self.id, "verify", 0.9, 0.0001));
        }
        if let Some(h) = handshake(&self.id, &asked) {
            return h;
        }
        let env: Value = serde_json::from_str(&asked.body).unwrap_or_default();
        let task_id = env["body"]["task_id"].clone();
        match asked.ldp_type().as_deref() {
            Some("TASK_SUBMIT") => {
                self.submits.fetch_add(1, Ordering::SeqCst);
                self.tasks
                    .lock()
                    .unwrap()
                    .push(task_id.as_str().unwrap_or_default().to_owned());
                let mut released = self.release.subscribe();
                let _ = released.wait_for(|r| *r).await;
                envelope(
                    &self.id,
                    json!({"type": "TASK_RESULT", "task_id": task_id,
                        "output": {"passed": false, "confidence": 0.9}}),
                )
            }
            Some("TASK_CANCEL") => {
                self.cancels
                    .lock()
                    .unwrap()
                    .push(task_id.as_str().unwrap_or_default().to_owned());
                envelope(
                    &self.id,
                    json!({"type": "TASK_UPDATE", "task_id": task_id, "message": "cancelled"}),
                )
            }
            _ => Lie::new(400),
        }
    }

    fn submits(&self) -> usize {
        self.submits.load(Ordering::SeqCst)
    }

    fn cancelled(&self) -> Vec<String> {
        self.cancels.lock().unwrap().clone()
    }

    fn asked(&self) -> Vec<String> {
        self.tasks.lock().unwrap().clone()
    }

    fn release(&self) {
        self.release.send_replace(true);
    }
}

/// Two producers (another round has somewhere to go), two judges; every `qa` task verified by
/// both, for up to two rounds.
async fn fleet() -> (TestGateway, [Judge; 2]) {
    let judges = [Judge::start("judge-1").await, Judge::start("judge-2").await];
    let gw = TestGateway::builder()
        .sim(producer("p1", "alpha", 0.9, 0.001, 1.0))
        .sim(producer("p2", "beta", 0.9, 0.002, 1.0))
        .delegate(&judges[0].url)
        .delegate(&judges[1].url)
        .policy("verified.toml", &policy(2, 2, 1.0))
        .config(|c| c.policies.default = "verified".into())
        .spawn()
        .await;
    (gw, judges)
}

fn producer_calls(gw: &TestGateway) -> u64 {
    gw.sim(0).stats().tasks + gw.sim(1).stats().tasks
}

/// Waits until both judges hold a vote of the task (one producer answered).
async fn both_judging(gw: &TestGateway, judges: &[Judge; 2]) {
    assert!(
        eventually(Duration::from_secs(10), || judges
            .iter()
            .all(|j| j.submits() == 1))
        .await,
        "both judges asked"
    );
    assert_eq!(producer_calls(gw), 1);
}

/// After the cancel: every judge was sent TASK_CANCEL for the vote it held, and once they are
/// let go nothing more is asked of anyone; the row says CANCELLED.
async fn nothing_after(gw: &TestGateway, judges: &[Judge; 2], task: &str) {
    for j in judges {
        assert!(
            eventually(Duration::from_secs(10), || j.cancelled() == j.asked()).await,
            "{}: asked {:?}, cancelled {:?}",
            j.id,
            j.asked(),
            j.cancelled()
        );
    }
    // Let the judges go (if they are not yet): uncancelled, their votes down would start
    // round two.
    for j in judges {
        j.release();
    }
    let row = gw.ledger_row(task).await;
    assert_eq!(row.error_code.as_deref(), Some("CANCELLED"), "{row:?}");
    // The row is written once the task has ended: nothing of it can start any more.
    let m = gw.metrics().await;
    eprintln!(
        "after the cancel: {} producer call(s), {} verifier call(s), row cost {:?}",
        producer_calls(gw),
        judges.iter().map(Judge::submits).sum::<usize>(),
        row.cost_usd
    );
    assert_eq!(producer_calls(gw), 1, "no producer round after the cancel");
    for j in judges {
        assert_eq!(
            j.submits(),
            1,
            "{}: no verifier call after the cancel",
            j.id
        );
    }
    assert_eq!(
        m.sum(r#"ldp_gateway_verifications_total{policy="verified",result="failed"}"#),
        0.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_task_starts_no_round_or_verifier_and_cancels_every_upstream() {
    let (gw, judges) = fleet().await;
    let c = Arc::new(gw.client());
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    let submit = {
        let (c, s) = (c.clone(), s.clone());
        tokio::spawn(async move {
            c.send(
                &s,
                json!({"type": "TASK_SUBMIT", "task_id": "judged-1", "skill": "qa",
                    "input": question(3)}),
                "text",
            )
            .await
        })
    };
    both_judging(&gw, &judges).await;
    let ack = c
        .send(
            &s,
            json!({"type": "TASK_CANCEL", "task_id": "judged-1"}),
            "text",
        )
        .await;
    assert_eq!(ack["body"]["type"], "TASK_UPDATE", "{ack}");
    assert_eq!(ack["body"]["message"], "cancelled", "{ack}");
    // The judges vote (down) at once: a task still running would go to round two.
    for j in &judges {
        j.release();
    }
    let done = tokio::time::timeout(Duration::from_secs(10), submit)
        .await
        .expect("the cancelled task answers at once")
        .unwrap();
    assert_eq!(done["body"]["type"], "TASK_FAILED", "{done}");
    assert_eq!(done["body"]["error"]["code"], "CANCELLED", "{done}");
    nothing_after(&gw, &judges, "judged-1").await;
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_leaves_mid_verification_cancels_every_upstream() {
    let (gw, judges) = fleet().await;
    let c: Client = gw.client();
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    let submit = {
        let (c, s) = (c.clone(), s.clone());
        tokio::spawn(async move {
            c.send(
                &s,
                json!({"type": "TASK_SUBMIT", "task_id": "left-1", "skill": "qa",
                    "input": question(4)}),
                "text",
            )
            .await
        })
    };
    both_judging(&gw, &judges).await;
    // The client goes away: its request (and connection) dropped.
    submit.abort();
    let _ = submit.await;
    nothing_after(&gw, &judges, "left-1").await;
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_openai_client_that_leaves_mid_verification_cancels_every_upstream() {
    let (gw, judges) = fleet().await;
    let c: Client = gw.client();
    let ask = json!({"model": "qa", "messages": [{"role": "user", "content": "what is 2 + 2?"}]});
    let submit = tokio::spawn(async move { c.post_json("/v1/chat/completions", &ask).await });
    both_judging(&gw, &judges).await;
    // The client goes away before its answer.
    submit.abort();
    let _ = submit.await;
    for j in &judges {
        assert!(
            eventually(Duration::from_secs(10), || !j.cancelled().is_empty()).await,
            "{} was sent no TASK_CANCEL",
            j.id
        );
    }
    let task = judges[0].asked()[0].split('~').next().unwrap().to_owned();
    nothing_after(&gw, &judges, &task).await;
    gw.shutdown().await;
}
