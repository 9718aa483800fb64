//! OpenAI-compatible models as delegates (`kind = "openai"`): the identity card built from
//! what an operator declares (`card.rs`), the calls to such a delegate (`backend.rs`), and the
//! task's translation to a chat completion and back. The wire is the `openai-wire` crate's.

pub mod backend;
pub mod card;

pub use backend::{
    Backend, BackendError, ChatError, ChatSummary, Params, Piece, Reply, Stopped, Streamed,
};
pub use card::Prices;
pub use openai_wire::{estimate_tokens, Usage};

use crate::config::DelegateConfig;
use crate::ldp::IdentityCard;
use std::sync::Arc;

/// What makes a delegate OpenAI-compatible: how it is called, and the card declared for it.
#[derive(Debug)]
pub struct OpenAi {
    /// How it is called.
    pub backend: Backend,
    /// The card built from `[delegates.card]`.
    pub card: Arc<IdentityCard>,
}

impl OpenAi {
    /// The entry `cfg` (named `name`, at `base_url`), its key read from `api_key_env`. The
    /// declared card of a delegate without a configured name is named after its model, not
    /// its URL: the card's id is what clients see of it.
    pub fn from_config(
        cfg: &DelegateConfig,
        name: &str,
        base_url: &str,
    ) -> Result<OpenAi, BackendError> {
        let backend = Backend::from_config(cfg, name)?;
        let card = card::build(
            cfg.name.as_deref().unwrap_or(&backend.model),
            base_url,
            &backend.model,
            cfg.card.as_ref().unwrap_or(&EMPTY_CARD),
        );
        Ok(OpenAi {
            backend,
            card: Arc::new(card),
        })
    }
}

/// The card of an `openai` entry without `[delegates.card]` (`check` refuses one; a
/// registration through the API has none).
static EMPTY_CARD: crate::config::DeclaredCard = crate::config::DeclaredCard {
    skills: Vec::new(),
    quality: None,
    price_per_mtok_input: None,
    price_per_mtok_output: None,
    latency_p50_ms: None,
    jurisdiction: None,
    trust_domain: None,
    context_window: None,
    model_family: None,
};
