//! Simulated LDP delegate: serves an identity card, speaks the whole session lifecycle in both
//! dialects, and answers tasks after a configurable latency, with knobs for failures.
//!
//! Used by `ldp-gateway delegate`, the demo, the tests and the benches. Routes:
//! `GET /.well-known/ldp-identity`, `GET /ldp/identity` (the card; an empty `endpoint` becomes
//! the listen URL), `GET /ldp/capabilities`, `POST /ldp/messages`, `POST /ldp/stream` (SSE:
//! TASK_UPDATEs, then the final envelope) and `GET /sim/stats` (counters, for tests).
//!
//! A TASK_SUBMIT is checked in this order: session (ACTIVE, not idle past its TTL) →
//! `SESSION_NOT_FOUND`; skill on the card → `SKILL_NOT_FOUND`; payload mode (in `fail_modes`,
//! unsupported by the card, or a semantic frame without string `task_type` and `instruction`)
//! → `PAYLOAD_MODE_FAILED`; then the latency, cancellable by TASK_CANCEL (→ `CANCELLED`); then
//! with probability `fail_rate` → `SIMULATED_FAILURE` (retryable); else a TASK_RESULT whose
//! output is a deterministic digest of the input.
//!
//! Tokens and cost reported in the provenance:
//! - `tokens_used = max(1, ceil(input JSON bytes / 4) + ceil(output text chars / 4))`;
//! - price per call `p`: the skill's `cost_per_call_usd`, else its cost tier (capability
//!   `cost_hint`, else the card's `cost_profile`) with low/medium/high = 0.001/0.01/0.05 USD;
//! - `cost_usd = p × (1 + tokens_used / 1000)`, rounded to 1e-9 USD; omitted if there is no `p`.
//!
//! A TASK_UPDATE `status_query` (the reference Rust adapter's polling) is answered with the
//! task's answer as sent, or TASK_UPDATE `working` while it runs, for the `from` that submitted
//! it (the last 10,000 tasks, for 10 minutes); otherwise TASK_FAILED `TASK_NOT_FOUND`. A
//! TASK_CANCEL without a session id cancels that sender's running task of that id.
//!
//! Confidence is the skill's quality hint (0.5 if absent); verification is `self_verified`.
//!
//! Right and wrong answers (`accuracy = Some(A)`; without it, `expected` is ignored): a task
//! whose input is an object carrying `"expected"` is answered with the usual output plus
//! `"answer"`, which is `<expected>` with probability A and `{"wrong": <expected>}` otherwise
//! (never equal to it); the output's `text` then shows the answer. Any other input is answered
//! as above. The draws come from one generator, seeded by `seed` for reproducible tests.
//!
//! A verifier (`verifier = true`) offers the skill `verify` (added to the card, quality hint =
//! A, if the card lacks it) and judges each `verify` task, whose input is
//! `{"input": <the original task input>, "output": <the producer's output>, "skill":
//! "<original skill>"}` (other fields are ignored; no frame fields are needed in
//! `semantic_frame` mode; without `input` or `output`, TASK_FAILED
//! `INVALID_VERIFICATION_TASK`). If the original input carries `expected`, the truth is
//! `output.answer == expected`, and the verdict is the truth with probability A (default 1)
//! and its opposite otherwise; without `expected` it passes. The output is
//! `{"passed": bool, "confidence": A, "reason": "…"}`. A rubber stamp (`rubber_stamp =
//! true`, a verifier) passes everything, with the same confidence. [`SimStats`] counts right and wrong
//! answers, passed and failed verdicts, and misjudged ones.
//!
//! [`openai`] is its OpenAI-compatible counterpart (`/v1/models`, `/v1/chat/completions`).

/// How long the simulated delegate remembers a task after its last change.
const STATUS_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// How much of its recent tasks it remembers.
const STATUS_BYTES: u64 = 16 * 1024 * 1024;

pub mod anthropic;
mod handler;
pub mod openai;
mod session;
mod task;

pub use task::fingerprint;

use crate::ldp::error::GatewayCode;
use crate::ldp::{CapabilityManifest, Envelope, IdentityCard, LdpError, ParseError, PayloadMode};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How long [`SimHandle::shutdown`] waits for open connections before aborting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Everything a simulated delegate is configured with.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The card it serves and acts by.
    pub card: IdentityCard,
    /// Latency of every task (unless `card_latency` applies).
    pub latency: Duration,
    /// Uniform jitter, ± around the latency.
    pub jitter: Duration,
    /// Probability (0..=1) of a `SIMULATED_FAILURE`.
    pub fail_rate: f64,
    /// Payload modes whose tasks always fail with `PAYLOAD_MODE_FAILED`.
    pub fail_modes: Vec<PayloadMode>,
    /// Use each skill's declared p50 latency from the card instead of `latency` when it has one.
    pub card_latency: bool,
    /// How often idle sessions past their TTL are swept.
    pub sweep_interval: Duration,
    /// Probability (0..=1) that a task's answer is replaced by unreadable JSON (HTTP 200).
    pub malformed_rate: f64,
    /// Probability (0..=1) that a task is answered with HTTP 500.
    pub error_500_rate: f64,
    /// `/ldp/stream` sends its updates, then ends without the final message.
    pub break_stream: bool,
    /// Probability (0..=1, clamped) of a right answer to a task whose input carries `expected`,
    /// and of a verifier's honest verdict. `None`: `expected` is ignored.
    pub accuracy: Option<f64>,
    /// Offer the `verify` skill (added to the card if it lacks it) and judge verification tasks.
    pub verifier: bool,
    /// A verifier that passes everything (implies `verifier`): every verdict is `passed`,
    /// with the confidence `accuracy` claims.
    pub rubber_stamp: bool,
    /// Seed of the draws behind right/wrong answers and verdicts; `None`: random.
    pub seed: Option<u64>,
}

impl SimOptions {
    /// No latency, no failures, a one-second sweep.
    pub fn new(card: IdentityCard) -> Self {
        SimOptions {
            card,
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            fail_rate: 0.0,
            fail_modes: Vec::new(),
            card_latency: false,
            sweep_interval: Duration::from_secs(1),
            malformed_rate: 0.0,
            error_500_rate: 0.0,
            break_stream: false,
            accuracy: None,
            verifier: false,
            rubber_stamp: false,
            seed: None,
        }
    }
}

/// A snapshot of what a simulated delegate has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimStats {
    /// HELLOs answered.
    pub hellos: u64,
    /// SESSION_PROPOSEs received.
    pub proposals: u64,
    /// Sessions accepted.
    pub accepted: u64,
    /// Sessions rejected (trust).
    pub rejected: u64,
    /// TASK_SUBMITs received.
    pub tasks: u64,
    /// TASK_RESULTs sent.
    pub results: u64,
    /// TASK_FAILEDs sent for submitted tasks.
    pub failures: u64,
    /// Running tasks stopped by TASK_CANCEL.
    pub cancels: u64,
    /// Sessions closed by SESSION_CLOSE.
    pub closes: u64,
    /// Sessions removed for idling past their TTL.
    pub expired: u64,
    /// Sessions open now.
    pub active_sessions: u64,
    /// Tasks running now.
    pub in_flight: u64,
    /// Answers equal to the input's `expected` (with `accuracy` set).
    pub right_answers: u64,
    /// Answers deliberately different from the input's `expected` (with `accuracy` set).
    pub wrong_answers: u64,
    /// Verification tasks judged `passed: true`.
    pub verdicts_passed: u64,
    /// Verification tasks judged `passed: false`.
    pub verdicts_failed: u64,
    /// Verdicts that contradict the truth (the answer against `expected`), drawn with
    /// probability `1 - accuracy`.
    pub verdicts_misjudged: u64,
}

/// The knobs that can change while serving.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    latency: Duration,
    jitter: Duration,
    fail_rate: f64,
    card_latency: bool,
    malformed_rate: f64,
    error_500_rate: f64,
    break_stream: bool,
}

/// Shared state of one simulated delegate; cheap to clone. Build it for [`router`].
#[derive(Clone)]
pub struct SimState(Arc<Inner>);

struct Inner {
    card: IdentityCard,
    fail_modes: Vec<PayloadMode>,
    /// `SimOptions::accuracy`, clamped.
    accuracy: Option<f64>,
    verifier: bool,
    rubber_stamp: bool,
    /// Draws for right/wrong answers and verdicts (seedable, unlike the fault knobs).
    rng: Mutex<fastrand::Rng>,
    sweep_interval: Duration,
    knobs: Mutex<Knobs>,
    sessions: Mutex<session::Sessions>,
    inflight: Mutex<HashMap<String, handler::InFlight>>,
    /// Recent tasks of each sender, for status queries and sessionless cancels.
    statuses: crate::recent::RecentTasks,
    serials: AtomicU64,
    /// Event counters; `active_sessions` and `in_flight` are filled in on read.
    counters: Mutex<SimStats>,
    shutdown: watch::Sender<bool>,
    /// The `traceparent` of the latest TASK_SUBMITs (at most [`TRACEPARENTS_KEPT`]), oldest
    /// first: what a test of trace propagation reads (`GET /sim/traceparents`).
    traceparents: Mutex<std::collections::VecDeque<String>>,
}

/// How many received `traceparent`s a simulated delegate keeps.
const TRACEPARENTS_KEPT: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; if something did, the data is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn clamp_rate(rate: f64) -> f64 {
    if rate.is_nan() {
        0.0
    } else {
        rate.clamp(0.0, 1.0)
    }
}

impl SimState {
    /// State for a delegate with these options.
    pub fn new(opts: SimOptions) -> Self {
        let knobs = Knobs {
            latency: opts.latency,
            jitter: opts.jitter,
            fail_rate: clamp_rate(opts.fail_rate),
            card_latency: opts.card_latency,
            malformed_rate: clamp_rate(opts.malformed_rate),
            error_500_rate: clamp_rate(opts.error_500_rate),
            break_stream: opts.break_stream,
        };
        let accuracy = opts.accuracy.map(clamp_rate);
        let mut card = opts.card;
        let verifier = opts.verifier || opts.rubber_stamp;
        if verifier && card.capability(task::VERIFY_SKILL).is_none() {
            card.capabilities.push(task::verify_capability(accuracy));
        }
        let rng = opts
            .seed
            .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        SimState(Arc::new(Inner {
            card,
            fail_modes: opts.fail_modes,
            accuracy,
            verifier,
            rubber_stamp: opts.rubber_stamp,
            rng: Mutex::new(rng),
            sweep_interval: opts.sweep_interval,
            knobs: Mutex::new(knobs),
            sessions: Mutex::new(session::Sessions::default()),
            inflight: Mutex::new(HashMap::new()),
            statuses: crate::recent::RecentTasks::new(STATUS_TTL, STATUS_BYTES),
            serials: AtomicU64::new(0),
            counters: Mutex::new(SimStats::default()),
            shutdown: watch::channel(false).0,
            traceparents: Mutex::new(std::collections::VecDeque::new()),
        }))
    }

    /// The card it serves.
    pub fn card(&self) -> &IdentityCard {
        &self.0.card
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SimStats {
        let mut stats = *lock(&self.0.counters);
        stats.active_sessions = lock(&self.0.sessions).len() as u64;
        stats.in_flight = lock(&self.0.inflight).len() as u64;
        stats
    }

    /// The `traceparent` headers of the latest TASK_SUBMITs received, oldest first.
    pub fn traceparents(&self) -> Vec<String> {
        lock(&self.0.traceparents).iter().cloned().collect()
    }

    /// Logs and keeps the `traceparent` a TASK_SUBMIT came with (the simulated delegate's
    /// side of trace propagation: a delegate that traces itself would continue it).
    fn saw_trace(&self, env: &Envelope, headers: &axum::http::HeaderMap) {
        let crate::ldp::Body::TaskSubmit { task_id, .. } = &env.body else {
            return;
        };
        let Some(parent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) else {
            return;
        };
        tracing::info!(%task_id, traceparent = parent, "task received with a trace context");
        let mut kept = lock(&self.0.traceparents);
        if kept.len() >= TRACEPARENTS_KEPT {
            kept.pop_front();
        }
        kept.push_back(parent.to_owned());
    }

    /// True with probability `p`, from the seedable generator.
    fn draw(&self, p: f64) -> bool {
        lock(&self.0.rng).f64() < p
    }

    /// Adds one to the counter `field` picks.
    fn count(&self, field: impl FnOnce(&mut SimStats) -> &mut u64) {
        *field(&mut lock(&self.0.counters)) += 1;
    }

    /// Removes sessions idle past their TTL, counting them as expired.
    fn sweep(&self) {
        let removed = lock(&self.0.sessions).sweep(tokio::time::Instant::now());
        lock(&self.0.counters).expired += removed;
    }
}

/// A delegate serving in the background. Dropping it stops the server without waiting;
/// [`SimHandle::shutdown`] stops it and waits.
pub struct SimHandle {
    addr: SocketAddr,
    state: SimState,
    server: Option<JoinHandle<()>>,
    sweeper: Option<JoinHandle<()>>,
}

impl SimHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, with an unspecified bind address (`0.0.0.0`) shown as loopback.
    pub fn url(&self) -> String {
        url_of(self.addr)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SimStats {
        self.state.stats()
    }

    /// The shared state (card, counters).
    pub fn state(&self) -> &SimState {
        &self.state
    }

    /// Changes the probability of an unreadable answer to a task.
    pub fn set_malformed_rate(&self, rate: f64) {
        lock(&self.state.0.knobs).malformed_rate = clamp_rate(rate);
    }

    /// Changes the probability of an HTTP 500 answer to a task.
    pub fn set_error_500_rate(&self, rate: f64) {
        lock(&self.state.0.knobs).error_500_rate = clamp_rate(rate);
    }

    /// Makes `/ldp/stream` end before its final message (or not).
    pub fn set_break_stream(&self, on: bool) {
        lock(&self.state.0.knobs).break_stream = on;
    }

    /// Changes the failure probability (clamped to 0..=1) for tasks that start from now on.
    pub fn set_fail_rate(&self, rate: f64) {
        lock(&self.state.0.knobs).fail_rate = clamp_rate(rate);
    }

    /// Changes the latency of tasks that start from now on (overriding card latencies).
    pub fn set_latency(&self, latency: Duration) {
        let mut knobs = lock(&self.state.0.knobs);
        knobs.latency = latency;
        knobs.card_latency = false;
    }

    /// Changes the jitter of tasks that start from now on.
    pub fn set_jitter(&self, jitter: Duration) {
        lock(&self.state.0.knobs).jitter = jitter;
    }

    /// Stops accepting connections, fails running tasks with a retryable `CANCELLED`, waits
    /// (up to a grace period) for open connections, and stops the sweeper.
    pub async fn shutdown(mut self) {
        self.state.0.shutdown.send_replace(true);
        if let Some(server) = self.server.take() {
            stop(server).await;
        }
        if let Some(sweeper) = self.sweeper.take() {
            let _ = sweeper.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.state.0.shutdown.send_replace(true);
    }
}

/// The request record's bound in bytes (of the bodies as received), besides its count.
const RECORD_BYTES: usize = 8 * 1024 * 1024;

/// The last requests a simulated model server saw, bounded by count and by bytes.
struct Record<T> {
    items: std::collections::VecDeque<(T, usize)>,
    bytes: usize,
}

impl<T> Default for Record<T> {
    fn default() -> Self {
        Record {
            items: std::collections::VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<T> Record<T> {
    /// Keeps `item` (of `size` bytes as received), dropping the oldest beyond `cap` items or
    /// [`RECORD_BYTES`]; an item larger than that is not kept.
    fn push(&mut self, cap: usize, item: T, size: usize) {
        if cap == 0 || size > RECORD_BYTES {
            return;
        }
        while self.items.len() >= cap || self.bytes + size > RECORD_BYTES {
            match self.items.pop_front() {
                Some((_, n)) => self.bytes -= n,
                None => break,
            }
        }
        self.bytes += size;
        self.items.push_back((item, size));
    }

    /// The items kept, oldest first.
    fn items(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|(item, _)| item)
    }
}

/// A simulated model's token estimate: `ceil(bytes / 4)`, at least 1.
fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

/// `text` in up to `n` pieces of about equal length, cut at char boundaries; none if empty.
fn split(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(n.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn url_of(addr: SocketAddr) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}")
}

/// Waits up to [`SHUTDOWN_GRACE`] for a server told to stop, then aborts it.
async fn stop(mut server: tokio::task::JoinHandle<()>) {
    if tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
        .await
        .is_err()
    {
        server.abort();
        let _ = server.await;
    }
}

/// Serves `app` on `listener` (no Nagle) in a background task until `down` turns true.
fn serve(
    listener: TcpListener,
    app: Router,
    mut down: tokio::sync::watch::Receiver<bool>,
    what: &'static str,
) -> tokio::task::JoinHandle<()> {
    let listener = {
        use axum::serve::ListenerExt;
        listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        })
    };
    tokio::spawn(async move {
        let stop = async move {
            let _ = down.wait_for(|d| *d).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "{what} stopped serving");
        }
    })
}

/// Serves a delegate on `listener` in a background task. An empty card `endpoint` becomes the
/// listen URL.
pub async fn spawn(listener: TcpListener, mut opts: SimOptions) -> std::io::Result<SimHandle> {
    let addr = listener.local_addr()?;
    if opts.card.endpoint.as_deref().is_none_or(str::is_empty) {
        opts.card.endpoint = Some(url_of(addr));
    }
    let state = SimState::new(opts);
    let server = serve(
        listener,
        router(state.clone()),
        state.0.shutdown.subscribe(),
        "simulated delegate",
    );
    let sweeper = tokio::spawn(sweep_loop(state.clone()));
    Ok(SimHandle {
        addr,
        state,
        server: Some(server),
        sweeper: Some(sweeper),
    })
}

/// Sweeps expired sessions until shutdown.
async fn sweep_loop(state: SimState) {
    let mut down = state.0.shutdown.subscribe();
    let mut tick = tokio::time::interval(state.0.sweep_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => state.sweep(),
            _ = down.wait_for(|d| *d) => break,
        }
    }
}

/// The delegate's HTTP routes, without a socket.
pub fn router(state: SimState) -> Router {
    Router::new()
        .route("/.well-known/ldp-identity", get(identity))
        .route("/ldp/identity", get(identity))
        .route("/ldp/capabilities", get(capabilities))
        .route("/ldp/messages", post(messages))
        .route("/ldp/stream", post(stream))
        .route("/sim/stats", get(stats))
        .route("/sim/traceparents", get(traceparents))
        .with_state(state)
}

/// Why a card file could not be used. The cause is part of the message rather than a
/// `source`, so that one `{}` tells the whole story.
#[derive(Debug, thiserror::Error)]
pub enum CardFileError {
    /// The file could not be read.
    #[error("reading {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// It is not an identity card in either dialect.
    #[error("{}: not an identity card: {error}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        error: serde_json::Error,
    },
}

/// Reads an identity card (either dialect) from a JSON file.
pub fn load_card(path: &Path) -> Result<IdentityCard, CardFileError> {
    let raw = std::fs::read(path).map_err(|error| CardFileError::Read {
        path: path.to_owned(),
        error,
    })?;
    serde_json::from_slice(&raw).map_err(|error| CardFileError::Parse {
        path: path.to_owned(),
        error,
    })
}

async fn identity(State(state): State<SimState>) -> Json<IdentityCard> {
    Json(state.0.card.clone())
}

async fn capabilities(State(state): State<SimState>) -> Json<CapabilityManifest> {
    Json(CapabilityManifest {
        capabilities: state.0.card.capabilities.clone(),
        supported_modes: state.0.card.supported_payload_modes.clone(),
    })
}

async fn stats(State(state): State<SimState>) -> Json<SimStats> {
    Json(state.stats())
}

fn bad_request(e: &ParseError) -> Response {
    let error = LdpError::gateway(GatewayCode::BadRequest, e.to_string());
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": error })),
    )
        .into_response()
}

/// Transport faults to inject for a task: `(malformed, http_500)`.
fn faults(state: &SimState, env: &Envelope) -> (bool, bool) {
    if !matches!(env.body, crate::ldp::Body::TaskSubmit { .. }) {
        return (false, false);
    }
    let k = *lock(&state.0.knobs);
    (
        fastrand::f64() < k.malformed_rate,
        fastrand::f64() < k.error_500_rate,
    )
}

async fn traceparents(State(state): State<SimState>) -> Json<Vec<String>> {
    Json(state.traceparents())
}

async fn messages(
    State(state): State<SimState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    match Envelope::from_slice(&body) {
        Ok(env) => {
            state.saw_trace(&env, &headers);
            let (malformed, http_500) = faults(&state, &env);
            let reply = handler::handle(&state, env, None).await;
            if http_500 {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "simulated internal error",
                )
                    .into_response();
            }
            if malformed {
                return (
                    StatusCode::OK,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    "{\"message_id\": ",
                )
                    .into_response();
            }
            Json(reply).into_response()
        }
        Err(e) => bad_request(&e),
    }
}

async fn stream(
    State(state): State<SimState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let env = match Envelope::from_slice(&body) {
        Ok(env) => env,
        Err(e) => return bad_request(&e),
    };
    state.saw_trace(&env, &headers);
    let (tx, rx) = mpsc::channel::<Envelope>(8);
    let breaks = lock(&state.0.knobs).break_stream
        && matches!(env.body, crate::ldp::Body::TaskSubmit { .. });
    // Ends with its task: after the latency, or at once on cancel or shutdown.
    tokio::spawn(async move {
        let reply = handler::handle(&state, env, Some(&tx)).await;
        if !breaks {
            let _ = tx.send(reply).await;
        }
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let env = rx.recv().await?;
        Some((Event::default().json_data(&env), rx))
    });
    Sse::new(events).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_the_text_and_the_piece_count() {
        assert_eq!(split("abcdefghij", 4), ["abc", "def", "ghi", "j"]);
        assert_eq!(split("ab", 4), ["a", "b"]);
        assert_eq!(split("héllo wörld", 4).concat(), "héllo wörld");
        assert!(split("", 4).is_empty());
    }

    #[test]
    fn token_estimate_is_a_quarter_of_the_bytes_at_least_one() {
        assert_eq!(tokens(0), 1);
        assert_eq!(tokens(4), 1);
        assert_eq!(tokens(5), 2);
    }

    #[test]
    fn the_record_is_bounded_by_count_and_bytes() {
        let mut record = Record::default();
        for i in 0..5 {
            record.push(2, i, 1);
        }
        assert_eq!(record.items().copied().collect::<Vec<_>>(), [3, 4]);
        record.push(2, 9, RECORD_BYTES);
        assert_eq!(record.items().copied().collect::<Vec<_>>(), [9]);
        record.push(2, 10, RECORD_BYTES + 1);
        assert_eq!(record.items().copied().collect::<Vec<_>>(), [9]);
    }
}
