//! OpenAI-compatible models as LDP delegates, and OpenAI clients as LDP clients: the chat
//! wire (the `openai-wire` crate), the identity card built from what an operator declares (`card.rs`), calls
//! to such a delegate (`upstream.rs`), and the conversations the gateway keeps for them
//! (`conversation.rs`). The proxy's room for a task sent to one is `proxy/openai.rs`; the
//! ingress routes are `server/openai_routes.rs`.

pub mod card;
pub mod conversation;
pub mod upstream;

pub use card::Prices;
pub use upstream::{
    Backend, BackendError, ChatError, ChatSummary, Params, Piece, Reply, Stopped, Streamed,
};
pub use openai_wire::{estimate_tokens, Usage};
