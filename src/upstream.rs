//! The client side of the gateway: cards, messages and upstream sessions with delegates.
//!
//! Never follows redirects, never connects to a card's `endpoint` field: every call goes to the
//! base URL the operator configured or registered.

use crate::ldp::{
    negotiate, Body, Envelope, IdentityCard, LdpError, NegotiatedPayload, PayloadMode,
    SessionConfig,
};
use std::time::Duration;

mod pool;

/// Why a call to a delegate failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// Could not connect (refused, reset before sending, DNS).
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// No answer within the deadline.
    #[error("{url} did not answer within {after:?}")]
    Timeout {
        /// Where.
        url: String,
        /// The deadline.
        after: Duration,
    },
    /// A non-2xx answer.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// Where.
        url: String,
        /// HTTP status.
        status: u16,
    },
    /// The answer was not a usable LDP message.
    #[error("{url} sent an unreadable answer: {reason}")]
    Malformed {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The delegate refused the session.
    #[error("session rejected: {reason}")]
    Rejected {
        /// The delegate's reason.
        reason: String,
        /// Its structured error, if any.
        error: Option<LdpError>,
    },
    /// The connection failed after the request was sent: the delegate may have started work.
    #[error("connection to {url} broke: {reason}")]
    Broken {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The connection closed (or reset) before any answer began: the delegate never answered —
    /// typically a pooled keep-alive connection it closed as it went down.
    #[error("{url} closed the connection without answering: {reason}")]
    Unanswered {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// A stream ended before its final message.
    #[error("the stream from {url} ended before its final message")]
    StreamBroken {
        /// Where.
        url: String,
    },
    /// The delegate answered with a message type that makes no sense here.
    #[error("unexpected {got} from {url}")]
    Unexpected {
        /// Where.
        url: String,
        /// What came back.
        got: &'static str,
    },
}

impl UpstreamError {
    /// Whether trying another delegate is safe and may help: nothing was started (connect),
    /// or the delegate gave up, never answered or answered nonsense (timeout, unanswered, 5xx,
    /// malformed, rejected, a broken stream). A connection that broke once the answer had
    /// begun is not: the delegate did the work.
    pub fn retryable(&self) -> bool {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Timeout { .. }
            | UpstreamError::Malformed { .. }
            | UpstreamError::Rejected { .. }
            | UpstreamError::Unanswered { .. }
            | UpstreamError::StreamBroken { .. }
            | UpstreamError::Unexpected { .. } => true,
            UpstreamError::Status { status, .. } => *status >= 500,
            UpstreamError::Broken { .. } => false,
        }
    }

    /// Whether this says something about the delegate's health (a refused session does not).
    pub fn is_delegate_fault(&self) -> bool {
        !matches!(self, UpstreamError::Rejected { .. })
            && !matches!(self, UpstreamError::Status { status, .. } if *status < 500)
    }

    /// Low-cardinality reason for metrics and the ledger.
    pub fn reason(&self) -> &'static str {
        match self {
            UpstreamError::Connect { .. } => "connect",
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Status { status, .. } if *status >= 500 => "http_5xx",
            UpstreamError::Status { .. } => "http_4xx",
            UpstreamError::Malformed { .. } | UpstreamError::Unexpected { .. } => "malformed",
            UpstreamError::Rejected { .. } => "session_rejected",
            UpstreamError::Broken { .. } => "broken",
            UpstreamError::Unanswered { .. } => "unanswered",
            UpstreamError::StreamBroken { .. } => "stream_broken",
        }
    }
}

/// An upstream session the gateway opened with a delegate.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UpstreamSession {
    /// The delegate-issued session id.
    pub session_id: String,
    /// What was agreed with the delegate.
    pub payload: NegotiatedPayload,
    /// The `to` the gateway addresses (the delegate's id).
    pub delegate_id: String,
}

/// HTTP client to delegates, with a connection pool, no redirects and deadlines. Task
/// messages to plain-HTTP delegates go through [`pool::Pool`] (the hot path); card fetches,
/// streams and HTTPS through reqwest.
#[derive(Clone)]
pub struct UpstreamClient {
    http: reqwest::Client,
    pool: std::sync::Arc<pool::Pool>,
    from: String,
    handshake_timeout: Duration,
    /// Per-delegate signing secrets, by base URL.
    signers: std::sync::Arc<dashmap::DashMap<String, crate::secret::Secret>>,
    /// Largest answer read from a delegate.
    max_response_bytes: usize,
    /// What a card may be, and how many are fetched at once.
    cards: CardLimits,
    /// One permit per card fetch in flight (`cards.concurrency`).
    card_permits: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Bounds on card fetches (`[discovery]`): a delegate cannot make the gateway read, store or
/// serve an unbounded card, nor a large fleet open every fetch at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardLimits {
    /// Largest card read, bytes.
    pub max_bytes: usize,
    /// Most capabilities a card may list.
    pub max_capabilities: usize,
    /// Most fetches in flight at once.
    pub concurrency: usize,
}

impl Default for CardLimits {
    fn default() -> Self {
        CardLimits {
            max_bytes: 1024 * 1024,
            max_capabilities: 1024,
            concurrency: 16,
        }
    }
}

/// The header counting the gateways a task has passed through: a gateway sends its own
/// count plus one with every task it forwards and refuses a task past `upstream.max_hops`.
pub const HOPS_HEADER: &str = "x-ldp-hops";

/// How long an idle keep-alive connection to a delegate is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest answer read from a delegate by default (a multiple of the request body limit).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

impl UpstreamClient {
    /// A client that signs messages as `from` (the gateway's delegate id).
    pub fn new(
        from: impl Into<String>,
        connect_timeout: Duration,
        handshake_timeout: Duration,
    ) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        UpstreamClient {
            http,
            pool: std::sync::Arc::new(pool::Pool::new(connect_timeout, POOL_IDLE_TIMEOUT)),
            from: from.into(),
            handshake_timeout,
            signers: Default::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            cards: CardLimits::default(),
            card_permits: std::sync::Arc::new(tokio::sync::Semaphore::new(
                CardLimits::default().concurrency,
            )),
        }
    }

    /// Sets the bounds on card fetches.
    pub fn set_card_limits(&mut self, limits: CardLimits) {
        let limits = CardLimits {
            concurrency: limits.concurrency.max(1),
            ..limits
        };
        self.card_permits = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.concurrency));
        self.cards = limits;
    }

    /// The bounds on card fetches.
    pub fn card_limits(&self) -> CardLimits {
        self.cards
    }

    /// The id the gateway sends as `from`.
    pub fn from_id(&self) -> &str {
        &self.from
    }

    /// GETs `url` and reads at most `max` bytes of its answer, all within `timeout`.
    async fn get_json(
        &self,
        url: &str,
        timeout: Duration,
        max: usize,
    ) -> Result<Vec<u8>, UpstreamError> {
        let too_large = || UpstreamError::Malformed {
            url: url.to_owned(),
            reason: format!("answer larger than {max} bytes"),
        };
        let mut resp = self
            .http
            .get(url)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| classify(url, timeout, e))?;
        if !resp.status().is_success() {
            return Err(UpstreamError::Status {
                url: url.to_owned(),
                status: resp.status().as_u16(),
            });
        }
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(url, timeout, e))? {
            if bytes.len() + chunk.len() > max {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Fetches a delegate's card: `/.well-known/ldp-identity` first (RFC), `/ldp/identity`
    /// second (reference SDK). At most [`CardLimits`] `max_bytes` are read, a card listing
    /// more than `max_capabilities` is refused, and at most `concurrency` fetches run at once.
    pub async fn fetch_card(
        &self,
        base: &str,
        timeout: Duration,
    ) -> Result<IdentityCard, UpstreamError> {
        // The deadline starts once a permit is held: a large fleet polls more slowly, it
        // does not time its delegates out. (The semaphore is never closed.)
        let _permit = self.card_permits.acquire().await.ok();
        let mut last = None;
        for path in ["/.well-known/ldp-identity", "/ldp/identity"] {
            let url = format!("{base}{path}");
            match self.get_json(&url, timeout, self.cards.max_bytes).await {
                Ok(bytes) => {
                    let card = serde_json::from_slice::<IdentityCard>(&bytes).map_err(|e| {
                        UpstreamError::Malformed {
                            url: url.clone(),
                            reason: format!("identity card: {e}"),
                        }
                    })?;
                    let n = card.capabilities.len();
                    if n > self.cards.max_capabilities {
                        return Err(UpstreamError::Malformed {
                            url,
                            reason: format!(
                                "identity card lists {n} capabilities; at most {} are accepted",
                                self.cards.max_capabilities
                            ),
                        });
                    }
                    return Ok(card);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(UpstreamError::Malformed {
            url: base.to_owned(),
            reason: "no identity card".into(),
        }))
    }

    /// Signs every message to the delegate at `base` with `secret` (the reference HMAC, which
    /// every SDK verifies).
    pub fn sign_for(&self, base: &str, secret: crate::secret::Secret) {
        self.signers.insert(base.to_owned(), secret);
    }

    /// Caps how much of a delegate's answer is read.
    pub fn set_max_response_bytes(&mut self, max: usize) {
        self.max_response_bytes = max.max(1024);
    }

    /// The JSON bytes to send to `base`: signed when a secret is registered for it.
    fn encode(
        &self,
        base: &str,
        path: &str,
        envelope: &Envelope,
    ) -> Result<Vec<u8>, UpstreamError> {
        let malformed = |reason: String| UpstreamError::Malformed {
            url: format!("{base}{path}"),
            reason,
        };
        match self.signers.get(base) {
            Some(secret) => {
                let mut signed = envelope.clone();
                crate::ldp::signing::apply(
                    &mut signed,
                    secret.expose(),
                    crate::ldp::signing::Algorithm::Reference,
                )
                .map_err(|e| malformed(e.to_string()))?;
                signed.to_vec().map_err(|e| malformed(e.to_string()))
            }
            None => envelope.to_vec().map_err(|e| malformed(e.to_string())),
        }
    }

    /// Sends one envelope to `base/ldp/messages` and reads the answer (at most
    /// `max_response_bytes` of it).
    pub async fn send(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
    ) -> Result<Envelope, UpstreamError> {
        self.send_hops(base, envelope, timeout, None).await
    }

    /// [`UpstreamClient::send`] for a forwarded task: `hops` goes in [`HOPS_HEADER`].
    pub async fn send_hops(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
        hops: Option<u32>,
    ) -> Result<Envelope, UpstreamError> {
        let body = self.encode(base, "/ldp/messages", envelope)?;
        let (status, bytes) = if pool::Pool::serves(base) {
            self.pool
                .post_message(base, body, timeout, self.max_response_bytes, hops)
                .await?
        } else {
            self.post_reqwest(base, body, timeout, hops).await?
        };
        let url = || format!("{base}/ldp/messages");
        if !status.is_success() {
            return Err(UpstreamError::Status {
                url: url(),
                status: status.as_u16(),
            });
        }
        Envelope::from_slice(&bytes).map_err(|e| UpstreamError::Malformed {
            url: url(),
            reason: e.to_string(),
        })
    }

    /// [`UpstreamClient::send`]'s exchange through reqwest (HTTPS delegates).
    async fn post_reqwest(
        &self,
        base: &str,
        body: Vec<u8>,
        timeout: Duration,
        hops: Option<u32>,
    ) -> Result<(reqwest::StatusCode, bytes::Bytes), UpstreamError> {
        let url = format!("{base}/ldp/messages");
        let mut req = self.http.post(&url);
        if let Some(n) = hops {
            req = req.header(HOPS_HEADER, n);
        }
        let resp = req
            .header("content-type", "application/json")
            .body(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| unanswered(classify(&url, timeout, e)))?;
        let status = resp.status();
        let mut resp = resp;
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(&url, timeout, e))? {
            if bytes.len() + chunk.len() > self.max_response_bytes {
                return Err(UpstreamError::Malformed {
                    url,
                    reason: format!("answer larger than {} bytes", self.max_response_bytes),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, bytes.into()))
    }

    /// Sends one envelope to `base/ldp/stream` and reads Server-Sent Events: every TASK_UPDATE
    /// goes to `on_update`, the final TASK_RESULT/TASK_FAILED is returned. A stream that ends
    /// without a final message is [`UpstreamError::StreamBroken`], never a success.
    pub async fn send_stream(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
        hops: Option<u32>,
        mut on_update: impl FnMut(Envelope),
    ) -> Result<Envelope, UpstreamError> {
        let url = format!("{base}/ldp/stream");
        let body = self.encode(base, "/ldp/stream", envelope)?;
        let cap = self.max_response_bytes;
        let work = async {
            let mut req = self.http.post(&url);
            if let Some(n) = hops {
                req = req.header(HOPS_HEADER, n);
            }
            let mut resp = req
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .body(body)
                .send()
                .await
                .map_err(|e| unanswered(classify(&url, timeout, e)))?;
            if !resp.status().is_success() {
                return Err(UpstreamError::Status {
                    url: url.clone(),
                    status: resp.status().as_u16(),
                });
            }
            let mut buf = String::new();
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) => return Err(UpstreamError::StreamBroken { url: url.clone() }),
                    Err(_) => return Err(UpstreamError::StreamBroken { url: url.clone() }),
                };
                buf.push_str(&String::from_utf8_lossy(&chunk));
                if buf.len() > cap {
                    return Err(UpstreamError::Malformed {
                        url: url.clone(),
                        reason: format!("stream event larger than {cap} bytes"),
                    });
                }
                for data in take_events(&mut buf) {
                    let env = Envelope::from_slice(data.as_bytes()).map_err(|e| {
                        UpstreamError::Malformed {
                            url: url.clone(),
                            reason: e.to_string(),
                        }
                    })?;
                    match env.body {
                        Body::TaskUpdate { .. } => on_update(env),
                        _ => return Ok(env),
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(UpstreamError::Timeout {
                url,
                after: timeout,
            }),
        }
    }

    /// HELLO → CAPABILITY_MANIFEST → SESSION_PROPOSE → SESSION_ACCEPT with the delegate at
    /// `base`, whose card is `card`.
    pub async fn open_session(
        &self,
        base: &str,
        card: &IdentityCard,
        config: SessionConfig,
    ) -> Result<UpstreamSession, UpstreamError> {
        let prefs = config.preferences();
        let hello = Envelope::new(
            "",
            self.from.as_str(),
            card.delegate_id.as_str(),
            Body::Hello {
                delegate_id: self.from.clone(),
                supported_modes: prefs.clone(),
            },
            PayloadMode::Text,
        );
        self.send(base, &hello, self.handshake_timeout).await?;
        let proposal_id = crate::ldp::new_id();
        let propose = Envelope::new(
            proposal_id.as_str(),
            self.from.as_str(),
            card.delegate_id.as_str(),
            Body::SessionPropose { config },
            PayloadMode::Text,
        );
        let answer = self.send(base, &propose, self.handshake_timeout).await?;
        match answer.body {
            Body::SessionAccept {
                session_id,
                negotiated_mode,
                fallback_chain,
            } => {
                // Delegates that send no chain (the SDKs) get the RFC one computed here.
                let mut payload = negotiate(&prefs, &card.supported_payload_modes);
                payload.mode = negotiated_mode;
                if !fallback_chain.is_empty() {
                    payload.fallback_chain = fallback_chain;
                } else {
                    payload
                        .fallback_chain
                        .retain(|m| m.number() < negotiated_mode.number());
                    if negotiated_mode != PayloadMode::Text
                        && !payload.fallback_chain.contains(&PayloadMode::Text)
                    {
                        payload.fallback_chain.push(PayloadMode::Text);
                    }
                }
                let session_id = if session_id.is_empty() {
                    proposal_id
                } else {
                    session_id
                };
                Ok(UpstreamSession {
                    session_id,
                    payload,
                    delegate_id: card.delegate_id.clone(),
                })
            }
            Body::SessionReject { reason, error } => Err(UpstreamError::Rejected { reason, error }),
            other => Err(UpstreamError::Unexpected {
                url: base.to_owned(),
                got: other.message_type().as_str(),
            }),
        }
    }

    /// Sends SESSION_CLOSE for an upstream session; failures are only logged.
    pub async fn close_session(&self, base: &str, session: &UpstreamSession) {
        let close = Envelope::new(
            session.session_id.as_str(),
            self.from.as_str(),
            session.delegate_id.as_str(),
            Body::SessionClose {
                reason: Some("client session ended".into()),
            },
            PayloadMode::Text,
        );
        if let Err(e) = self.send(base, &close, self.handshake_timeout).await {
            tracing::debug!(delegate = %base, error = %e, "upstream SESSION_CLOSE failed");
        }
    }
}

fn classify(url: &str, timeout: Duration, e: reqwest::Error) -> UpstreamError {
    if e.is_timeout() {
        return UpstreamError::Timeout {
            url: url.to_owned(),
            after: timeout,
        };
    }
    // The source chain carries the useful part ("Connection refused").
    let mut reason = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        reason = s.to_string();
        src = s.source();
    }
    if e.is_connect() {
        UpstreamError::Connect {
            url: url.to_owned(),
            reason,
        }
    } else {
        UpstreamError::Broken {
            url: url.to_owned(),
            reason,
        }
    }
}

/// A transport failure before the answer's head arrived: the delegate never answered, so the
/// task may go to another (HTTP/1.1 keep-alive races a closing delegate on every request).
fn unanswered(e: UpstreamError) -> UpstreamError {
    match e {
        UpstreamError::Broken { url, reason } => UpstreamError::Unanswered { url, reason },
        other => other,
    }
}

/// Splits complete SSE events off the front of `buf`, returning each event's `data` text.
fn take_events(buf: &mut String) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let normalized = buf.replace("\r\n", "\n");
        if normalized.len() != buf.len() {
            *buf = normalized;
        }
        let Some(end) = buf.find("\n\n") else { break };
        let event: String = buf.drain(..end + 2).collect();
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}
