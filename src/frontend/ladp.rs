//! The LADP bridge's translation (seed `004_…`, LADP v1.9): a `(msg …)` s-expression in, read
//! by the `ladp` crate; a `task-init` as one task (skill, text, policy, deadline, quorum); the
//! task's trip back as the seed's chain of verification (`synthesis`, `verify` + `vote` per
//! verifier, `integration-verified` or `reject-proposal` per round, `meta abort` after the
//! retry limit), or `synthesis` then `integration` without `[verify]`.
//!
//! Choices where the seed is silent (the `ladp` crate lists the reader's):
//! - Every answer is a `(msg <kind> gateway <sender> <epoch-ms> (data …))` form, one per line;
//!   a `(meta …)` answer rides inside one as `(msg meta … (data (meta abort|halt …)))`.
//! - A round's proposal id (`msg-id`, `target-msg`, `proposal`, `reference`) is
//!   `<task-id>-r<round>`. A `task-init` is known by its `<epoch-ms>`.
//! - `status-request` may name `(task-id "…")` or `(target-msg <epoch-ms of the task-init>)`,
//!   else it asks about the sender's latest task; the phase is `running`, `done`, `failed`, or
//!   `idle` when the gateway remembers no task of the sender.
//! - A failure other than the verification retry limit (no delegate, budget, cancel, …) ends
//!   the answer with `(msg error … (data (reason "<CODE>: <message>") (task-id "…")))`.
//! - A vote's `weight` is the verifier's weight (its quality at the verify skill); the
//!   quorum is reached when the weighted yes is at least `quorum` of the round's total weight
//!   and some verifier said yes. A `quorum` below the policy's `[verify] threshold` is raised
//!   to it: a client may ask for more agreement than the operator's, never less.
//! - The recipient of a message is not checked: the gateway answers whatever it is called.

pub mod book;

pub use book::{LadpState, Phase, RateRefusal, Which, MAX_SENDER_BYTES};

use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, DelegationContract, Json, LdpError, TaskId};
use crate::policy::votes_pass;
use crate::provenance::{Ingress, Vote};
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use ladp::{Decision, Meta, Msg, MsgError, Outcome, ParseError, Reply, Sexp, TaskInit};

/// The gateway's name as the sender of its answers.
pub const GATEWAY: &str = "gateway";
/// The recipient of an answer to a message whose sender could not be read.
pub const UNKNOWN_SENDER: &str = "unknown";

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

/// The gateway's answer header to `to`, stamped now.
pub fn reply_to(to: &str) -> Reply {
    Reply {
        sender: GATEWAY.to_owned(),
        recipient: to.to_owned(),
        epoch_ms: chrono::Utc::now().timestamp_millis(),
    }
}

/// Runs `init` as task `task_id` of `ctx`'s tenant (the policy, when named, already set in
/// `ctx`): its text as the input, its deadline and timeout (the earlier) as the contract's
/// deadline, its quorum as a raise of the policy's verification threshold, every round kept.
pub async fn run(
    proxy: &Proxy,
    ctx: &RequestCtx,
    init: &TaskInit,
    task_id: TaskId,
) -> Result<Trip, Refusal> {
    let task = IngressTask {
        ingress: Ingress::Ladp,
        task_id,
        skill: &init.skill,
        input: Json::from(serde_json::Value::String(init.task.clone())),
        chat: None,
        contract: contract(init, chrono::Utc::now()),
        quorum: init.quorum,
        keep_rounds: true,
        ledger_input: None,
    };
    proxy.ingress_task(ctx, task, None).await
}

/// The contract of a `task-init` with a `deadline` or a `timeout`: the earlier of the two.
fn contract(init: &TaskInit, now: chrono::DateTime<chrono::Utc>) -> Option<DelegationContract> {
    let by_timeout = init
        .timeout
        .and_then(|t| chrono::Duration::from_std(t).ok())
        .and_then(|t| now.checked_add_signed(t));
    let deadline = match (init.deadline, by_timeout) {
        (Some(a), Some(b)) => a.min(b),
        (Some(d), None) | (None, Some(d)) => d,
        (None, None) => return None,
    };
    Some(DelegationContract {
        contract_id: String::new(),
        policy: Default::default(),
        deadline: Some(deadline.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        extra: Default::default(),
    })
}

/// A task's answer in LADP: the forms, and the failure it ended with (its code gives the
/// HTTP status), if any.
#[derive(Debug)]
pub struct Answer {
    /// The `msg` forms, in order.
    pub forms: Vec<Msg>,
    /// The task's failure.
    pub failed: Option<LdpError>,
}

impl Answer {
    /// One form a line.
    pub fn write(&self) -> String {
        let mut out = String::new();
        for m in &self.forms {
            out.push_str(&m.write());
            out.push('\n');
        }
        out
    }
}

/// The proposal id of round `round` of `task_id`.
pub fn proposal_id(task_id: &TaskId, round: usize) -> String {
    format!("{task_id}-r{round}")
}

/// The trip of a `task-init` as LADP forms to `r`'s recipient. `quorum` is the task's own,
/// which raises the policy's `[verify] threshold` and never lowers it.
pub fn answer(trip: &Trip, r: &Reply, quorum: Option<f64>) -> Answer {
    let mut forms = Vec::new();
    let (result, failed) = match &trip.reply.body {
        Body::TaskResult { output, .. } => (Some(text(output)), None),
        Body::TaskFailed { error, .. } => (None, Some(error.clone())),
        other => {
            let why = format!("unexpected {} for a task", other.message_type().as_str());
            (None, Some(LdpError::gateway(GatewayCode::Internal, why)))
        }
    };
    if trip.rounds.is_empty() {
        // Not verified (no `[verify]`, or not sampled): the producer's output, integrated.
        if let Some(out) = &result {
            let id = proposal_id(&trip.task_id, 1);
            let agent = trip.delegate.as_ref().map(|d| d.client_name());
            forms.push(r.synthesis(&id, agent.as_deref().unwrap_or(GATEWAY), out));
            forms.push(r.integration(&id, out));
        }
    } else {
        // The threshold the rounds were judged by: the policy's, raised by the task's own.
        let quorum = match trip.policy.verify.as_ref() {
            Some(v) => v.threshold_for(quorum),
            None => quorum.unwrap_or(ladp::DEFAULT_QUORUM),
        };
        let last = trip.rounds.len();
        for (i, (producer, output)) in trip.rounds.iter().enumerate() {
            let round = i + 1;
            let id = proposal_id(&trip.task_id, round);
            forms.push(r.synthesis(&id, producer, &text(output)));
            let (mut yes, mut total) = (0.0, 0.0);
            let votes = trip.votes.iter().zip(&trip.reasons).zip(&trip.voters);
            for ((v, reason), voter) in
                votes.filter(|((v, _), _)| usize::try_from(v.round) == Ok(round))
            {
                total += v.weight;
                if v.passed {
                    yes += v.weight;
                }
                forms.extend(ballot(r, &id, v, voter, reason.as_deref()));
            }
            let support = if total > 0.0 { yes / total } else { 0.0 };
            match (&result, round == last) {
                (Some(out), true) => {
                    forms.push(r.integration_verified(&id, support, quorum, out));
                }
                _ if total > 0.0 && !votes_pass(yes, total, quorum) => {
                    let why = format!(
                        "weighted yes {yes:.2} of {total:.2} ({support:.2}) is below the quorum {quorum}"
                    );
                    forms.push(r.reject_proposal(&id, &why, round));
                }
                // The round decided nothing (no vote, cancelled): the error says why.
                _ => {}
            }
        }
        if failed
            .as_ref()
            .is_some_and(|e| e.code == GatewayCode::VerificationFailed.as_str())
        {
            let reference = proposal_id(&trip.task_id, last);
            forms.push(r.meta(&Meta::abort_retry_exceeded(&reference)));
            return Answer { forms, failed };
        }
    }
    if let Some(e) = &failed {
        forms.push(task_error(r, &trip.task_id, e));
    }
    Answer { forms, failed }
}

/// One verifier's `verify` and `vote` on proposal `id`, the verifier named `voter` (as
/// clients are told of it, never its address).
fn ballot(r: &Reply, id: &str, v: &Vote, voter: &str, reason: Option<&str>) -> [Msg; 2] {
    let (outcome, decision) = match v.passed {
        true => (Outcome::Passed, Decision::Yes),
        false => (Outcome::Failed, Decision::No),
    };
    [
        r.verify(id, voter, outcome, v.confidence, reason),
        r.vote(id, voter, v.weight, decision),
    ]
}

/// `(msg error … (data (reason "<CODE>: <message>") (task-id "…")))`: a task that failed.
pub fn task_error(r: &Reply, task_id: &TaskId, e: &LdpError) -> Msg {
    let mut m = r.error(&format!("{}: {}", e.code, e.message), None);
    m.data
        .push(Sexp::form("task-id", [Sexp::string(task_id.as_str())]));
    m
}

/// An output as text: a JSON string as itself, anything else as its JSON text.
fn text(output: &Json) -> String {
    output
        .as_string()
        .unwrap_or_else(|| output.get().to_owned())
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

/// The answer to `status-request`: `(msg status … (data [(task-id "…")] (phase p)))`.
pub fn status(r: &Reply, entry: Option<&book::Entry>) -> Msg {
    match entry {
        Some(e) => r.status(Some(e.task_id.as_str()), e.phase.as_str()),
        None => r.status(None, "idle"),
    }
}

/// Cancels the tasks `ids` of `tenant` (a `halt`); how many were stopped.
pub async fn halt(proxy: &Proxy, tenant: &str, ids: &[TaskId]) -> usize {
    let mut stopped = 0;
    for id in ids {
        if proxy.cancel_ingress_task(tenant, Ingress::Ladp, id).await {
            stopped += 1;
        }
    }
    stopped
}

/// The answer to `halt`: `(msg meta … (data (meta halt (reason "controller-issued-halt")
/// (reference <epoch-ms of the halt>) (cancelled n))))`.
pub fn halted(r: &Reply, halt: &Msg, cancelled: usize) -> Msg {
    r.meta(&Meta::halt_controller(
        &halt.epoch_ms.to_string(),
        cancelled,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn init(deadline: Option<&str>, timeout: Option<u64>) -> TaskInit {
        TaskInit {
            skill: "qa".into(),
            task: "t".into(),
            policy: None,
            deadline: deadline.map(|d| d.parse().unwrap()),
            quorum: None,
            timeout: timeout.map(Duration::from_secs),
        }
    }

    #[test]
    fn the_earlier_of_deadline_and_timeout_is_the_contract_s_deadline() {
        let now: chrono::DateTime<chrono::Utc> = "2025-05-01T12:00:00Z".parse().unwrap();
        let d = |i: &TaskInit| contract(i, now).and_then(|c| c.deadline);
        assert_eq!(d(&init(None, None)), None);
        assert_eq!(
            d(&init(Some("2025-05-01T12:00:30Z"), Some(60))).as_deref(),
            Some("2025-05-01T12:00:30.000Z")
        );
        assert_eq!(
            d(&init(Some("2025-05-01T13:00:00Z"), Some(60))).as_deref(),
            Some("2025-05-01T12:01:00.000Z")
        );
        assert_eq!(
            d(&init(None, Some(5))).as_deref(),
            Some("2025-05-01T12:00:05.000Z")
        );
    }

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
