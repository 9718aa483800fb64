//! One LDP client for every test: raw HTTP on any listener (gateway, admin, simulator), LDP
//! envelopes as JSON or typed, sessions, tasks and streams, an optional API key, and an
//! optional transcript of every answer (for the canary check).

use ldp_gateway::ldp::{Body, Envelope, PayloadMode, SessionConfig};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The gateway's own id, the `to` of every envelope a client sends.
pub const GATEWAY_ID: &str = "ldp:delegate:gateway";

/// An HTTP answer: status, headers, body bytes and (when it is JSON) the parsed body.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub raw: Vec<u8>,
    /// The body as JSON; `{"raw": text}` when it is not JSON.
    pub json: Value,
}

impl Resp {
    /// `body.type` of an envelope answer.
    pub fn body_type(&self) -> &str {
        self.json["body"]["type"].as_str().unwrap_or("")
    }

    /// An integer `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        self.headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    }

    pub fn content_type(&self) -> String {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// The answer as a typed envelope; panics unless it is one.
    pub fn envelope(&self) -> Envelope {
        Envelope::from_slice(&self.raw)
            .unwrap_or_else(|e| panic!("not an envelope ({e}): {}", self.text()))
    }
}

/// Everything a recording client received.
pub type Transcript = Arc<Mutex<Vec<u8>>>;

/// An LDP client bound to one base URL.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    /// The `from` of its envelopes.
    pub from: String,
    /// Sent as `Authorization: Bearer <key>`.
    pub key: Option<String>,
    transcript: Option<Transcript>,
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_owned(),
            from: "ldp:client:test".into(),
            key: None,
            transcript: None,
        }
    }

    /// The same client with another API key (`None`: none).
    pub fn with_key(&self, key: Option<&str>) -> Client {
        Client {
            key: key.map(str::to_owned),
            ..self.clone()
        }
    }

    /// The same client under another `from`.
    pub fn with_from(&self, from: &str) -> Client {
        Client {
            from: from.to_owned(),
            ..self.clone()
        }
    }

    /// The same client on another base URL (sharing key, `from` and transcript).
    pub fn with_base(&self, base: &str) -> Client {
        Client {
            base: base.trim_end_matches('/').to_owned(),
            ..self.clone()
        }
    }

    /// The same client with a fresh HTTP connection pool.
    pub fn fresh_connection(&self) -> Client {
        Client {
            http: reqwest::Client::new(),
            ..self.clone()
        }
    }

    /// From now on, keeps every answer (status line, headers, body) in a transcript.
    pub fn recorded(mut self) -> Client {
        self.transcript = Some(Arc::default());
        self
    }

    /// Everything received while recording.
    pub fn transcript(&self) -> Vec<u8> {
        self.transcript
            .as_ref()
            .map(|t| t.lock().expect("transcript").clone())
            .unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(k) => req.header("authorization", format!("Bearer {k}")),
            None => req,
        }
    }

    async fn read(&self, resp: reqwest::Response) -> reqwest::Result<Resp> {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let raw = resp.bytes().await?.to_vec();
        if let Some(t) = &self.transcript {
            let mut seen = t.lock().expect("transcript");
            seen.extend_from_slice(format!("HTTP {status}\n").as_bytes());
            for (k, v) in &headers {
                seen.extend_from_slice(k.as_str().as_bytes());
                seen.extend_from_slice(b": ");
                seen.extend_from_slice(v.as_bytes());
                seen.push(b'\n');
            }
            seen.extend_from_slice(&raw);
            seen.push(b'\n');
        }
        let json = serde_json::from_slice(&raw)
            .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&raw)}));
        Ok(Resp {
            status,
            headers,
            raw,
            json,
        })
    }

    pub async fn get(&self, path: &str) -> Resp {
        let resp = self
            .authorized(self.http.get(self.url(path)))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        self.read(resp).await.expect("GET body")
    }

    /// GETs `path` with extra headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut req = self.authorized(self.http.get(self.url(path)));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        self.read(resp).await.expect("GET body")
    }

    pub async fn delete(&self, path: &str) -> Resp {
        let resp = self
            .authorized(self.http.delete(self.url(path)))
            .send()
            .await
            .unwrap_or_else(|e| panic!("DELETE {path}: {e}"));
        self.read(resp).await.expect("DELETE body")
    }

    /// POSTs `body` (as JSON) to `path` with extra headers, within `timeout` if given; an
    /// error when the request or its answer failed.
    pub async fn try_post_with(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
        timeout: Option<Duration>,
    ) -> reqwest::Result<Resp> {
        let mut req = self
            .authorized(self.http.post(self.url(path)))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let resp = req.send().await?;
        self.read(resp).await
    }

    pub async fn post_with(&self, path: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> Resp {
        self.try_post_with(path, body, headers, None)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// POSTs `value` as JSON to `path` (the admin API).
    pub async fn post_json(&self, path: &str, value: &Value) -> Resp {
        self.post_with(path, value.to_string().into_bytes(), &[])
            .await
    }

    /// POSTs raw bytes to `/ldp/messages`.
    pub async fn post(&self, body: Vec<u8>) -> Resp {
        self.post_with("/ldp/messages", body, &[]).await
    }

    // ---- envelopes as JSON ----

    /// An envelope from this client with `body`, as JSON.
    pub fn envelope_json(&self, session_id: &str, body: Value, mode: &str) -> Value {
        json!({
            "message_id": uuid::Uuid::new_v4().to_string(), "session_id": session_id,
            "from": self.from, "to": GATEWAY_ID, "body": body, "payload_mode": mode,
            "timestamp": chrono::Utc::now().to_rfc3339(), "provenance": null
        })
    }

    /// Posts a text-mode envelope with `body` to `/ldp/messages`, whatever the answer.
    pub async fn post_body(&self, session_id: &str, body: Value) -> Resp {
        let env = self.envelope_json(session_id, body, "text");
        self.post(serde_json::to_vec(&env).expect("json")).await
    }

    /// [`Client::post_body`] within `timeout`, an error if the gateway did not answer.
    pub async fn try_post_body(
        &self,
        session_id: &str,
        body: Value,
        timeout: Option<Duration>,
    ) -> reqwest::Result<Resp> {
        let env = self.envelope_json(session_id, body, "text");
        self.try_post_with(
            "/ldp/messages",
            serde_json::to_vec(&env).expect("json"),
            &[],
            timeout,
        )
        .await
    }

    /// Sends one envelope and expects HTTP 200 with an envelope back; the answer as JSON.
    pub async fn send(&self, session_id: &str, body: Value, mode: &str) -> Value {
        let env = self.envelope_json(session_id, body, mode);
        let r = self.post(serde_json::to_vec(&env).expect("json")).await;
        assert_eq!(r.status, 200, "{}", r.json);
        // Everything the gateway answers must read as an envelope.
        r.envelope();
        r.json
    }

    /// HELLO then SESSION_PROPOSE with `config`; the SESSION_ACCEPT/REJECT body.
    pub async fn open(&self, config: Value) -> Value {
        let hello = self
            .send(
                "",
                json!({"type": "HELLO", "delegate_id": self.from,
                       "supported_modes": ["semantic_frame", "text"]}),
                "text",
            )
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

    /// Opens a session ([`Client::open`]); its id and negotiated mode.
    pub async fn session(&self, config: Value) -> (String, String) {
        let b = self.open(config).await;
        assert_eq!(b["type"], "SESSION_ACCEPT", "{b}");
        (
            b["session_id"].as_str().expect("id").to_owned(),
            b["negotiated_mode"].as_str().expect("mode").to_owned(),
        )
    }

    /// SESSION_PROPOSE alone with `config` as raw JSON (values our own types would refuse
    /// still reach the gateway); the answer's body. A 400 (a malformed config, refused before
    /// the trust check) reads as `{"type": "HTTP 400", "error": …}`.
    pub async fn propose(&self, config: Value) -> Value {
        let mut raw = serde_json::to_value(self.envelope(
            "",
            Body::SessionPropose {
                config: SessionConfig::default(),
            },
        ))
        .expect("json");
        raw["body"]["config"] = config;
        let r = self.post(serde_json::to_vec(&raw).expect("json")).await;
        match r.status {
            200 => r.json["body"].clone(),
            400 => json!({"type": "HTTP 400", "error": r.json["error"]}),
            other => panic!("HTTP {other}: {}", r.json),
        }
    }

    /// An accepted session's id, by [`Client::propose`] (no HELLO first).
    pub async fn accepted(&self, config: Value) -> String {
        let b = self.propose(config).await;
        assert_eq!(b["type"], "SESSION_ACCEPT", "{b}");
        b["session_id"].as_str().expect("id").to_owned()
    }

    /// TASK_SUBMIT expecting HTTP 200 and an answer about this task; the answer's body.
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

    /// A text-mode TASK_SUBMIT of `task_id` (skill `echo`) sent in the background: its
    /// answer when it comes.
    pub fn submit_behind(
        self: &std::sync::Arc<Self>,
        session: &str,
        task_id: &str,
    ) -> tokio::task::JoinHandle<Value> {
        let (c, session) = (self.clone(), session.to_owned());
        let body =
            json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": "echo", "input": "x"});
        tokio::spawn(async move { c.send(&session, body, "text").await })
    }

    /// A TASK_CANCEL of `task_id`: the answer.
    pub async fn cancel(&self, session: &str, task_id: &str) -> Value {
        let body = json!({"type": "TASK_CANCEL", "task_id": task_id});
        self.send(session, body, "text").await
    }

    /// A text-mode TASK_SUBMIT, whatever the answer.
    pub async fn task_resp(&self, session: &str, skill: &str, input: Value) -> Resp {
        self.send_body(session, submit_body(skill, input)).await
    }

    // ---- typed envelopes ----

    /// A fresh text-mode envelope from this client.
    pub fn envelope(&self, session_id: &str, body: Body) -> Envelope {
        Envelope::new(
            session_id,
            self.from.as_str(),
            GATEWAY_ID,
            body,
            PayloadMode::Text,
        )
    }

    pub async fn send_env(&self, env: &Envelope) -> Resp {
        self.post(env.to_vec().expect("encode")).await
    }

    /// A text-mode envelope with `body`, whatever the answer.
    pub async fn send_body(&self, session_id: &str, body: Body) -> Resp {
        self.send_env(&self.envelope(session_id, body)).await
    }

    /// A text-only HELLO, whatever the answer.
    pub async fn hello(&self) -> Resp {
        self.send_body("", hello_body(&self.from)).await
    }

    // ---- streams ----

    /// POSTs `env` to `/ldp/stream` and reads it to the end: the status and every event.
    pub async fn stream(&self, env: &Envelope) -> (u16, Vec<Value>) {
        let r = self
            .post_with("/ldp/stream", env.to_vec().expect("encode"), &[])
            .await;
        let events = String::from_utf8_lossy(&r.raw)
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect();
        (r.status, events)
    }

    /// POSTs `env` (JSON) to `/ldp/stream` and returns the open stream, read event by event.
    pub async fn open_stream(&self, env: &Value) -> Events {
        let resp = self
            .authorized(self.http.post(self.url("/ldp/stream")))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(env).expect("json"))
            .send()
            .await
            .expect("stream");
        assert_eq!(resp.status().as_u16(), 200);
        let ctype = resp.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert!(ctype.starts_with("text/event-stream"), "{ctype}");
        Events {
            resp,
            buf: Vec::new(),
            heartbeats: 0,
        }
    }
}

/// A HELLO body offering text.
pub fn hello_body(from: &str) -> Body {
    Body::Hello {
        delegate_id: from.to_owned(),
        supported_modes: vec![PayloadMode::Text],
    }
}

/// A TASK_SUBMIT body with a fresh task id.
pub fn submit_body(skill: &str, input: Value) -> Body {
    Body::TaskSubmit {
        task_id: uuid::Uuid::new_v4().to_string().into(),
        skill: skill.to_owned(),
        input: input.into(),
        contract: None,
    }
}

/// Every read from a stream gets this long before the test gives up on it.
const READ_LIMIT: Duration = Duration::from_secs(10);

/// One open Server-Sent Events response, read event by event.
pub struct Events {
    resp: reqwest::Response,
    /// Bytes received, `\r` dropped (SSE's line ends; JSON escapes its own), decoded to text
    /// only as whole events: a read may split a character.
    buf: Vec<u8>,
    /// Comment-only events seen (the gateway's heartbeats).
    pub heartbeats: usize,
}

impl Events {
    /// The next envelope (or error object), `None` once the stream has ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..end + 2).collect();
                let event = String::from_utf8(event).expect("an event in UTF-8");
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    if event.lines().all(|l| l.is_empty() || l.starts_with(':')) {
                        self.heartbeats += 1;
                    }
                    continue;
                }
                return Some(serde_json::from_str(&data.join("\n")).expect("event JSON"));
            }
            let chunk = tokio::time::timeout(READ_LIMIT, self.resp.chunk())
                .await
                .expect("the stream went quiet")
                .expect("the stream failed");
            match chunk {
                Some(bytes) => self.buf.extend(bytes.iter().filter(|b| **b != b'\r')),
                None => {
                    let rest = String::from_utf8_lossy(&self.buf);
                    assert!(rest.trim().is_empty(), "a partial event: {rest}");
                    return None;
                }
            }
        }
    }

    /// Every envelope up to the end of the stream.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(v) = self.next().await {
            out.push(v);
        }
        out
    }
}
