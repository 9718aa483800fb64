//! The gateway's answers in LADP: a task's trip as the seed's chain of verification, a
//! failure as an `error` form, `status` and `halt` answers; each `(msg <kind> gateway
//! <recipient> <epoch-ms> (data …))`.

use super::book;
use super::GATEWAY;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Json, LdpError, TaskId};
use crate::policy::votes_pass;
use crate::provenance::Vote;
use crate::proxy::Trip;
use ladp::{Decision, Meta, Msg, Outcome, Reply, Sexp};

/// The gateway's answer header to `to`, stamped now.
pub fn reply_to(to: &str) -> Reply {
    Reply {
        sender: GATEWAY.to_owned(),
        recipient: to.to_owned(),
        epoch_ms: chrono::Utc::now().timestamp_millis(),
    }
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

/// The answer to `status-request`: `(msg status … (data [(task-id "…")] (phase p)))`.
pub fn status(r: &Reply, entry: Option<&book::Entry>) -> Msg {
    match entry {
        Some(e) => r.status(Some(e.task_id.as_str()), e.phase.as_str()),
        None => r.status(None, "idle"),
    }
}

/// The answer to `halt`: `(msg meta … (data (meta halt (reason "controller-issued-halt")
/// (reference <epoch-ms of the halt>) (cancelled n))))`.
pub fn halted(r: &Reply, halt: &Msg, cancelled: usize) -> Msg {
    r.meta(&Meta::halt_controller(
        &halt.epoch_ms.to_string(),
        cancelled,
    ))
}
