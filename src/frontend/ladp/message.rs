//! An LADP message read: the §14 cap, the reader's limits, one `(msg …)` form, a sender the
//! front end can key on, a type it answers; and why a message is refused before any task runs.

use super::book::{RateRefusal, Which, MAX_SENDER_BYTES};
use crate::ldp::error::GatewayCode;
use ladp::{Msg, MsgError, ParseError, Sexp, TaskInit};

/// Why a message is refused before any task runs (each a 4xx).
#[derive(Debug, thiserror::Error)]
pub enum LadpError {
    /// Over the §14 cap.
    #[error("message is {0} bytes, over the {max}-byte limit (§14)", max = ladp::MAX_INPUT_BYTES)]
    TooLarge(usize),
    /// The text does not read.
    #[error(transparent)]
    Parse(ParseError),
    /// It reads, but is not a message of the expected shape.
    #[error(transparent)]
    Message(MsgError),
    /// A sender too long to key the bridge's state.
    #[error("sender is over {MAX_SENDER_BYTES} bytes")]
    SenderTooLong,
    /// A message type the gateway does not answer.
    #[error("message type `{0}` is not answered by the gateway (task-init, status-request, halt)")]
    Unsupported(String),
    /// `(policy P)` names no policy.
    #[error("there is no policy '{0}'")]
    UnknownPolicy(String),
    /// The agent's rate (§14) or the bridge's bound on agents.
    #[error("{}", match .0 {
        RateRefusal::Agent(w) => format!("rate limit of this agent reached; retry after {:.3} s", w.as_secs_f64()),
        RateRefusal::Agents(_) => "this tenant has too many agents sending at once; retry later".to_owned(),
    })]
    RateLimited(RateRefusal),
}

impl LadpError {
    /// The gateway code that gives its HTTP status (400, 403, 413, 429).
    pub fn code(&self) -> GatewayCode {
        match self {
            LadpError::TooLarge(_) => GatewayCode::PayloadTooLarge,
            LadpError::Parse(_)
            | LadpError::Message(_)
            | LadpError::SenderTooLong
            | LadpError::Unsupported(_) => GatewayCode::BadRequest,
            LadpError::UnknownPolicy(_) => GatewayCode::UnknownPolicy,
            LadpError::RateLimited(_) => GatewayCode::RateLimited,
        }
    }

    /// Where in the text it is (`(at "L:C")`), when it is a place.
    pub fn at(&self) -> Option<(u32, u32)> {
        match self {
            LadpError::TooLarge(_) => Some((1, 1)),
            LadpError::Parse(e) | LadpError::Message(MsgError::Parse(e)) => {
                Some((e.line, e.column))
            }
            _ => None,
        }
    }

    /// How long to wait, for a rate limit.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            LadpError::RateLimited(RateRefusal::Agent(w)) => Some(*w),
            LadpError::RateLimited(RateRefusal::Agents(wait)) => {
                Some(wait.unwrap_or(std::time::Duration::from_secs(1)))
            }
            _ => None,
        }
    }

    /// The message's text as the reason of the `error` answer (a parse error's without its
    /// position, which `at` carries).
    pub fn reason(&self) -> String {
        match self {
            LadpError::Parse(e) | LadpError::Message(MsgError::Parse(e)) => e.message.clone(),
            other => other.to_string(),
        }
    }
}

/// A message the gateway answers.
#[derive(Debug)]
pub enum Request {
    /// `task-init`: run a task.
    TaskInit(Msg, TaskInit),
    /// `status-request`: the phase of one of the sender's tasks.
    Status(Msg),
    /// `halt`: cancel the sender's running tasks.
    Halt(Msg),
}

impl Request {
    /// The message.
    pub fn msg(&self) -> &Msg {
        match self {
            Request::TaskInit(m, _) | Request::Status(m) | Request::Halt(m) => m,
        }
    }
}

/// Reads one message: the size cap (§14), the reader's limits, one `(msg …)` form, a sender
/// the bridge can key on, a type it answers. `Err` carries the sender when it was read.
pub fn read(bytes: &[u8]) -> Result<Request, (Option<String>, LadpError)> {
    if bytes.len() > ladp::MAX_INPUT_BYTES {
        return Err((None, LadpError::TooLarge(bytes.len())));
    }
    let forms = ladp::parse_bytes(bytes, &ladp::Limits::default())
        .map_err(|e| (None, LadpError::Parse(e)))?;
    let form = match forms.as_slice() {
        [one] => one,
        [] => {
            return Err((
                None,
                parse_error(1, 1, "empty message: expected one (msg …) form"),
            ))
        }
        _ => {
            let why = "expected exactly one (msg …) form, found several";
            return Err((None, parse_error(1, 1, why)));
        }
    };
    let msg = Msg::from_sexp(form).map_err(|e| (None, LadpError::Message(e)))?;
    let sender = Some(msg.sender.clone());
    if msg.sender.len() > MAX_SENDER_BYTES {
        return Err((None, LadpError::SenderTooLong));
    }
    match msg.kind.as_str() {
        "task-init" => match TaskInit::from_msg(&msg) {
            Ok(init) => Ok(Request::TaskInit(msg, init)),
            Err(e) => Err((sender, LadpError::Message(e))),
        },
        "status-request" => Ok(Request::Status(msg)),
        "halt" => Ok(Request::Halt(msg)),
        other => Err((sender, LadpError::Unsupported(other.to_owned()))),
    }
}

fn parse_error(line: u32, column: u32, message: &str) -> LadpError {
    LadpError::Parse(ParseError {
        line,
        column,
        message: message.to_owned(),
    })
}

/// Which task a `status-request` asks about: `(task-id "…")`, `(target-msg <epoch-ms>)`, or
/// the latest.
pub fn status_target(m: &Msg) -> Result<Which<'_>, LadpError> {
    if let Some(v) = m.value("task-id").map_err(LadpError::Message)? {
        let id = v.as_name().ok_or_else(|| {
            LadpError::Message(MsgError::Field {
                field: "task-id",
                problem: "must be a symbol or a string".into(),
            })
        })?;
        return Ok(Which::Task(id));
    }
    if let Some(v) = m.value("target-msg").map_err(LadpError::Message)? {
        return match v {
            Sexp::Int(ms) => Ok(Which::Msg(*ms)),
            _ => Err(LadpError::Message(MsgError::Field {
                field: "target-msg",
                problem: "must be the <epoch-ms> of a task-init".into(),
            })),
        };
    }
    Ok(Which::Latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_their_status_code_and_place() {
        let (_, e) =
            read(b"(msg task-init a gateway 1\n  (data (skill qa) (task \"x\"))").unwrap_err();
        assert_eq!(e.code(), GatewayCode::BadRequest);
        assert_eq!(
            e.at(),
            Some((1, 1)),
            "an unclosed ( is reported where it opens"
        );
        let (_, e) = read(&vec![b' '; ladp::MAX_INPUT_BYTES + 1]).unwrap_err();
        assert_eq!(e.code(), GatewayCode::PayloadTooLarge);
        let (sender, e) = read(b"(msg agenda-init ctl gateway 1 (data))").unwrap_err();
        assert_eq!(sender.as_deref(), Some("ctl"));
        assert!(matches!(e, LadpError::Unsupported(_)), "{e}");
        let (sender, e) = read(b"(msg task-init ctl gateway 1 (data (skill qa)))").unwrap_err();
        assert_eq!(sender.as_deref(), Some("ctl"));
        assert_eq!(e.reason(), "field `task`: missing");
        assert!(matches!(
            read(b"(msg halt ctl gateway 1 (data))"),
            Ok(Request::Halt(_))
        ));
    }
}
