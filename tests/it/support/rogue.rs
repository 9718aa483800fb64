//! Upstreams that misbehave on purpose, written at the socket level so that nothing between
//! them and the gateway smooths the misbehaviour away: a server answering each path what the
//! test scripts (an LDP delegate or A2A agent whose stream never ends), an OpenAI-compatible
//! one whose chat completions do (an endless stream, absurd usage, an answer split
//! mid-character across writes, a tool call), and a TCP relay that splits every multi-byte
//! character it passes on across two writes.

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long a split write waits before its next part, so that the parts reach the reader in
/// separate reads. A network pattern, not a synchronisation: were two parts read together, a
/// test could only pass on the old code, never fail on the new.
const SPLIT_PAUSE: Duration = Duration::from_millis(5);

/// The longest request head read.
const MAX_HEAD: usize = 64 * 1024;

/// What a chat completion is answered with.
pub enum Answer {
    /// 200 with this JSON body.
    Json(Value),
    /// 200 `text/event-stream`: these parts, each written and flushed apart.
    Parts(Vec<Vec<u8>>),
    /// 200 `text/event-stream`: `event` again and again, until `limit` bytes are written or
    /// the reader goes away; then the stream ends, unfinished.
    Endless { event: Vec<u8>, limit: u64 },
}

/// What the rogue saw.
#[derive(Default)]
pub struct Seen {
    /// The bodies of the requests that carried one (chat completions, not `GET /models`),
    /// in order.
    pub requests: Mutex<Vec<Value>>,
    /// Bytes of streamed answers written.
    pub streamed: AtomicU64,
    /// Streams whose reader went away before their end.
    pub abandoned: AtomicU64,
    /// Streams written to their end (the last part, or the limit).
    pub finished: AtomicU64,
}

type Script = dyn Fn(&str, &Value) -> Answer + Send + Sync;

/// A server on a loopback port answering each request what the script says, given its path
/// and body (`null` for none). Every answer closes its connection.
pub struct Rogue {
    addr: SocketAddr,
    pub seen: Arc<Seen>,
    task: JoinHandle<()>,
}

impl Rogue {
    /// Serves every request with `script`.
    pub async fn start(script: impl Fn(&str, &Value) -> Answer + Send + Sync + 'static) -> Rogue {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind rogue");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Seen::default());
        let script: Arc<Script> = Arc::new(script);
        let s = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (seen, script) = (Arc::clone(&s), Arc::clone(&script));
                tokio::spawn(async move {
                    let _ = serve(conn, &seen, &*script).await;
                });
            }
        });
        Rogue { addr, seen, task }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies of the requests that carried one so far.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.requests.lock().unwrap().clone()
    }

    /// Bytes of streamed answers written so far.
    pub fn streamed(&self) -> u64 {
        self.seen.streamed.load(Ordering::SeqCst)
    }

    /// Streams abandoned by their reader, and streams written to their end.
    pub fn ends(&self) -> (u64, u64) {
        (
            self.seen.abandoned.load(Ordering::SeqCst),
            self.seen.finished.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An OpenAI-compatible server on a loopback port: `GET /v1/models` answers one model,
/// `POST /v1/chat/completions` what the script says. Every answer closes its connection.
pub struct RogueOpenAi {
    rogue: Rogue,
}

impl RogueOpenAi {
    /// Serves chat completions with `script`, which is given each request's body.
    pub async fn start(script: impl Fn(&Value) -> Answer + Send + Sync + 'static) -> RogueOpenAi {
        let rogue = Rogue::start(move |path, request| {
            if path.ends_with("/models") {
                Answer::Json(
                    json!({"object": "list", "data": [{"id": "rogue", "object": "model"}]}),
                )
            } else {
                script(request)
            }
        })
        .await;
        RogueOpenAi { rogue }
    }

    /// The base URL, as an OpenAI delegate's entry takes it.
    pub fn url(&self) -> String {
        format!("{}/v1", self.rogue.url())
    }

    /// The server underneath.
    pub fn rogue(&self) -> &Rogue {
        &self.rogue
    }

    /// The chat completion requests' bodies so far.
    pub fn requests(&self) -> Vec<Value> {
        self.rogue.requests()
    }

    /// Bytes of streamed answers written so far.
    pub fn streamed(&self) -> u64 {
        self.rogue.streamed()
    }

    /// Streams abandoned by their reader, and streams written to their end.
    pub fn ends(&self) -> (u64, u64) {
        self.rogue.ends()
    }
}

/// One request on `conn`, answered.
async fn serve(mut conn: TcpStream, seen: &Seen, script: &Script) -> std::io::Result<()> {
    let _ = conn.set_nodelay(true);
    let (path, body) = read_request(&mut conn).await?;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !body.is_empty() {
        seen.requests.lock().unwrap().push(request.clone());
    }
    match script(&path, &request) {
        Answer::Json(v) => write_json(&mut conn, &v).await,
        Answer::Parts(parts) => {
            conn.write_all(SSE_HEAD).await?;
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(SPLIT_PAUSE).await;
                }
                if conn.write_all(part).await.is_err() || conn.flush().await.is_err() {
                    seen.abandoned.fetch_add(1, Ordering::SeqCst);
                    return Ok(());
                }
                seen.streamed.fetch_add(part.len() as u64, Ordering::SeqCst);
            }
            seen.finished.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        Answer::Endless { event, limit } => {
            conn.write_all(SSE_HEAD).await?;
            let mut written = 0u64;
            while written < limit {
                if conn.write_all(&event).await.is_err() {
                    seen.abandoned.fetch_add(1, Ordering::SeqCst);
                    return Ok(());
                }
                written += event.len() as u64;
                seen.streamed
                    .fetch_add(event.len() as u64, Ordering::SeqCst);
            }
            seen.finished.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

async fn write_json(conn: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let body = v.to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.flush().await
}

/// The request's path and body (`content-length` bytes of it).
async fn read_request(conn: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 || buf.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_owned();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[end..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((path, body))
}

/// `data: <json>\n\n`.
pub fn event(v: &Value) -> Vec<u8> {
    format!("data: {v}\n\n").into_bytes()
}

/// The stream's last event.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// A `chat.completion.chunk` event with one choice's `delta` and `finish_reason`.
pub fn chunk(delta: Value, finish: Option<&str>) -> Vec<u8> {
    event(&json!({
        "id": "chatcmpl-rogue", "object": "chat.completion.chunk", "created": 0, "model": "rogue",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

/// The usage chunk that ends a stream asked for it.
pub fn usage_chunk(usage: Value) -> Vec<u8> {
    event(&json!({
        "id": "chatcmpl-rogue", "object": "chat.completion.chunk", "created": 0, "model": "rogue",
        "choices": [], "usage": usage,
    }))
}

/// A whole `chat.completion` of `content` reporting `usage`.
pub fn completion(content: &str, usage: Value) -> Value {
    json!({
        "id": "chatcmpl-rogue", "object": "chat.completion", "created": 0, "model": "rogue",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"}],
        "usage": usage,
    })
}

/// `bytes` cut before the second byte of every multi-byte character (each part ends on a
/// character's first byte), so that no character arrives in one read.
pub fn split_characters(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b >= 0xC0 {
            parts.push(bytes[start..=i].to_vec());
            start = i + 1;
        }
    }
    parts.push(bytes[start..].to_vec());
    parts
}

/// A TCP relay to `target`: what the client sends goes on as it comes; what `target` answers
/// comes back with every multi-byte character split across two writes, flushed apart.
pub struct SplittingRelay {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl SplittingRelay {
    pub async fn start(target: SocketAddr) -> SplittingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(upstream) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let (mut client_r, mut client_w) = client.into_split();
                    let (mut up_r, mut up_w) = upstream.into_split();
                    let ask = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut client_r, &mut up_w).await;
                    });
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match up_r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        for (i, part) in split_characters(&buf[..n]).iter().enumerate() {
                            if i > 0 {
                                tokio::time::sleep(SPLIT_PAUSE).await;
                            }
                            if client_w.write_all(part).await.is_err()
                                || client_w.flush().await.is_err()
                            {
                                ask.abort();
                                return;
                            }
                        }
                    }
                    let _ = client_w.shutdown().await;
                    ask.abort();
                });
            }
        });
        SplittingRelay { addr, task }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for SplittingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
