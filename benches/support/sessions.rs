//! The session every bench that opens many client sessions opens (`hot_path`,
//! `session_memory`).

use ldp_gateway::ldp::NegotiatedPayload;
use ldp_gateway::session::NewSession;
use std::time::Duration;

/// Session `i` of one tenant: text mode, an hour's TTL.
pub fn new_session(i: usize) -> NewSession {
    NewSession {
        owner: format!("tenant\u{1f}ldp:client:{i}"),
        tenant: "tenant".into(),
        client_domain: "default".into(),
        required_domain: None,
        payload: NegotiatedPayload::text(),
        policy: None,
        ttl: Duration::from_secs(3600),
    }
}
