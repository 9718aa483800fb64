//! The gateway's side of its delegates, in its own words: every card fetch, session, message
//! and stream goes through the `ldp-client` crate's [`UpstreamClient`] (its `Transport`).

pub mod a2a;
pub mod ldp;
pub mod openai;

pub use ldp_client::{
    code_shown, requests_own, status_text, CardLimits, Error as UpstreamError, Forward,
    Session as UpstreamSession, Transport as UpstreamClient, DEFAULT_MAX_RESPONSE_BYTES,
    HOPS_HEADER, STREAM_BYTES_PER_ANSWER_BYTE,
};

use crate::config::{DelegateConfig, DelegateKind};
use crate::ldp::IdentityCard;
use std::sync::Arc;

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
    ) -> Result<Upstream, openai::BackendError> {
        Ok(match cfg.kind {
            DelegateKind::Ldp => Upstream::Ldp(ldp::Ldp),
            DelegateKind::OpenAi => {
                Upstream::OpenAi(openai::OpenAi::from_config(cfg, name, base_url)?)
            }
            DelegateKind::A2a => Upstream::A2a(a2a::Agent::from_config(cfg, name)?),
        })
    }

    /// Whether it keeps LDP sessions (opened per client session and skill, closed with them,
    /// sent TASK_CANCEL): an LDP delegate does; the others keep no session the gateway opens.
    pub fn keeps_sessions(&self) -> bool {
        match self {
            Upstream::Ldp(_) => true,
            Upstream::OpenAi(_) | Upstream::A2a(_) => false,
        }
    }

    /// The card declared for it, when its identity is declared rather than fetched (known
    /// before its first poll).
    pub fn declared_card(&self) -> Option<Arc<IdentityCard>> {
        match self {
            Upstream::OpenAi(o) => Some(Arc::clone(&o.card)),
            Upstream::Ldp(_) | Upstream::A2a(_) => None,
        }
    }

    /// Whether its cost is its usage × declared token prices (nothing to compare with a
    /// price per call).
    pub fn token_priced(&self) -> bool {
        match self {
            Upstream::OpenAi(_) => true,
            Upstream::Ldp(_) | Upstream::A2a(_) => false,
        }
    }

    /// What a call to it is, in the GenAI conventions' words: (operation, provider, model
    /// asked for; empty when the delegate chooses).
    pub fn call_kind(&self) -> (&'static str, &'static str, &str) {
        match self {
            Upstream::Ldp(_) => ("invoke_agent", "ldp", ""),
            Upstream::OpenAi(o) => ("chat", "openai", o.backend.model.as_str()),
            Upstream::A2a(_) => ("invoke_agent", "a2a", ""),
        }
    }
}
