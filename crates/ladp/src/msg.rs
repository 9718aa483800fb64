//! `msg` and `meta` forms, the `task-init` fields, and the gateway's answers.

use crate::read::{parse_one, ParseError};
use crate::sexp::{Decimal, Sexp};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use std::time::Duration;

/// Shortest `timeout` a `task-init` may ask for, in seconds (one millisecond: shorter ones
/// would round to a zero duration).
pub const MIN_TIMEOUT_SECS: f64 = 0.001;
/// Longest `timeout` a `task-init` may ask for, in seconds (one day).
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;
/// The quorum when `task-init` names none (§9: "∑(yes·weight) ≥ 0.75 total weight").
pub const DEFAULT_QUORUM: f64 = 0.75;

/// A message that is not what its type says.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MsgError {
    /// The text did not read.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Not a `(msg …)` / `(meta …)` form of the expected shape.
    #[error("not a {expected} form: {problem}")]
    Shape {
        /// `msg`, `meta`, `task-init`.
        expected: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A field is missing, repeated, or holds a value out of its range.
    #[error("field `{field}`: {problem}")]
    Field {
        /// The field's name as written in the message (`quorum`, `epoch-ms`, …).
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

fn field_err(field: &'static str, problem: impl Into<String>) -> MsgError {
    MsgError::Field {
        field,
        problem: problem.into(),
    }
}

/// A name the gateway writes (sender, recipient, kind): a symbol when it reads back as one,
/// else a string. Readers take either, so `Msg` round-trips both ways.
fn name(s: &str) -> Sexp {
    Sexp::symbol(s).unwrap_or_else(|| Sexp::string(s))
}

/// `(msg <kind> <sender> <recipient> <epoch-ms> (data …))`.
#[derive(Debug, Clone, PartialEq)]
pub struct Msg {
    /// `task-init`, `status-request`, `synthesis`, …
    pub kind: String,
    /// Who sent it (symbol or string on the wire).
    pub sender: String,
    /// Who it is for.
    pub recipient: String,
    /// Milliseconds since the Unix epoch (non-negative).
    pub epoch_ms: i64,
    /// The items of `(data …)`, in order.
    pub data: Vec<Sexp>,
}

impl Msg {
    /// Reads one `(msg …)` form from text.
    pub fn parse(text: &str) -> Result<Msg, MsgError> {
        Msg::from_sexp(&parse_one(text)?)
    }

    /// Reads a `(msg …)` form.
    pub fn from_sexp(x: &Sexp) -> Result<Msg, MsgError> {
        let shape = |problem: &str| MsgError::Shape {
            expected: "msg",
            problem: problem.to_owned(),
        };
        let items = x.as_list().ok_or_else(|| shape("not a list"))?;
        if items.first().and_then(Sexp::as_symbol) != Some("msg") {
            return Err(shape("does not start with `msg`"));
        }
        let get = |i: usize, field: &'static str| {
            items
                .get(i)
                .ok_or_else(|| field_err(field, "missing (expected `(msg <msg-type> <sender> <recipient> <epoch-ms> (data …))`)"))
        };
        let kind = get(1, "msg-type")?
            .as_symbol()
            .ok_or_else(|| field_err("msg-type", "must be a symbol"))?;
        let sender = get(2, "sender")?
            .as_name()
            .ok_or_else(|| field_err("sender", "must be a symbol or a string"))?;
        let recipient = get(3, "recipient")?
            .as_name()
            .ok_or_else(|| field_err("recipient", "must be a symbol or a string"))?;
        let epoch_ms = match get(4, "epoch-ms")? {
            Sexp::Int(ms) if *ms >= 0 => *ms,
            _ => return Err(field_err("epoch-ms", "must be a non-negative integer")),
        };
        let data = get(5, "data")?;
        let data = match data.as_list() {
            Some([head, rest @ ..]) if head.as_symbol() == Some("data") => rest.to_vec(),
            _ => return Err(field_err("data", "must be a `(data …)` list")),
        };
        if items.len() > 6 {
            return Err(shape("nothing may follow `(data …)`"));
        }
        Ok(Msg {
            kind: kind.to_owned(),
            sender: sender.to_owned(),
            recipient: recipient.to_owned(),
            epoch_ms,
            data,
        })
    }

    /// The `(msg …)` form.
    pub fn to_sexp(&self) -> Sexp {
        Sexp::form(
            "msg",
            [
                name(&self.kind),
                name(&self.sender),
                name(&self.recipient),
                Sexp::Int(self.epoch_ms),
                Sexp::form("data", self.data.iter().cloned()),
            ],
        )
    }

    /// One line of text.
    pub fn write(&self) -> String {
        self.to_sexp().write()
    }

    /// The arguments of the one `(name …)` item of `data`; `None` if absent, an error if
    /// the field appears twice.
    pub fn field(&self, field: &'static str) -> Result<Option<&[Sexp]>, MsgError> {
        find_field(&self.data, field)
    }

    /// The single value of `(name value)`, if present.
    pub fn value(&self, field: &'static str) -> Result<Option<&Sexp>, MsgError> {
        match self.field(field)? {
            None => Ok(None),
            Some([v]) => Ok(Some(v)),
            Some(_) => Err(field_err(field, "must hold exactly one value")),
        }
    }
}

fn find_field<'a>(items: &'a [Sexp], field: &'static str) -> Result<Option<&'a [Sexp]>, MsgError> {
    let mut found = None;
    for item in items {
        if let Some([head, args @ ..]) = item.as_list() {
            if head.as_symbol() == Some(field) {
                if found.is_some() {
                    return Err(field_err(field, "given more than once"));
                }
                found = Some(args);
            }
        }
    }
    Ok(found)
}

/// `(meta <kind> …)` (`abort`, `halt`) or `(meta (key value) …)` (annotations: `uncertainty`,
/// `capsule-id`, …), told apart by whether the second item is a symbol.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    /// `abort`, `halt`, or `None` for a bare annotation block.
    pub kind: Option<String>,
    /// The items after the kind.
    pub items: Vec<Sexp>,
}

impl Meta {
    /// Reads a `(meta …)` form.
    pub fn from_sexp(x: &Sexp) -> Result<Meta, MsgError> {
        let shape = |problem: &str| MsgError::Shape {
            expected: "meta",
            problem: problem.to_owned(),
        };
        let items = x.as_list().ok_or_else(|| shape("not a list"))?;
        if items.first().and_then(Sexp::as_symbol) != Some("meta") {
            return Err(shape("does not start with `meta`"));
        }
        Ok(match items.get(1).and_then(Sexp::as_symbol) {
            Some(kind) => Meta {
                kind: Some(kind.to_owned()),
                items: items[2..].to_vec(),
            },
            None => Meta {
                kind: None,
                items: items[1..].to_vec(),
            },
        })
    }

    /// The `(meta …)` form.
    pub fn to_sexp(&self) -> Sexp {
        let kind = self.kind.as_deref().map(name);
        Sexp::form("meta", kind.into_iter().chain(self.items.iter().cloned()))
    }

    /// The `reason` string, if any.
    pub fn reason(&self) -> Option<&str> {
        match find_field(&self.items, "reason") {
            Ok(Some([v])) => v.as_str(),
            _ => None,
        }
    }

    /// `(meta abort (reason "verification-retry-exceeded") (reference <msg-id>))` (§13.2).
    pub fn abort_retry_exceeded(reference: &str) -> Meta {
        Meta {
            kind: Some("abort".into()),
            items: vec![
                reason("verification-retry-exceeded"),
                Sexp::form("reference", [name(reference)]),
            ],
        }
    }

    /// `(meta halt (reason "controller-issued-halt") (reference <id>) (cancelled n))` (§12):
    /// the answer to `halt`, `cancelled` counting the sender's tasks it stopped.
    pub fn halt_controller(reference: &str, cancelled: usize) -> Meta {
        Meta {
            kind: Some("halt".into()),
            items: vec![
                reason("controller-issued-halt"),
                Sexp::form("reference", [name(reference)]),
                Sexp::form("cancelled", [count(cancelled)]),
            ],
        }
    }
}

fn reason(text: &str) -> Sexp {
    Sexp::form("reason", [Sexp::string(text)])
}

fn count(n: usize) -> Sexp {
    Sexp::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A number in `0..=1` written as a decimal (NaN as 0, out-of-range values clamped).
fn unit(v: f64) -> Sexp {
    let v = if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) };
    Decimal::new(v).map_or(Sexp::Int(0), Sexp::Decimal)
}

/// The fields of `(msg task-init …)`: `(data (skill S) (task "…") [(policy P)]
/// [(deadline ISO-8601)] [(quorum 0..1)] [(timeout secs)])`. Other data items are ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInit {
    /// The skill to route on (symbol or string).
    pub skill: String,
    /// The task text (a string).
    pub task: String,
    /// The policy to route under, if named.
    pub policy: Option<String>,
    /// The absolute deadline, if given.
    pub deadline: Option<DateTime<Utc>>,
    /// The verification threshold, in `0..=1`, if given (else [`DEFAULT_QUORUM`] applies).
    pub quorum: Option<f64>,
    /// The relative deadline, if given: [`MIN_TIMEOUT_SECS`] to [`MAX_TIMEOUT_SECS`].
    pub timeout: Option<Duration>,
}

impl TaskInit {
    /// Reads the fields of a `task-init` message; errors name the field.
    pub fn from_msg(m: &Msg) -> Result<TaskInit, MsgError> {
        if m.kind != "task-init" {
            return Err(MsgError::Shape {
                expected: "task-init",
                problem: format!("message type is `{}`", m.kind),
            });
        }
        let skill = m
            .value("skill")?
            .ok_or_else(|| field_err("skill", "missing"))?
            .as_name()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| field_err("skill", "must be a non-empty symbol or string"))?
            .to_owned();
        let task = m
            .value("task")?
            .ok_or_else(|| field_err("task", "missing"))?
            .as_str()
            .ok_or_else(|| field_err("task", "must be a string"))?
            .to_owned();
        let policy = match m.value("policy")? {
            None => None,
            Some(v) => Some(
                v.as_name()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| field_err("policy", "must be a non-empty symbol or string"))?
                    .to_owned(),
            ),
        };
        let deadline = match m.value("deadline")? {
            None => None,
            Some(v) => Some(parse_deadline(v)?),
        };
        let quorum = match m.value("quorum")? {
            None => None,
            Some(v) => match v.as_f64() {
                Some(q) if (0.0..=1.0).contains(&q) => Some(q),
                _ => return Err(field_err("quorum", "must be a number in 0..=1")),
            },
        };
        let timeout = match m.value("timeout")? {
            None => None,
            Some(v) => match v.as_f64() {
                Some(t) if (MIN_TIMEOUT_SECS..=MAX_TIMEOUT_SECS).contains(&t) => {
                    Some(Duration::from_secs_f64(t))
                }
                _ => {
                    return Err(field_err(
                        "timeout",
                        format!(
                        "must be a number of seconds in [{MIN_TIMEOUT_SECS}, {MAX_TIMEOUT_SECS}]"
                    ),
                    ))
                }
            },
        };
        Ok(TaskInit {
            skill,
            task,
            policy,
            deadline,
            quorum,
            timeout,
        })
    }
}

/// RFC 3339 (`2025-05-01T12:00:00Z`, `…+09:00`); without an offset (`2025-05-01T12:00:00`)
/// or a date alone (`2025-05-01`, midnight) it is taken as UTC. A string or a symbol.
fn parse_deadline(v: &Sexp) -> Result<DateTime<Utc>, MsgError> {
    let bad = || {
        field_err(
            "deadline",
            "must be an ISO-8601 date-time (e.g. 2025-05-01T12:00:00Z)",
        )
    };
    let s = v.as_name().ok_or_else(bad)?;
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f") {
        return Ok(t.and_utc());
    }
    match NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        Ok(d) => d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()).ok_or_else(bad),
        Err(_) => Err(bad()),
    }
}

/// `passed` or `failed` (§4.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed.
    Passed,
    /// The check failed.
    Failed,
}

/// `yes` or `no` (§4.2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// For the proposal.
    Yes,
    /// Against it.
    No,
}

/// The common head of the gateway's answers: `(msg <kind> <sender> <recipient> <epoch-ms> …)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The gateway's name as sender (e.g. `gateway`).
    pub sender: String,
    /// Who asked.
    pub recipient: String,
    /// When the answer is written.
    pub epoch_ms: i64,
}

impl Reply {
    fn msg(&self, kind: &str, data: Vec<Sexp>) -> Msg {
        Msg {
            kind: kind.to_owned(),
            sender: self.sender.clone(),
            recipient: self.recipient.clone(),
            epoch_ms: self.epoch_ms,
            data,
        }
    }

    /// `(msg synthesis … (data (msg-id <id>) (agent <producer>) (text "…")))`: a producer's
    /// output, `msg-id` naming it for the `verify`/`vote`/`reject-proposal` that follow.
    pub fn synthesis(&self, msg_id: &str, agent: &str, text: &str) -> Msg {
        self.msg(
            "synthesis",
            vec![
                Sexp::form("msg-id", [name(msg_id)]),
                Sexp::form("agent", [name(agent)]),
                Sexp::form("text", [Sexp::string(text)]),
            ],
        )
    }

    /// `(msg verify … (data (target-msg <id>) (agent <verifier>) (result passed|failed)
    /// [(confidence c)] [(reason "…")]))` (§4.2.4); `confidence` is left out when the
    /// verifier gave none (never invented).
    pub fn verify(
        &self,
        target_msg: &str,
        agent: &str,
        result: Outcome,
        confidence: Option<f64>,
        reason_text: Option<&str>,
    ) -> Msg {
        let result = match result {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
        };
        let mut data = vec![
            Sexp::form("target-msg", [name(target_msg)]),
            Sexp::form("agent", [name(agent)]),
            Sexp::form("result", [name(result)]),
        ];
        data.extend(confidence.map(|c| Sexp::form("confidence", [unit(c)])));
        data.extend(reason_text.map(reason));
        self.msg("verify", data)
    }

    /// `(msg vote … (data (proposal <id>) (agent <id>) (weight w) (decision yes|no)))` (§4.2.6).
    pub fn vote(&self, proposal: &str, agent: &str, weight: f64, decision: Decision) -> Msg {
        let decision = match decision {
            Decision::Yes => "yes",
            Decision::No => "no",
        };
        self.msg(
            "vote",
            vec![
                Sexp::form("proposal", [name(proposal)]),
                Sexp::form("agent", [name(agent)]),
                Sexp::form("weight", [unit(weight)]),
                Sexp::form("decision", [name(decision)]),
            ],
        )
    }

    /// `(msg integration-verified … (data (target-msg <id>) (support-rate r) (quorum q)
    /// (text "…")))`: the weighted yes reached the quorum (§5.5, §9).
    pub fn integration_verified(
        &self,
        target_msg: &str,
        support: f64,
        quorum: f64,
        text: &str,
    ) -> Msg {
        self.msg(
            "integration-verified",
            vec![
                Sexp::form("target-msg", [name(target_msg)]),
                Sexp::form("support-rate", [unit(support)]),
                Sexp::form("quorum", [unit(quorum)]),
                Sexp::form("text", [Sexp::string(text)]),
            ],
        )
    }

    /// `(msg integration … (data (target-msg <id>) (text "…")))`: the output, unverified.
    pub fn integration(&self, target_msg: &str, text: &str) -> Msg {
        self.msg(
            "integration",
            vec![
                Sexp::form("target-msg", [name(target_msg)]),
                Sexp::form("text", [Sexp::string(text)]),
            ],
        )
    }

    /// `(msg reject-proposal … (data (target-msg <id>) (reason "…") (attempt n)))` (§13.1).
    pub fn reject_proposal(&self, target_msg: &str, reason_text: &str, attempt: usize) -> Msg {
        self.msg(
            "reject-proposal",
            vec![
                Sexp::form("target-msg", [name(target_msg)]),
                reason(reason_text),
                Sexp::form("attempt", [count(attempt)]),
            ],
        )
    }

    /// `(msg status … (data [(task-id "…")] (phase <phase>)))`: the answer to `status-request`.
    /// `phase` is a symbol (`synthesis`, `verification`, `integration`, `done`, `idle`, …);
    /// a phase that is not one is written as a string.
    pub fn status(&self, task_id: Option<&str>, phase: &str) -> Msg {
        let mut data: Vec<Sexp> = task_id
            .map(|t| Sexp::form("task-id", [Sexp::string(t)]))
            .into_iter()
            .collect();
        data.push(Sexp::form("phase", [name(phase)]));
        self.msg("status", data)
    }

    /// `(msg error … (data (reason "…") [(at "L:C")]))`: a refused message.
    pub fn error(&self, reason_text: &str, at: Option<(u32, u32)>) -> Msg {
        let mut data = vec![reason(reason_text)];
        data.extend(at.map(|(l, c)| Sexp::form("at", [Sexp::string(format!("{l}:{c}"))])));
        self.msg("error", data)
    }

    /// The `error` answer to text that did not read, with its position.
    pub fn parse_error(&self, e: &ParseError) -> Msg {
        self.error(&e.message, Some((e.line, e.column)))
    }

    /// A `(meta …)` answer as a message of its own, for a client reading only `msg` forms:
    /// `(msg meta … (data (meta …)))`.
    pub fn meta(&self, meta: &Meta) -> Msg {
        self.msg("meta", vec![meta.to_sexp()])
    }
}
