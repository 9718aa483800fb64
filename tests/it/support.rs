//! Test harness: simulated delegates and a gateway on ephemeral loopback ports, and a small
//! LDP client speaking raw JSON.
#![allow(dead_code)]

pub mod ledger_contract;

use ldp_gateway::config::{Config, DelegateConfig};
use ldp_gateway::ldp::{Envelope, IdentityCard};
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::time::Duration;

/// A card built from JSON, with `delegate_id`, `name` and one skill filled in.
pub fn card(id: &str, domain: &str, skills: &[(&str, f64)], modes: &[&str]) -> IdentityCard {
    let caps: Vec<Value> = skills
        .iter()
        .map(|(s, q)| json!({"name": s, "quality": {"quality_score": q, "cost_per_call_usd": 0.002, "latency_p50_ms": 50, "supports_streaming": false}}))
        .collect();
    serde_json::from_value(json!({
        "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": "sim",
        "model_version": format!("{id}-1"), "trust_domain": domain, "context_window": 8192,
        "capabilities": caps, "supported_payload_modes": modes, "endpoint": ""
    }))
    .expect("test card")
}

/// Starts a simulated delegate with `opts`.
pub async fn sim(opts: SimOptions) -> SimHandle {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind sim");
    ldp_gateway::sim::spawn(l, opts).await.expect("spawn sim")
}

/// Starts a gateway in front of `urls`, waiting until `healthy` of them are up.
pub async fn gateway(urls: &[String], healthy: usize) -> Gateway {
    gateway_with(urls, healthy, |_| {}).await
}

/// Like [`gateway`], with a hook to adjust the config.
pub async fn gateway_with(
    urls: &[String],
    healthy: usize,
    tweak: impl FnOnce(&mut Config),
) -> Gateway {
    let mut cfg = Config::default();
    cfg.server.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.admin.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.discovery.poll_interval = Duration::from_secs(3600);
    cfg.policies.dir = concat!(env!("CARGO_MANIFEST_DIR"), "/policies").into();
    cfg.provenance.store = format!("sqlite://{}", temp_db().display());
    cfg.delegates = urls
        .iter()
        .enumerate()
        .map(|(i, u)| DelegateConfig {
            name: Some(format!("d{i}")),
            ..DelegateConfig::new(u.clone())
        })
        .collect();
    tweak(&mut cfg);
    let gw = Gateway::start(cfg).await.expect("gateway starts");
    assert!(
        gw.wait_healthy(healthy, Duration::from_secs(10)).await,
        "delegates did not come up"
    );
    gw
}

/// A fresh SQLite path under the system temp dir (one per call).
pub fn temp_db() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "ldp-gw-test-{}-{n}-{}.db",
        std::process::id(),
        uuid::Uuid::new_v4()
    ))
}

/// A raw-JSON LDP client.
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    pub from: String,
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: base.to_owned(),
            from: "ldp:client:test".into(),
        }
    }

    /// POSTs raw bytes to /ldp/messages; returns status and body JSON.
    pub async fn post_raw(&self, body: Vec<u8>) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/ldp/messages", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("post");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.expect("body");
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}));
        (status, v)
    }

    /// Sends one envelope (JSON) and expects HTTP 200 with an envelope back.
    pub async fn send(&self, session_id: &str, body: Value, mode: &str) -> Value {
        let env = json!({
            "message_id": uuid::Uuid::new_v4().to_string(), "session_id": session_id,
            "from": self.from, "to": "ldp:delegate:gateway", "body": body,
            "payload_mode": mode, "timestamp": "2026-11-22T00:00:00Z", "provenance": null
        });
        let (status, v) = self.post_raw(serde_json::to_vec(&env).expect("json")).await;
        assert_eq!(status, 200, "{v}");
        // Everything the gateway answers must read as an envelope.
        Envelope::from_slice(&serde_json::to_vec(&v).expect("json"))
            .expect("answer is an envelope");
        v
    }

    /// HELLO then SESSION_PROPOSE with `config`; returns the SESSION_ACCEPT/REJECT body.
    pub async fn open(&self, config: Value) -> Value {
        let hello = self
            .send("", json!({"type": "HELLO", "delegate_id": self.from, "supported_modes": ["semantic_frame", "text"]}), "text")
            .await;
        assert_eq!(hello["body"]["type"], "CAPABILITY_MANIFEST", "{hello}");
        let v = self
            .send(
                "",
                json!({"type": "SESSION_PROPOSE", "config": config}),
                "text",
            )
            .await;
        if v["body"]["type"] == "SESSION_ACCEPT" {
            assert_eq!(
                v["session_id"], v["body"]["session_id"],
                "envelope carries the new session id"
            );
        }
        v["body"].clone()
    }

    /// Opens a session and returns its id and negotiated mode.
    pub async fn session(&self, config: Value) -> (String, String) {
        let b = self.open(config).await;
        assert_eq!(b["type"], "SESSION_ACCEPT", "{b}");
        (
            b["session_id"].as_str().expect("id").to_owned(),
            b["negotiated_mode"].as_str().expect("mode").to_owned(),
        )
    }

    /// TASK_SUBMIT; returns the answer's body.
    pub async fn task(&self, session: &str, skill: &str, input: Value, mode: &str) -> Value {
        let task_id = uuid::Uuid::new_v4().to_string();
        let v = self
            .send(
                session,
                json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": skill, "input": input}),
                mode,
            )
            .await;
        assert_eq!(v["body"]["task_id"], task_id.as_str(), "{v}");
        v["body"].clone()
    }
}

/// Polls `check` every 20 ms until it is true or `within` passes.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// A `serve` config in `dir` for the real binary: ephemeral loopback listeners, hourly card
/// polls, the shipped policies, a SQLite ledger at `db`, the `delegates` as `(url, name)`,
/// and `extra` TOML appended (sections not named above).
pub fn serve_config(
    dir: &std::path::Path,
    db: &std::path::Path,
    delegates: &[(&str, &str)],
    extra: &str,
) -> std::path::PathBuf {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [discovery]\npoll_interval = \"1h\"\n[policies]\ndir = {:?}\n\
         [provenance]\nstore = {:?}\ndurability = \"commit\"\n{extra}\n",
        concat!(env!("CARGO_MANIFEST_DIR"), "/policies"),
        format!("sqlite://{}", db.display()),
    );
    for (url, name) in delegates {
        text.push_str(&format!("[[delegates]]\nurl = {url:?}\nname = {name:?}\n"));
    }
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Reads a `serve` child's stdout until it has printed its LDP and admin URLs (30 s at
/// most), then keeps draining it so the child never blocks on a full pipe.
pub async fn served_urls(stdout: tokio::process::ChildStdout) -> Option<(String, String)> {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let (mut ldp, mut admin) = (None, None);
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while ldp.is_none() || admin.is_none() {
            let Ok(Some(line)) = lines.next_line().await else {
                break;
            };
            if let Some(u) = line.strip_prefix("LDP endpoint:") {
                ldp = Some(u.trim().to_owned());
            } else if let Some(u) = line.strip_prefix("admin:") {
                admin = Some(u.trim().to_owned());
            }
        }
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some((ldp?, admin?))
}
