//! The client side of the gateway: cards, messages and upstream sessions with delegates.
//!
//! Never follows redirects, never connects to a card's `endpoint` field: every call goes to the
//! base URL the operator configured or registered.

use hyper::header::{HeaderName, HeaderValue};
use ldp_wire::{
    negotiate, Body, DelegateId, Envelope, IdentityCard, NegotiatedPayload, PayloadMode,
    SessionConfig, SessionId,
};
use std::time::Duration;

mod card;
mod head;
mod http;
mod pool;
mod sse;
mod stream;
#[cfg(feature = "tls")]
mod tls;

use crate::Error;
use bytes::Bytes;
pub use card::CardLimits;
pub use head::Head;
pub use http::{Events, HttpAnswer};
use pool::Req;

/// An upstream session the gateway opened with a delegate.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Session {
    /// The delegate-issued session id.
    pub session_id: SessionId,
    /// What was agreed with the delegate.
    pub payload: NegotiatedPayload,
    /// The `to` the gateway addresses (the delegate's id).
    pub delegate_id: DelegateId,
}

/// HTTP client to LDP endpoints, with one keep-alive connection pool, no redirects and
/// deadlines. Every plain-HTTP request (messages, cards, streams) goes through its pool
/// (`pool.rs`, hyper's connection API); HTTPS, with the `tls` feature, through reqwest
/// (`tls.rs`).
#[derive(Clone)]
pub struct Transport {
    pool: std::sync::Arc<pool::Pool>,
    #[cfg(feature = "tls")]
    tls: tls::Tls,
    from: std::sync::Arc<str>,
    handshake_timeout: Duration,
    /// Per-delegate signing secrets, by base URL.
    signers: std::sync::Arc<dashmap::DashMap<String, crate::Secret>>,
    /// The secret for every other base URL, if any.
    default_signer: Option<crate::Secret>,
    /// Headers sent with every request (a client's `Authorization`, `x-ldp-policy`).
    headers: std::sync::Arc<[(HeaderName, HeaderValue)]>,
    /// Largest answer read from a delegate.
    max_response_bytes: usize,
    /// What a card may be, and how many are fetched at once.
    cards: CardLimits,
    /// One permit per card fetch in flight (`cards.concurrency`).
    card_permits: std::sync::Arc<tokio::sync::Semaphore>,
}

/// The header counting the gateways a task has passed through: a gateway sends its own
/// count plus one with every task it forwards and refuses a task past `upstream.max_hops`.
pub const HOPS_HEADER: &str = "x-ldp-hops";

/// What a forwarded call carries besides its body: the hop count ([`HOPS_HEADER`]) and the
/// W3C trace context (`traceparent`, `tracestate`) of the span that makes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forward<'a> {
    /// Gateways passed so far, plus one (`None`: not a forwarded task).
    pub hops: Option<u32>,
    /// Trace-context headers, sent as they are (empty: none).
    pub trace: &'a [(hyper::header::HeaderName, hyper::header::HeaderValue)],
}

impl From<Option<u32>> for Forward<'_> {
    fn from(hops: Option<u32>) -> Self {
        Forward { hops, trace: &[] }
    }
}

/// How long an idle keep-alive connection to a delegate is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest answer read from a delegate by default (a multiple of the request body limit).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// Bytes a stream may carry per byte of the answer cap, counting everything read: event
/// names, ids, each chunk's JSON wrapper, comments. An OpenAI-compatible stream sends about
/// 200 bytes of wrapper per token, so a stream capped at the answer cap itself would end a
/// long answer at about 40,000 tokens; eight times the cap is a bound on what a stream of
/// nothing (`: x` comment lines) can make the gateway read, and room for any answer.
pub const STREAM_BYTES_PER_ANSWER_BYTE: usize = 8;

impl Transport {
    /// A client that signs messages as `from` (the gateway's delegate id).
    pub fn new(
        from: impl Into<String>,
        connect_timeout: Duration,
        handshake_timeout: Duration,
    ) -> Self {
        Transport {
            #[cfg(feature = "tls")]
            tls: tls::Tls::new(connect_timeout, POOL_IDLE_TIMEOUT),
            pool: std::sync::Arc::new(pool::Pool::new(connect_timeout, POOL_IDLE_TIMEOUT)),
            from: std::sync::Arc::from(from.into()),
            handshake_timeout,
            signers: Default::default(),
            default_signer: None,
            headers: std::sync::Arc::new([]),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            cards: CardLimits::default(),
            card_permits: std::sync::Arc::new(tokio::sync::Semaphore::new(
                CardLimits::default().concurrency,
            )),
        }
    }

    /// The id the gateway sends as `from`.
    pub fn from_id(&self) -> &str {
        &self.from
    }

    /// Signs every message to the delegate at `base` with `secret` (the reference HMAC, which
    /// every SDK verifies).
    pub fn sign_for(&self, base: &str, secret: crate::Secret) {
        self.signers.insert(base.to_owned(), secret);
    }

    /// Signs every message to a base URL without its own secret ([`Transport::sign_for`])
    /// with `secret`.
    pub fn sign_all(&mut self, secret: crate::Secret) {
        self.default_signer = Some(secret);
    }

    /// Sends `headers` with every request (cards, messages, streams).
    pub fn set_headers(&mut self, headers: Vec<(HeaderName, HeaderValue)>) {
        self.headers = headers.into();
    }

    /// The delegate's answer to a non-2xx request: its status and, when the body is the
    /// `{"error": LdpError}` a gateway writes, that error.
    fn status_error(url: String, status: u16, body: &[u8]) -> Error {
        #[derive(serde::Deserialize)]
        struct ErrorBody {
            error: ldp_wire::LdpError,
        }
        let error = serde_json::from_slice::<ErrorBody>(body)
            .ok()
            .map(|b| Box::new(b.error));
        Error::Status { url, status, error }
    }

    /// Caps how much of a delegate's answer is read.
    pub fn set_max_response_bytes(&mut self, max: usize) {
        self.max_response_bytes = max.max(1024);
    }

    /// The most of a delegate's answer that is read (a streamed answer's reader caps what it
    /// accumulates at the same).
    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// The JSON bytes to send to `base`: signed when a secret is registered for it.
    fn encode(&self, base: &str, path: &str, envelope: &Envelope) -> Result<Bytes, Error> {
        let malformed = |reason: String| Error::Malformed {
            url: format!("{base}{path}"),
            reason,
        };
        let own = self.signers.get(base);
        match own.as_deref().or(self.default_signer.as_ref()) {
            Some(secret) => {
                let mut signed = envelope.clone();
                ldp_wire::signing::apply(
                    &mut signed,
                    secret.expose(),
                    ldp_wire::signing::Algorithm::Reference,
                )
                .map_err(|e| malformed(e.to_string()))?;
                signed
                    .to_vec()
                    .map(Bytes::from)
                    .map_err(|e| malformed(e.to_string()))
            }
            None => envelope
                .to_vec()
                .map(Bytes::from)
                .map_err(|e| malformed(e.to_string())),
        }
    }

    /// Sends one envelope to `base/ldp/messages` and reads the answer (at most
    /// `max_response_bytes` of it).
    pub async fn send(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
    ) -> Result<Envelope, Error> {
        self.send_hops(base, envelope, timeout, Forward::default())
            .await
    }

    /// [`Transport::send`] for a forwarded task: its hop count goes in [`HOPS_HEADER`], its
    /// trace context beside it.
    pub async fn send_hops(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
        forward: Forward<'_>,
    ) -> Result<Envelope, Error> {
        let req = Req {
            path: pool::MESSAGES,
            body: Some(self.encode(base, pool::MESSAGES, envelope)?),
            forward,
            events: false,
            headers: &self.headers,
        };
        let (head, bytes) = self
            .exchange(base, &req, timeout, self.max_response_bytes)
            .await?;
        let status = head.status;
        let url = || format!("{base}/ldp/messages");
        if !status.is_success() {
            return Err(Self::status_error(url(), status.as_u16(), &bytes));
        }
        Envelope::from_slice(&bytes).map_err(|e| Error::Malformed {
            url: url(),
            reason: e.to_string(),
        })
    }

    /// Sends `req` to `base` and reads the whole answer (at most `max_bytes`) within
    /// `timeout`: plain HTTP through the pool, HTTPS through `tls.rs`.
    async fn exchange(
        &self,
        base: &str,
        req: &Req<'_>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<(Head, Bytes), Error> {
        if pool::Pool::serves(base) {
            return self.pool.exchange(base, req, timeout, max_bytes).await;
        }
        #[cfg(feature = "tls")]
        if base.starts_with("https://") {
            return self.tls.exchange(base, req, timeout, max_bytes).await;
        }
        Err(unsupported(base))
    }

    /// Sends `req` to `base` and returns the answer's status and its body to read as it comes.
    async fn open(&self, base: &str, req: &Req<'_>) -> Result<(Head, Answer), Error> {
        if pool::Pool::serves(base) {
            let (head, body) = self.pool.open(base, req).await?;
            return Ok((head, Answer::Plain(body)));
        }
        #[cfg(feature = "tls")]
        if base.starts_with("https://") {
            let (head, body) = self.tls.open(base, req).await?;
            return Ok((head, Answer::Tls(body)));
        }
        Err(unsupported(base))
    }

    /// HELLO → CAPABILITY_MANIFEST → SESSION_PROPOSE → SESSION_ACCEPT with the delegate at
    /// `base`, whose card is `card`.
    pub async fn open_session(
        &self,
        base: &str,
        card: &IdentityCard,
        config: SessionConfig,
    ) -> Result<Session, Error> {
        let prefs = config.preferences();
        let hello = Envelope::new(
            "",
            &*self.from,
            card.delegate_id.as_str(),
            Body::Hello {
                delegate_id: self.from.to_string(),
                supported_modes: prefs.clone(),
            },
            PayloadMode::Text,
        );
        self.send(base, &hello, self.handshake_timeout).await?;
        let proposal_id = ldp_wire::new_id();
        let propose = Envelope::new(
            proposal_id.as_str(),
            &*self.from,
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
                Ok(Session {
                    session_id: session_id.into(),
                    payload,
                    delegate_id: card.delegate_id.as_str().into(),
                })
            }
            Body::SessionReject { reason, error } => Err(Error::Rejected { reason, error }),
            other => Err(Error::Unexpected {
                url: base.to_owned(),
                got: other.message_type().as_str(),
            }),
        }
    }

    /// Sends SESSION_CLOSE for an upstream session; failures are only logged.
    pub async fn close_session(&self, base: &str, session: &Session) {
        let close = Envelope::new(
            session.session_id.as_str(),
            &*self.from,
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

/// An answer's body read as it comes (a stream).
enum Answer {
    Plain(pool::Body),
    #[cfg(feature = "tls")]
    Tls(tls::Body),
}

impl Answer {
    /// The next piece; `None` at the end.
    async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        match self {
            Answer::Plain(b) => b.chunk().await,
            #[cfg(feature = "tls")]
            Answer::Tls(b) => b.chunk().await,
        }
    }
}

/// A base URL this build cannot call (HTTPS without the `tls` feature).
fn unsupported(base: &str) -> Error {
    if base.starts_with("https://") && !cfg!(feature = "tls") {
        Error::Url(crate::UrlError::NeedsTls)
    } else {
        Error::Url(crate::UrlError::Scheme(base.to_owned()))
    }
}
