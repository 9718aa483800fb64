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
