//! Feedback: `POST /ldp/feedback` rates a tenant's own task once; the rating lives in the
//! ledger beside the task's row (SQLite across a restart, Postgres across replicas), shows
//! in `/admin/provenance?task_id=…`, and counts in `ldp_gateway_feedback_total{outcome}`.

use crate::support::ledger::page;
use crate::support::stores::TempDb;
use crate::support::{card, sim, unique, Client, Resp, TestGateway};
use ldp_gateway::config::{Config, TenantConfig};
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};

fn tenant(name: &str, key: &str) -> TenantConfig {
    TenantConfig {
        api_key_sha256: vec![hash_key(key)],
        trust_domains: vec!["default".into()],
        ..TenantConfig::new(name)
    }
}

async fn echo() -> SimHandle {
    sim(SimOptions::new(card(
        "fb-echo",
        "default",
        &[("summarize", 0.9)],
        &["text"],
    )))
    .await
}

/// Two tenants, `alpha` and `beta`, with their keys.
struct Keys {
    alpha: String,
    beta: String,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            alpha: unique("key-alpha"),
            beta: unique("key-beta"),
        }
    }

    fn configure(&self, c: &mut Config) {
        c.tenants = vec![tenant("alpha", &self.alpha), tenant("beta", &self.beta)];
    }
}

/// One task of the client's tenant, answered; its id.
async fn one_task(c: &Client) -> String {
    let sid = c.accepted(json!({})).await;
    let r = c
        .task(&sid, "summarize", json!({"text": "hi"}), "text")
        .await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    r["task_id"].as_str().unwrap().to_owned()
}

async fn rate(c: &Client, body: Value) -> Resp {
    c.post_json("/ldp/feedback", &body).await
}

/// The ratings `/admin/provenance?task_id=` shows.
async fn shown(gw: &TestGateway, task_id: &str) -> Vec<Value> {
    let (rows, page) = page(&gw.admin(), &format!("task_id={task_id}")).await;
    assert!(!rows.is_empty(), "the task's row: {page}");
    page["feedback"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_rates_its_own_task_once() {
    let s = echo().await;
    let keys = Keys::new();
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| keys.configure(c))
        .spawn()
        .await;
    let alpha = gw.client().with_key(Some(&keys.alpha));
    let beta = gw.client().with_key(Some(&keys.beta));
    let task = one_task(&alpha).await;
    let before = gw.metrics().await;
    assert_eq!(
        before.sum("ldp_gateway_feedback_total{outcome=\"good\"}"),
        0.0,
        "pre-registered at zero: {before}"
    );
    assert!(before
        .text()
        .contains("ldp_gateway_feedback_total{outcome=\"score\"} 0"));

    // Another tenant's task and an unknown task: the same 404, so ids cannot be probed.
    let stolen = rate(&beta, json!({"task_id": task, "outcome": "bad"})).await;
    let unknown_id = uuid::Uuid::new_v4().to_string();
    let unknown = rate(&beta, json!({"task_id": unknown_id, "outcome": "bad"})).await;
    assert_eq!(stolen.status, 404, "{}", stolen.json);
    assert_eq!(
        stolen.json["error"]["code"], "TASK_NOT_FOUND",
        "{}",
        stolen.json
    );
    let without_id = |r: &Resp, id: &str| r.json.to_string().replace(id, "ID");
    assert_eq!(
        without_id(&stolen, &task),
        without_id(&unknown, &unknown_id)
    );
    assert!(shown(&gw, &task).await.is_empty(), "nothing stored");

    // No key, or a wrong one: 401 before anything else.
    for c in [
        gw.client().with_key(None),
        gw.client().with_key(Some("nope")),
    ] {
        let r = rate(&c, json!({"task_id": task, "outcome": "good"})).await;
        assert_eq!(r.status, 401, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "UNAUTHENTICATED", "{}", r.json);
    }

    // Bad bodies: 400 naming the field, nothing stored.
    let long = "x".repeat(gw_max_id() + 1);
    for (body, field) in [
        (json!({"outcome": "good"}), "task_id"),
        (json!({"task_id": long, "outcome": "good"}), "task_id"),
        (json!({"task_id": task}), "score"),
        (json!({"task_id": task, "score": 2}), "score"),
        (json!({"task_id": task, "outcome": "meh"}), "outcome"),
        (
            json!({"task_id": task, "score": 1, "outcome": "good"}),
            "outcome",
        ),
        (json!({"task_id": task, "score": 1, "stars": 5}), "stars"),
    ] {
        let r = rate(&alpha, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.json);
        assert_eq!(r.json["error"]["code"], "BAD_REQUEST", "{}", r.json);
        let m = r.json["error"]["message"].as_str().unwrap();
        assert!(m.contains(field), "{body}: {m}");
    }
    let r = alpha
        .post_with("/ldp/feedback", b"{not json".to_vec(), &[])
        .await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert!(shown(&gw, &task).await.is_empty(), "nothing stored");

    // The owner rates it: stored, shown, counted.
    let r = rate(&alpha, json!({"task_id": task, "score": 0.75})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(
        r.json,
        json!({"task_id": task, "score": 0.75, "outcome": "score"})
    );
    let fb = shown(&gw, &task).await;
    assert_eq!(fb.len(), 1, "{fb:?}");
    assert_eq!(fb[0]["tenant"], "alpha");
    assert_eq!(fb[0]["score"], 0.75);
    assert_eq!(fb[0]["skill"], "summarize");
    assert_eq!(
        fb[0]["delegate"],
        gw.ledger_row(&task).await.delegate.unwrap()
    );

    // Once: a second rating (another way of giving it too) is 409 and changes nothing.
    let again = rate(&alpha, json!({"task_id": task, "outcome": "bad"})).await;
    assert_eq!(again.status, 409, "{}", again.json);
    assert!(again.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("rated already"));
    assert_eq!(shown(&gw, &task).await[0]["score"], 0.75);

    // good and bad: 1 and 0; each counted under how it was given.
    let (t2, t3) = (one_task(&alpha).await, one_task(&beta).await);
    let r = rate(&alpha, json!({"task_id": t2, "outcome": "good"})).await;
    assert_eq!(
        (r.status, &r.json["score"]),
        (200, &json!(1.0)),
        "{}",
        r.json
    );
    let r = rate(&beta, json!({"task_id": t3, "outcome": "bad"})).await;
    assert_eq!(
        (r.status, &r.json["score"]),
        (200, &json!(0.0)),
        "{}",
        r.json
    );
    let m = gw.metrics().await;
    for (outcome, n) in [("good", 1.0), ("bad", 1.0), ("score", 1.0)] {
        let series = format!("ldp_gateway_feedback_total{{outcome=\"{outcome}\"}}");
        assert_eq!(m.sum(&series), n, "{series}: {m}");
    }
    let routed = m.sum("ldp_gateway_http_requests_total{route=\"/ldp/feedback\"");
    assert!(routed >= 10.0, "requests counted under their route: {m}");
    gw.shutdown().await;
    s.shutdown().await;
}

/// The default `security.max_id_bytes`.
fn gw_max_id() -> usize {
    Config::default().security.max_id_bytes
}

/// A failed task can be rated too (no delegate answered: none is recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_task_can_be_rated() {
    let s = echo().await;
    let gw = TestGateway::builder().delegate(&s.url()).spawn().await;
    let c = gw.client();
    let sid = c.accepted(json!({})).await;
    let r = c.task(&sid, "no-such-skill", json!("x"), "text").await;
    assert_eq!(r["type"], "TASK_FAILED", "{r}");
    let task = r["task_id"].as_str().unwrap();
    let r = rate(&c, json!({"task_id": task, "outcome": "bad"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let fb = shown(&gw, task).await;
    assert_eq!(
        (fb[0]["tenant"].clone(), fb[0]["delegate"].clone()),
        (json!("anonymous"), Value::Null)
    );
    gw.shutdown().await;
    s.shutdown().await;
}

/// Ratings and the tasks' owners come from the ledger file: after a restart a rated task is
/// still rated (409), an unrated one of before the restart can be rated, and another
/// tenant's is still 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ratings_survive_a_restart() {
    let s = echo().await;
    let keys = Keys::new();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let configure = |c: &mut Config| {
        keys.configure(c);
        c.provenance.store = store.clone();
    };
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(configure)
        .spawn()
        .await;
    let alpha = gw.client().with_key(Some(&keys.alpha));
    let (rated, unrated) = (one_task(&alpha).await, one_task(&alpha).await);
    let r = rate(&alpha, json!({"task_id": rated, "outcome": "good"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    gw.shutdown().await;

    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(configure)
        .spawn()
        .await;
    let alpha = gw.client().with_key(Some(&keys.alpha));
    let beta = gw.client().with_key(Some(&keys.beta));
    let fb = shown(&gw, &rated).await;
    assert_eq!((fb.len(), &fb[0]["outcome"]), (1, &json!("good")), "{fb:?}");
    let r = rate(&alpha, json!({"task_id": rated, "score": 0.1})).await;
    assert_eq!(r.status, 409, "{}", r.json);
    let r = rate(&beta, json!({"task_id": unrated, "score": 0.1})).await;
    assert_eq!(r.status, 404, "{}", r.json);
    let r = rate(&alpha, json!({"task_id": unrated, "score": 0.1})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(shown(&gw, &unrated).await[0]["score"], 0.1);
    gw.shutdown().await;
    s.shutdown().await;
}

/// Two replicas on one Postgres ledger: a task run on one is rated on the other, and a
/// second rating on the first is refused; the ledger's primary key decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_on_postgres_share_ratings() {
    let s = echo().await;
    let keys = Keys::new();
    let db = TempDb::new();
    let store = db.url();
    let configure = |c: &mut Config| {
        keys.configure(c);
        c.provenance.store = store.clone();
    };
    let a = TestGateway::builder()
        .delegate(&s.url())
        .config(configure)
        .spawn()
        .await;
    let b = TestGateway::builder()
        .delegate(&s.url())
        .config(configure)
        .spawn()
        .await;
    let on_a = a.client().with_key(Some(&keys.alpha));
    let on_b = b.client().with_key(Some(&keys.alpha));
    let task = one_task(&on_a).await;
    let r = rate(
        &b.client().with_key(Some(&keys.beta)),
        json!({"task_id": task, "outcome": "good"}),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.json);
    let r = rate(&on_b, json!({"task_id": task, "outcome": "good"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let r = rate(&on_a, json!({"task_id": task, "outcome": "bad"})).await;
    assert_eq!(r.status, 409, "{}", r.json);
    let fb = shown(&a, &task).await;
    assert_eq!((fb.len(), &fb[0]["score"]), (1, &json!(1.0)), "{fb:?}");
    a.shutdown().await;
    b.shutdown().await;
    s.shutdown().await;
}

/// Ratings are bounded like other requests: the body limit (413) and the tenant's rate
/// limit (429), which they share with the tenant's LDP messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ratings_are_bounded() {
    let s = echo().await;
    let key = unique("key-limited");
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            let mut t = tenant("limited", &key);
            t.limits = Some(ldp_gateway::config::RateConfig {
                rps: 0.1,
                burst: Some(3),
            });
            c.tenants = vec![t];
        })
        .spawn()
        .await;
    let c = gw.client().with_key(Some(&key));
    let huge = format!(
        r#"{{"task_id": "t", "score": 1, "pad": "{}"}}"#,
        "x".repeat(2 << 20)
    );
    let r = c.post_with("/ldp/feedback", huge.into_bytes(), &[]).await;
    assert_eq!(r.status, 413, "{}", r.text());
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = rate(&c, json!({"task_id": "unknown", "outcome": "good"})).await;
        statuses.push((r.status, r.json["error"]["code"].clone()));
    }
    assert_eq!(statuses[0], (404, json!("TASK_NOT_FOUND")), "{statuses:?}");
    assert_eq!(
        statuses.last(),
        Some(&(429, json!("RATE_LIMITED"))),
        "{statuses:?}"
    );
    gw.shutdown().await;
    s.shutdown().await;
}
