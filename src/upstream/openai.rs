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
