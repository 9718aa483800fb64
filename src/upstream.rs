//! The gateway's side of its delegates, in its own words: every card fetch, session, message
//! and stream goes through the `ldp-client` crate's [`UpstreamClient`] (its `Transport`).

pub mod a2a;
pub mod anthropic;
pub mod chat;
pub mod declared;
mod ldp;
pub mod openai;

pub use ldp_client::{
    code_shown, requests_own, status_text, CardLimits, Error as UpstreamError, Forward,
    Session as UpstreamSession, Transport as UpstreamClient, DEFAULT_MAX_RESPONSE_BYTES,
    HOPS_HEADER, STREAM_BYTES_PER_ANSWER_BYTE,
};

use crate::config::{DelegateConfig, DelegateKind};
use crate::ldp::IdentityCard;
use std::sync::Arc;

/// Why a delegate's key cannot be read (an OpenAI-compatible, Anthropic or A2A delegate).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// `api_key_env` names a variable that is not set.
    #[error("delegate '{delegate}': API key variable {var} is not set")]
    MissingKey {
        /// The delegate.
        delegate: String,
        /// The variable.
        var: String,
    },
    /// The key cannot be sent in a header.
    #[error("delegate '{delegate}': the API key in {var} is not a valid header value")]
    BadKey {
        /// The delegate.
        delegate: String,
        /// The variable.
        var: String,
    },
}

/// The key of entry `cfg` (named `name`) from its `api_key_env`, with the variable's name
/// (for errors); none when it names no variable.
pub fn read_key(
    cfg: &DelegateConfig,
    name: &str,
) -> Result<Option<(String, crate::secret::Secret)>, KeyError> {
    let Some(var) = &cfg.api_key_env else {
        return Ok(None);
    };
    let secret = crate::secret::Secret::from_env(var).ok_or_else(|| KeyError::MissingKey {
        delegate: name.to_owned(),
        var: var.clone(),
    })?;
    Ok(Some((var.clone(), secret)))
}

/// The header `header: {prefix}{key}` carrying delegate `name`'s key from variable `var`,
/// marked sensitive (never printed).
pub fn secret_header(
    name: &str,
    var: &str,
    key: &crate::secret::Secret,
    header: hyper::header::HeaderName,
    prefix: &str,
) -> Result<(hyper::header::HeaderName, hyper::header::HeaderValue), KeyError> {
    let bytes = [prefix.as_bytes(), key.expose()].concat();
    let mut value =
        hyper::header::HeaderValue::from_bytes(&bytes).map_err(|_| KeyError::BadKey {
            delegate: name.to_owned(),
            var: var.to_owned(),
        })?;
    value.set_sensitive(true);
    Ok((header, value))
}

/// What kind of upstream a delegate is, and what that kind keeps to call it: every place
/// that depends on the kind matches this exhaustively, so a new kind does not compile until
/// each has decided what to do with it.
#[derive(Debug)]
pub enum Upstream {
    /// An LDP delegate: its card fetched from it, an upstream session per client session and
    /// skill, TASK_SUBMIT and TASK_CANCEL.
    Ldp(ldp::Ldp),
    /// An OpenAI-compatible chat-completions server: its card declared, a chat completion per
    /// task, the conversation kept by the gateway.
    OpenAi(openai::OpenAi),
    /// An Anthropic Messages API server: its card declared, a message per task, the
    /// conversation kept by the gateway.
    Anthropic(anthropic::Anthropic),
    /// An A2A agent: its card built from its Agent Card, a message per task in a context per
    /// client session, `CancelTask`.
    A2a(a2a::Agent),
}

impl Upstream {
    /// The kind of the entry `cfg` (named `name`, at `base_url`), its key read from its
    /// `api_key_env`.
    pub fn from_config(
        cfg: &DelegateConfig,
        name: &str,
        base_url: &str,
    ) -> Result<Upstream, KeyError> {
        Ok(match cfg.kind {
            DelegateKind::Ldp => Upstream::Ldp(ldp::Ldp),
            DelegateKind::OpenAi => {
                Upstream::OpenAi(openai::OpenAi::from_config(cfg, name, base_url)?)
            }
            DelegateKind::Anthropic => {
                Upstream::Anthropic(anthropic::Anthropic::from_config(cfg, name, base_url)?)
            }
            DelegateKind::A2a => Upstream::A2a(a2a::Agent::from_config(cfg, name)?),
        })
    }

    /// Whether it keeps LDP sessions (opened per client session and skill, closed with them,
    /// sent TASK_CANCEL): an LDP delegate does; the others keep no session the gateway opens.
    pub fn keeps_sessions(&self) -> bool {
        match self {
            Upstream::Ldp(_) => true,
            Upstream::OpenAi(_) | Upstream::Anthropic(_) | Upstream::A2a(_) => false,
        }
    }

    /// The card declared for it, when its identity is declared rather than fetched (known
    /// before its first poll).
    pub fn declared_card(&self) -> Option<Arc<IdentityCard>> {
        match self {
            Upstream::OpenAi(o) => Some(Arc::clone(&o.card)),
            Upstream::Anthropic(a) => Some(Arc::clone(&a.card)),
            Upstream::Ldp(_) | Upstream::A2a(_) => None,
        }
    }

    /// Whether its card's price is per call (else its cost is its usage × declared token
    /// prices: nothing to compare with a price per call).
    pub fn priced_per_call(&self) -> bool {
        match self {
            Upstream::OpenAi(_) | Upstream::Anthropic(_) => false,
            Upstream::Ldp(_) | Upstream::A2a(_) => true,
        }
    }

    /// Whether the gateway keeps the conversation for it (it keeps none: a chat delegate),
    /// sending a session's earlier turns with each task.
    pub fn keeps_conversation(&self) -> bool {
        match self {
            Upstream::OpenAi(_) | Upstream::Anthropic(_) => true,
            Upstream::Ldp(_) | Upstream::A2a(_) => false,
        }
    }

    /// The most output tokens a task here asks for (0 where the delegate decides): what its
    /// budget hold assumes and its request allows.
    pub fn output_tokens(&self, chat: Option<&Chat>, default: u64) -> u64 {
        match self {
            Upstream::OpenAi(o) => o.output_tokens(chat, default),
            Upstream::Anthropic(a) => a.output_tokens(chat, default),
            Upstream::Ldp(_) | Upstream::A2a(_) => 0,
        }
    }

    /// Its prices per token, for a delegate priced by tokens and not free (a task's cost is
    /// then estimated from its size); `None` for one priced per call (its card says) or free.
    pub fn token_prices(&self) -> Option<&declared::Prices> {
        match self {
            Upstream::OpenAi(o) => Some(o.prices()).filter(|p| !p.is_free()),
            Upstream::Anthropic(a) => Some(a.prices()).filter(|p| !p.is_free()),
            Upstream::Ldp(_) | Upstream::A2a(_) => None,
        }
    }

    /// How many of the newest remembered `turns` go with a task whose text is `user` and
    /// whose answer may take `answer` tokens (a chat delegate's context window).
    pub fn turns_that_fit(&self, turns: &[Turn], user: &str, answer: u64) -> usize {
        match self {
            Upstream::OpenAi(o) => o.turns_that_fit(turns, user, answer),
            Upstream::Anthropic(a) => a.turns_that_fit(turns, user, answer),
            Upstream::Ldp(_) | Upstream::A2a(_) => 0,
        }
    }

    /// Sends the task and reads the answer, as the kind does it.
    pub async fn call(&self, call: &Call<'_>, relay: &Relay<'_>) -> Outcome {
        match self {
            Upstream::Ldp(l) => l.call(call, relay).await,
            Upstream::OpenAi(o) => o.call(call, relay).await,
            Upstream::Anthropic(a) => a.call(call, relay).await,
            Upstream::A2a(a) => a.call(call, relay).await,
        }
    }

    /// Its Anthropic model, if it is one (what `count_tokens` asks).
    pub fn anthropic(&self) -> Option<&anthropic::Anthropic> {
        match self {
            Upstream::Anthropic(a) => Some(a),
            Upstream::Ldp(_) | Upstream::OpenAi(_) | Upstream::A2a(_) => None,
        }
    }

    /// Why a chat answer stopped, in the provider's own words (the GenAI conventions'
    /// `finish_reasons`).
    pub fn finish_reason<'a>(&self, f: &'a crate::chat::Finish) -> &'a str {
        match self {
            Upstream::Anthropic(_) => crate::chat::anthropic::stop_reason(f).0,
            Upstream::OpenAi(_) | Upstream::Ldp(_) | Upstream::A2a(_) => {
                crate::chat::openai::finish_reason(f)
            }
        }
    }

    /// What a call to it is, in the GenAI conventions' words: (operation, provider, model
    /// asked for; empty when the delegate chooses).
    pub fn call_kind(&self) -> (&'static str, &'static str, &str) {
        match self {
            Upstream::Ldp(_) => ("invoke_agent", "ldp", ""),
            Upstream::OpenAi(o) => ("chat", "openai", o.backend.model.as_str()),
            Upstream::Anthropic(a) => ("chat", "anthropic", a.backend.model.as_str()),
            Upstream::A2a(_) => ("invoke_agent", "a2a", ""),
        }
    }
}

use crate::chat::Turn;
use crate::chat::{Answer, Chat, Delta, Refusal, Usage};
use crate::ldp::{DelegationContract, Envelope, Json, LdpError, PayloadMode, Provenance, TaskId};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One task sent to one delegate, whatever its kind: what every kind needs to build its
/// request. Built by the pipeline's attempts; each kind reads what it uses.
pub struct Call<'a> {
    /// The gateway's transport.
    pub client: &'a UpstreamClient,
    /// The delegate's base URL.
    pub base_url: &'a str,
    /// The delegate as clients are told of it (its configured name or card id, never its
    /// address): in the errors and notes a client reads.
    pub told: &'a str,
    /// Its registry name (logs; an A2A context is kept per client session and delegate).
    pub name: &'a str,
    /// Its last card (the provenance of an answer that carries none).
    pub card: Option<Arc<IdentityCard>>,
    /// The task's id (the client's), its skill, its input and the mode the client sent it in.
    pub task_id: &'a TaskId,
    pub skill: &'a str,
    pub input: &'a Json,
    pub input_mode: PayloadMode,
    /// A verification the gateway sends: its input goes as it is, in any mode.
    pub verifying: bool,
    /// The delegation contract the client sent.
    pub contract: Option<&'a DelegationContract>,
    /// A chat front end's request, whose messages a chat delegate is sent as they came.
    pub chat: Option<&'a Chat>,
    /// The client session the task keeps its context in (`None`: the task carries its whole
    /// context: a front end's, a verification).
    pub session: Option<&'a str>,
    /// The LDP session the task goes in, the mode it is sent in, and whether a lost session
    /// is worth a re-handshake (not twice for one task) (an LDP delegate).
    pub upstream_session: Option<&'a UpstreamSession>,
    pub mode: PayloadMode,
    pub may_rehandshake: bool,
    /// The turns remembered for the session (a chat delegate; fitted to its window).
    pub turns: &'a [Turn],
    /// The most output tokens a chat delegate is asked for (what the budget hold assumed).
    pub max_output_tokens: u64,
    /// What the card says one task costs (a delegate priced per call).
    pub declared_cost: Option<f64>,
    /// This attempt's timeout, and how long a cancel may take to reach the delegate.
    pub limit: Duration,
    pub handshake_timeout: Duration,
    /// The hop count and trace context sent with it.
    pub forward: Forward<'a>,
    /// Cancelled (nothing more starts), and abandoned (calls in flight are dropped).
    pub cancel: &'a CancellationToken,
    pub abandon: &'a CancellationToken,
}

/// Where what a delegate says while it works goes.
pub enum Relay<'a> {
    /// Nobody listens.
    Quiet,
    /// An LDP stream: notes and updates, dropped if the client is not keeping up; `Break`
    /// when nobody listens any more (or the task was cancelled).
    Updates(&'a (dyn Fn(Update) -> ControlFlow<()> + Sync)),
    /// A chat stream: the answer's pieces, each awaited (a slow client slows the read);
    /// `Break` when nobody listens any more.
    Pieces(&'a (dyn Fn(Delta) -> PieceSent<'a> + Sync)),
}

/// A piece handed to a chat stream: whether to go on reading.
pub type PieceSent<'a> = Pin<Box<dyn std::future::Future<Output = ControlFlow<()>> + Send + 'a>>;

/// Something said while a task runs, for an LDP stream.
#[expect(
    clippy::large_enum_variant,
    reason = "handed on at once, never stored: boxing would cost an allocation per update"
)]
pub enum Update {
    /// A note of the gateway's or the delegate's text.
    Note(String),
    /// An LDP delegate's own TASK_UPDATE, passed on.
    Envelope(Envelope),
}

/// A delegate's failure at a task.
#[derive(Debug)]
pub struct Failure {
    /// What the client gets if no other delegate is tried: the delegate's name and a
    /// generic reason, never its address or its own words.
    pub error: LdpError,
    /// The reason code for the row and `ldp_gateway_fallbacks_total` (`timeout`, …).
    pub reason: &'static str,
    /// Whether another delegate may be tried.
    pub retryable: bool,
    /// What happened, whole (the URL, the delegate's own message): for the log and the
    /// ledger row only.
    pub detail: String,
    /// How long the delegate asked not to be called (a 429): if no other delegate takes
    /// the task, the client is answered with this rate limit.
    pub pause: Option<Duration>,
}

impl Failure {
    /// The delegate `told` could not be reached, timed out, or answered outside the protocol.
    pub fn upstream(told: &str, e: &UpstreamError) -> Failure {
        Failure {
            error: LdpError::upstream_failed(
                format!("delegate '{told}' {}", e.summary()),
                e.retryable(),
            ),
            reason: e.reason(),
            retryable: e.retryable(),
            detail: e.to_string(),
            pause: None,
        }
    }

    /// The attempt ran out of time before it was sent.
    pub fn timed_out(told: &str, url: &str, after: Duration) -> Failure {
        let e = UpstreamError::Timeout {
            url: url.to_owned(),
            after,
        };
        Failure {
            reason: "timeout",
            retryable: false,
            ..Failure::upstream(told, &e)
        }
    }
}

/// What one exchange says about the delegate's health.
#[derive(Debug, Clone, Copy)]
pub enum Health {
    /// It answered within the protocol (a result, or the task's own failure) after this long.
    Answered(Duration),
    /// It is at fault (unreachable, an error status, a retryable failure, an answer outside
    /// the protocol); how long it took when it timed out.
    Faulted(Option<Duration>),
    /// Nothing learnt (a lost upstream session; a failure on the gateway's side).
    Unknown,
}

impl Health {
    /// What a transport error after `took` says about the delegate.
    pub fn of_error(e: &UpstreamError, took: Option<Duration>) -> Health {
        if !e.is_delegate_fault() {
            return Health::Unknown;
        }
        let timed_out = matches!(e, UpstreamError::Timeout { .. });
        Health::Faulted(took.filter(|_| timed_out))
    }
}

/// A delegate's answer with a result.
#[derive(Debug, Default)]
pub struct Answered {
    /// The output.
    pub output: Json,
    /// The provenance it reported (or the gateway wrote for it).
    pub provenance: Option<Provenance>,
    /// Token counts, as charged (a chat delegate).
    pub usage: Option<Usage>,
    /// A chat delegate's answer besides its text: why it stopped, the tools it called, its
    /// own parts as it gave them.
    pub chat: Option<Answer>,
    /// The turn to remember for the session (a chat delegate keeping no state).
    pub turn: Option<Turn>,
}

/// What one call to a delegate came to.
#[derive(Debug)]
pub enum Called {
    /// A result.
    Answered(Box<Answered>),
    /// The delegate no longer knows the upstream session (its TTL ran out): re-handshake
    /// (an LDP delegate).
    SessionLost,
    /// The payload mode failed upstream: the next mode on the chain (an LDP delegate).
    ModeFailed(LdpError),
    /// The task's own failure, or the request's refusal: the client's answer, with the
    /// delegate's refusal of the request as it gave it (a chat delegate's 4xx).
    Refused(LdpError, Option<Refusal>),
    /// The delegate failed: another may be tried.
    Failed(Box<Failure>),
}

/// A call's outcome, with what it says of the delegate and what it took.
#[derive(Debug)]
pub struct Outcome {
    pub called: Called,
    pub health: Health,
    /// Time spent waiting on the delegate.
    pub took: Duration,
    /// What an answer that never finished used (charged and recorded): its usage and cost.
    pub used: Option<(Usage, f64)>,
    /// Notes for the ledger row (a usage clamped, a provenance cut, …).
    pub notes: Vec<String>,
    /// The delegate asked not to be called for this long (a 429).
    pub pause: Option<Duration>,
    /// The usage it reported was more than it could have used (charged within the bound).
    pub clamped: bool,
}

impl Outcome {
    /// `called` after `took`, as `health` says, nothing else.
    pub fn of(called: Called, health: Health, took: Duration) -> Outcome {
        Outcome {
            called,
            health,
            took,
            used: None,
            notes: Vec::new(),
            pause: None,
            clamped: false,
        }
    }
}
