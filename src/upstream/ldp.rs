//! LDP delegates (`kind = "ldp"`, the default): the one kind that speaks the gateway's own
//! protocol — a card fetched from the delegate, an upstream session per client session and
//! skill, TASK_SUBMIT in the negotiated payload mode, TASK_CANCEL.

/// An LDP delegate's calls need nothing beyond its URL and the gateway's transport.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ldp;
