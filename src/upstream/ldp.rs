//! LDP delegates (`kind = "ldp"`, the default): the one kind that speaks the gateway's own
//! protocol — a card fetched from the delegate, an upstream session per client session and
//! skill, TASK_SUBMIT in the negotiated payload mode, TASK_CANCEL.

/// An LDP delegate's calls need nothing beyond its URL and the gateway's transport.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ldp;

use super::{Answered, Call, Called, Failure, Health, Outcome, Relay, Update, UpstreamError};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, Provenance};
use crate::translate::{is_mode_failure, translate_input};
use tokio::time::Instant;

impl Ldp {
    /// One exchange: the task in the upstream session and mode the call names, its input
    /// translated to that mode (a verification's as it is), streamed when the client streams
    /// and the delegate's card says it streams the skill (its TASK_UPDATEs passed on); the
    /// answer classified once.
    pub async fn call(&self, call: &Call<'_>, relay: &Relay<'_>) -> Outcome {
        let mode = call.mode;
        let translated = if call.verifying {
            Ok(call.input.clone())
        } else {
            translate_input(call.input, call.input_mode, mode)
        };
        let input = match translated {
            Ok(i) => i,
            Err(e) => {
                let reason = format!(
                    "the task input cannot be translated from {} to {mode}: {e}",
                    call.input_mode
                );
                let error = LdpError::gateway(GatewayCode::BadRequest, reason);
                return Outcome::of(
                    Called::Refused(error, None),
                    Health::Unknown,
                    Default::default(),
                );
            }
        };
        let Some(session) = call.upstream_session else {
            let e = UpstreamError::Malformed {
                url: call.base_url.to_owned(),
                reason: "no upstream session".into(),
            };
            let failure = Failure::upstream(call.told, &e);
            return Outcome::of(
                Called::Failed(Box::new(failure)),
                Health::Unknown,
                Default::default(),
            );
        };
        let upstream_env = Envelope::new(
            session.session_id.as_str(),
            call.client.from_id(),
            session.delegate_id.as_str(),
            Body::TaskSubmit {
                task_id: call.task_id.clone(),
                skill: call.skill.to_owned(),
                input,
                contract: call.contract.cloned(),
            },
            mode,
        );
        let streams = match relay {
            Relay::Updates(tell) => call
                .card
                .as_ref()
                .and_then(|c| c.capability(call.skill))
                .and_then(|cap| cap.hints.supports_streaming)
                .unwrap_or(false)
                .then_some(tell),
            Relay::Quiet | Relay::Pieces(_) => None,
        };
        let sent = Instant::now();
        let answer = match streams {
            Some(tell) => {
                let relay = |update: Envelope| {
                    if let Body::TaskUpdate { .. } = &update.body {
                        // Whether anyone still listens does not stop an LDP stream: its
                        // answer comes at its end.
                        let _ = tell(Update::Envelope(update));
                    }
                    std::future::ready(())
                };
                call.client
                    .send_stream(
                        call.base_url,
                        &upstream_env,
                        call.limit,
                        call.forward,
                        relay,
                    )
                    .await
            }
            None => {
                call.client
                    .send_hops(call.base_url, &upstream_env, call.limit, call.forward)
                    .await
            }
        };
        let took = sent.elapsed();
        let mut notes = Vec::new();
        // What the delegate reports beside its output is capped before anything keeps it.
        let answer = answer.map(|mut a| {
            if let Some(note) = crate::provenance::bounds::cap_answer(&mut a.body) {
                tracing::info!(delegate = %call.name, %note, "oversized provenance");
                notes.push(note);
            }
            a
        });
        let (called, health) = classify(answer, call, mode, took);
        Outcome {
            notes,
            ..Outcome::of(called, health, took)
        }
    }
}

/// Classifies the delegate's answer to a TASK_SUBMIT sent in `mode` after `took`.
fn classify(
    answer: Result<Envelope, UpstreamError>,
    call: &Call<'_>,
    mode: PayloadMode,
    took: std::time::Duration,
) -> (Called, Health) {
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            let health = Health::of_error(&e, Some(took));
            return (
                Called::Failed(Box::new(Failure::upstream(call.told, &e))),
                health,
            );
        }
    };
    match answer.body {
        Body::TaskResult {
            output, provenance, ..
        } => (answered(output, provenance), Health::Answered(took)),
        Body::TaskFailed { error, .. }
            if error.code == "SESSION_NOT_FOUND" && call.may_rehandshake =>
        {
            (Called::SessionLost, Health::Unknown)
        }
        Body::TaskFailed { error, .. } if is_mode_failure(&error, mode) => {
            (Called::ModeFailed(error), Health::Answered(took))
        }
        Body::TaskFailed { error, .. } if error.retryable => {
            let failure = task_failed(call.told, error);
            (
                Called::Failed(Box::new(failure)),
                Health::Faulted(Some(took)),
            )
        }
        Body::TaskFailed { error, .. } => (Called::Refused(error, None), Health::Answered(took)),
        other => {
            let e = UpstreamError::Unexpected {
                url: call.base_url.to_owned(),
                got: other.message_type().as_str(),
            };
            let failure = Failure {
                retryable: true,
                ..Failure::upstream(call.told, &e)
            };
            (Called::Failed(Box::new(failure)), Health::Faulted(None))
        }
    }
}

/// A result: the output and the delegate's provenance (its cost, if it says).
fn answered(output: crate::ldp::Json, provenance: Option<Provenance>) -> Called {
    Called::Answered(Box::new(Answered {
        output,
        provenance,
        ..Answered::default()
    }))
}

/// The delegate's own retryable TASK_FAILED: its code and category are kept, its message
/// goes to the log and the ledger only.
fn task_failed(told: &str, mut error: LdpError) -> Failure {
    let message = match super::code_shown(&error.code) {
        Some(code) => format!("delegate '{told}' failed the task ({code})"),
        None => format!("delegate '{told}' failed the task"),
    };
    let detail = std::mem::replace(&mut error.message, message);
    Failure {
        error,
        reason: "task_failed",
        retryable: true,
        detail,
        pause: None,
    }
}
