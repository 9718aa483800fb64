//! The task's spans: the routing decision (INTERNAL, `ldp.*` attributes), each attempt at a
//! delegate (CLIENT: `invoke_agent {delegate}` or `chat {model}` with the GenAI attributes),
//! and each attempt's GenAI metrics. Names and versions: `crate::telemetry` (module `otel`).

use super::task::{RouteInfo, TaskCtx, TaskRun};
use crate::registry::Delegate;
use crate::telemetry::otel::{Attr, AttrValue, Kind, Trace};
use std::time::Duration;

/// What kind of call an attempt at `d` is: (operation, provider, declared model).
fn call_of(d: &Delegate) -> (&'static str, &'static str, &str) {
    d.upstream.call_kind()
}

/// `host` and `port` of a base URL (`http://host:port/…`), for `server.address`/`.port`.
fn server_of(url: &str) -> (&str, Option<i64>) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            (host, port.parse().ok())
        }
        _ => (authority, None),
    }
}

/// The routing decision that picked `picked`, as an INTERNAL span under the task's (ended
/// at once: the decision takes microseconds).
pub(crate) fn route(t: &TaskCtx<'_>, route: &RouteInfo, picked: &Delegate) {
    let name = || format!("route {}", t.task.skill).into();
    let span = t.trace.child(name, Kind::Internal, || {
        let mut a = vec![
            Attr::new("ldp.policy", t.policy.name.0.clone()),
            Attr::new("ldp.skill", t.task.skill.to_owned()),
            Attr::new("ldp.route.candidates", route.candidates as i64),
            Attr::new("ldp.route.eligible", route.eligible as i64),
            Attr::new("ldp.route.band", route.band as i64),
            Attr::new("ldp.route.pick", picked.name.clone()),
            Attr::new("ldp.route.score", route.score),
            Attr::new("ldp.route.score.quality", route.components.quality),
            Attr::new("ldp.route.score.cost", route.components.cost),
            Attr::new("ldp.route.score.latency", route.components.latency),
        ];
        for (constraint, n) in route.excluded.iter() {
            let key = format!("ldp.route.excluded.{}", constraint.as_str());
            a.push(Attr::new(key, n as i64));
        }
        a
    });
    span.end();
}

/// The CLIENT span of one attempt at `d`, under the task's.
pub(crate) fn attempt(t: &TaskCtx<'_>, d: &Delegate) -> Trace {
    let (operation, provider, model) = call_of(d);
    let name = || match operation {
        "chat" => format!("chat {model}").into(),
        _ => format!("invoke_agent {}", d.name).into(),
    };
    t.trace.child(name, Kind::Client, || {
        let (host, port) = server_of(&d.base_url);
        let mut a = vec![
            Attr::new("gen_ai.operation.name", operation),
            Attr::new("gen_ai.provider.name", provider),
            Attr::new("gen_ai.conversation.id", t.session.id.to_string()),
            Attr::new("server.address", host.to_owned()),
            Attr::new("ldp.delegate", d.name.clone()),
            Attr::new("ldp.task_id", t.task.task_id.to_string()),
            Attr::new("ldp.skill", t.task.skill.to_owned()),
        ];
        if let Some(port) = port {
            a.push(Attr::new("server.port", port));
        }
        if operation == "chat" {
            a.push(Attr::new("gen_ai.request.model", model.to_owned()));
        } else if let Some(card) = d.card() {
            a.push(Attr::new("gen_ai.agent.id", card.delegate_id.clone()));
            a.push(Attr::new("gen_ai.agent.name", card.name.clone()));
            a.push(Attr::new(
                "gen_ai.agent.version",
                card.model_version.clone(),
            ));
        }
        if t.trace.captures_content() {
            a.push(Attr::new(
                "gen_ai.input.messages",
                captured(&t.task.input.to_string()),
            ));
        }
        a
    })
}

/// Ends an attempt's span with what it came to (usage, finish reason, the output when
/// content is captured; on a failure `error.type`, and for the metric its bounded kind), and
/// counts it in the GenAI histograms of `metrics`.
pub(crate) fn attempt_ended(
    metrics: &crate::telemetry::Metrics,
    span: &Trace,
    d: &Delegate,
    run: &TaskRun,
    ended: Result<&crate::ldp::Json, (&str, &'static str)>,
    took: Duration,
) {
    let (operation, provider, model) = call_of(d);
    let (error, label) = ended.err().unwrap_or(("", ""));
    let chat = operation == "chat";
    let tokens = run
        .usage
        .as_ref()
        .filter(|_| chat)
        .map(|u| (u.prompt_tokens(), u.output_tokens));
    span.set(|| {
        let mut a = Vec::new();
        if chat {
            a.push(Attr::new("gen_ai.response.model", model.to_owned()));
        }
        if let Some((input, output)) = tokens {
            a.push(Attr::new("gen_ai.usage.input_tokens", input as i64));
            a.push(Attr::new("gen_ai.usage.output_tokens", output as i64));
        }
        let finish = run.chat.as_ref().and_then(|c| c.finish.as_ref());
        if let Some(finish) = finish.filter(|_| chat) {
            let reasons = vec![d.upstream.finish_reason(finish).to_owned().into()];
            let value = AttrValue::Array(opentelemetry::Array::String(reasons));
            a.push(Attr::new("gen_ai.response.finish_reasons", value));
        }
        if span.captures_content() {
            if let Ok(output) = ended {
                a.push(Attr::new(
                    "gen_ai.output.messages",
                    captured(&output.to_string()),
                ));
            }
        }
        a
    });
    if !error.is_empty() {
        span.fail(error);
    }
    span.end();
    metrics.gen_ai_call(operation, provider, model, label, took, tokens);
}

/// Most bytes of a prompt or output put on a span (`capture_content`): a span waits in the
/// export queue, so its size is bounded like every other thing held there.
const MAX_CAPTURED: usize = 16 * 1024;

/// `text`, cut at a character to at most [`MAX_CAPTURED`] bytes.
fn captured(text: &str) -> String {
    crate::ldp::text::cut(text, MAX_CAPTURED).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_content_is_cut_at_a_character_within_its_cap() {
        let text = "é".repeat(MAX_CAPTURED);
        let cut = captured(&text);
        assert_eq!(cut.len(), MAX_CAPTURED);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(captured("short"), "short");
    }

    #[test]
    fn server_address_and_port_are_read_from_a_base_url() {
        assert_eq!(
            server_of("http://127.0.0.1:8080/v1"),
            ("127.0.0.1", Some(8080))
        );
        assert_eq!(
            server_of("https://api.example.com/v1"),
            ("api.example.com", None)
        );
        assert_eq!(server_of("http://[::1]:9000"), ("[::1]", Some(9000)));
    }
}
