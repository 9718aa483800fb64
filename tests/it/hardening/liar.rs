//! Upstreams that misbehave on purpose: one HTTP server on a loopback port whose every answer
//! the test writes (any status, any header, any body), counting what it was asked. As an LDP
//! delegate it serves a real card and lies on `/ldp/messages`; as an OpenAI-compatible one it
//! answers `/v1/models` and lies on `/v1/chat/completions`.

use crate::support::cards::Card;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One answer: status, headers, body.
pub struct Lie {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl Lie {
    pub fn new(status: u16) -> Lie {
        Lie {
            status,
            headers: Vec::new(),
            body: String::new(),
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Lie {
        self.headers.push((name, value.to_owned()));
        self
    }

    pub fn json(mut self, body: &Value) -> Lie {
        self.body = body.to_string();
        self.headers
            .push(("content-type", "application/json".to_owned()));
        self
    }
}

/// What the server was asked once.
#[derive(Debug, Clone)]
pub struct Asked {
    pub path: String,
    pub body: String,
}

impl Asked {
    /// The LDP message type of the envelope it carried (`HELLO`, `TASK_SUBMIT`, …), if any.
    pub fn ldp_type(&self) -> Option<String> {
        let v: Value = serde_json::from_str(&self.body).ok()?;
        v["body"]["type"].as_str().map(str::to_owned)
    }
}

type Answerer = dyn Fn(&Asked) -> Lie + Send + Sync;

/// A running liar: its base URL and what it was asked.
#[derive(Clone)]
pub struct Liar {
    pub url: String,
    asked: Arc<Mutex<Vec<Asked>>>,
    count: Arc<AtomicUsize>,
}

impl Liar {
    /// Starts a server answering every request with `answer`.
    pub async fn start(answer: impl Fn(&Asked) -> Lie + Send + Sync + 'static) -> Liar {
        let answer: Arc<Answerer> = Arc::new(answer);
        let asked: Arc<Mutex<Vec<Asked>>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let (a, n) = (asked.clone(), count.clone());
        let app =
            axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
                let (answer, a, n) = (answer.clone(), a.clone(), n.clone());
                async move {
                    let req = Asked {
                        path: uri.path().to_owned(),
                        body: String::from_utf8_lossy(&body).into_owned(),
                    };
                    let lie = answer(&req);
                    n.fetch_add(1, Ordering::SeqCst);
                    let mut kept = a.lock().expect("asked");
                    // What a test reads is the first few hundred requests; the count goes on.
                    if kept.len() < 1_000 {
                        kept.push(req);
                    }
                    drop(kept);
                    respond(lie)
                }
            });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind liar");
        let url = format!("http://{}", l.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(l, app).await });
        Liar { url, asked, count }
    }

    /// Requests to `path` so far.
    pub fn asked(&self, path: &str) -> Vec<Asked> {
        self.asked
            .lock()
            .expect("asked")
            .iter()
            .filter(|a| a.path == path)
            .cloned()
            .collect()
    }

    /// Every request kept so far (the first thousand), in order.
    pub fn asked_all(&self) -> Vec<Asked> {
        self.asked.lock().expect("asked").clone()
    }

    /// Requests of any kind so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// `host:port`, as it would appear in a leaked URL.
    pub fn authority(&self) -> &str {
        self.url.trim_start_matches("http://")
    }
}

fn respond(lie: Lie) -> Response {
    let status = StatusCode::from_u16(lie.status).expect("a status");
    let mut resp = (status, lie.body).into_response();
    for (name, value) in lie.headers {
        resp.headers_mut().insert(
            name,
            axum::http::HeaderValue::from_str(&value).expect("header value"),
        );
    }
    resp
}

/// A card for an LDP liar `id` offering `skill` at `quality`, costing `cost` a call.
pub fn ldp_card(id: &str, skill: &str, quality: f64, cost: f64) -> Value {
    let card = Card::new(id).priced(skill, quality, cost, 10).build();
    serde_json::to_value(card).expect("card json")
}

/// Whether `path` is where the gateway fetches an LDP card.
pub fn is_card(path: &str) -> bool {
    path == "/.well-known/ldp-identity" || path == "/ldp/identity"
}

/// `GET /v1/models` as an OpenAI-compatible server answers it.
pub fn models(model: &str) -> Lie {
    Lie::new(200).json(&json!({"object": "list", "data": [{"id": model, "object": "model"}]}))
}

/// A completion request asking for `model` with one user message.
pub fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// An LDP delegate's honest answer to the handshake (`HELLO`, `SESSION_PROPOSE`) as `id`;
/// `None` for any other message (the liar's own business).
pub fn handshake(id: &str, asked: &Asked) -> Option<Lie> {
    let body = match asked.ldp_type()?.as_str() {
        "HELLO" => json!({"type": "CAPABILITY_MANIFEST",
            "capabilities": {"capabilities": [], "supported_modes": ["text"]}}),
        "SESSION_PROPOSE" => json!({"type": "SESSION_ACCEPT",
            "session_id": format!("{id}-session"), "negotiated_mode": "text"}),
        _ => return None,
    };
    let env = json!({
        "message_id": uuid::Uuid::new_v4().to_string(), "session_id": format!("{id}-session"),
        "from": format!("ldp:delegate:{id}"), "to": "ldp:delegate:gateway", "body": body,
        "payload_mode": "text", "timestamp": chrono::Utc::now().to_rfc3339(), "provenance": null
    });
    ldp_gateway::ldp::Envelope::from_slice(env.to_string().as_bytes()).expect("an envelope");
    Some(Lie::new(200).json(&env))
}
