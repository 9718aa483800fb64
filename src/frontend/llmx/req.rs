//! One `REQ` as a task: its skill from `exp`, its deadline from `pr`, its policy; and the
//! task's trip as the `OBS`/`BLK` block answering it.

use super::inbound::Job;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, DelegationContract, Json, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use crate::registry::Registry;
use crate::routing::Picked;
use llmx::{Block, Body as LlmxBody, Fields, Number, Value};
use std::time::Duration;

/// Most entries of a `BLK`'s `a`.
pub const MAX_ALTERNATIVES: usize = 16;
/// Most skills looked at for a `BLK`'s `a` (each is a routing explanation).
const MAX_SKILLS_EXPLAINED: usize = 64;
/// Deepest JSON output rendered as LLMX values (below the reader's `MAX_DEPTH`, leaving room
/// for the block, `c` and `out`); deeper parts are written as their JSON text.
const MAX_OUTPUT_DEPTH: usize = llmx::MAX_DEPTH - 4;

/// The deadline classes of `pr` 1–4; `pr` 5 is the upstream task timeout.
pub const DEADLINE_CLASSES: [Duration; 4] = [
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(120),
];

/// The deadline of a `REQ` of priority `pr` (1–5): its class, at most `task_timeout`.
pub fn deadline_for(pr: u8, task_timeout: Duration) -> Duration {
    let class = match pr {
        1..=4 => DEADLINE_CLASSES[usize::from(pr - 1)],
        _ => task_timeout,
    };
    class.min(task_timeout)
}

/// What a REQ asks for once resolved against the fleet.
fn skill_for(registry: &Registry, experts: &[String]) -> Option<String> {
    let index = registry.index();
    for e in experts {
        if !index.offers(e).is_empty() {
            return Some(e.clone());
        }
        let delegate = registry.get(e).or_else(|| {
            registry
                .snapshot()
                .iter()
                .find(|d| d.card().is_some_and(|c| c.delegate_id == *e))
                .cloned()
        });
        let Some(d) = delegate else { continue };
        let Some(card) = d.card() else { continue };
        let own = card.capabilities.iter().find(|c| {
            let offers = index.offers(&c.name);
            offers.len() == 1 && offers[0].delegate.name == d.name
        });
        if let Some(c) = own.or_else(|| card.capabilities.first()) {
            return Some(c.name.clone());
        }
    }
    None
}

/// A REQ's answer.
pub struct Answered {
    /// The blocks answering it, each carrying its `ai`.
    pub blocks: Vec<Block>,
    /// The gateway's refusal before the task ran (tenant rate limit, signing), for the status
    /// of a lone REQ's answer.
    pub refusal: Option<Refusal>,
    /// The task's id, when one ran (its ledger row's).
    pub task_id: Option<TaskId>,
}

/// Runs `job` for `ctx`'s tenant as task `task_id` and answers it.
pub async fn run(
    proxy: &Proxy,
    registry: &Registry,
    ctx: &RequestCtx,
    job: &Job,
    task_id: TaskId,
    task_timeout: Duration,
) -> Answered {
    let mut ctx = ctx.clone();
    if let Some(p) = &job.policy {
        ctx.policy = Some(p.clone());
    }
    if let Some(p) = ctx.policy.as_deref() {
        let set = proxy.policies();
        if set.get(p).is_none() {
            let allowed = &ctx.tenant.policies;
            let a: Vec<String> = set
                .policies
                .iter()
                .map(|q| q.name.0.clone())
                .filter(|n| allowed.is_empty() || allowed.contains(n))
                .take(MAX_ALTERNATIVES)
                .collect();
            let why = format!("there is no policy '{p}'");
            return Answered {
                blocks: vec![blk(&job.id, &why, &a, GatewayCode::UnknownPolicy)],
                refusal: None,
                task_id: None,
            };
        }
    }
    let Some(skill) = skill_for(registry, &job.request.experts) else {
        let why = match job.request.experts.as_slice() {
            [] => "REQ names no expert (exp): give a skill or a delegate".to_owned(),
            e => format!("no delegate offers or is named {}", e.join(", ")),
        };
        let a = qualifying(proxy, registry, &ctx, None, None);
        return Answered {
            blocks: vec![blk(&job.id, &why, &a, GatewayCode::NoEligibleDelegate)],
            refusal: None,
            task_id: None,
        };
    };
    let deadline = chrono::Utc::now()
        + chrono::Duration::from_std(deadline_for(job.request.priority, task_timeout))
            .unwrap_or_else(|_| chrono::Duration::seconds(120));
    let contract = DelegationContract {
        contract_id: format!("llmx-{task_id}"),
        policy: Default::default(),
        deadline: Some(deadline.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        extra: Default::default(),
    };
    let task = IngressTask {
        ingress: Ingress::Llmx,
        task_id: task_id.clone(),
        skill: &skill,
        input: Json::from(serde_json::Value::String(job.input.clone())),
        chat: None,
        contract: Some(contract),
        quorum: None,
        keep_rounds: false,
        ledger_input: None,
    };
    match proxy.ingress_task(&ctx, task, None).await {
        Ok(trip) => Answered {
            blocks: vec![answer(proxy, registry, &ctx, &job.id, &skill, &trip)],
            refusal: None,
            task_id: Some(trip.task_id),
        },
        Err(refusal) => {
            let (why, a, code) = match &refusal {
                Refusal::RateLimited { scope, retry_after } => (
                    format!("{} rate limit reached", scope.as_str()),
                    vec![format!(
                        "retry after {} s",
                        retry_after.as_secs_f64().ceil().max(1.0)
                    )],
                    GatewayCode::RateLimited,
                ),
                Refusal::Unauthenticated(m) => {
                    (m.clone(), Vec::new(), GatewayCode::Unauthenticated)
                }
                Refusal::BadRequest(m) => (m.clone(), Vec::new(), GatewayCode::BadRequest),
                Refusal::Unavailable(m) => (m.clone(), Vec::new(), GatewayCode::Unavailable),
            };
            Answered {
                blocks: vec![blk(&job.id, &why, &a, code)],
                refusal: Some(refusal),
                task_id: None,
            }
        }
    }
}

/// The trip as one answer block.
fn answer(
    proxy: &Proxy,
    registry: &Registry,
    ctx: &RequestCtx,
    id: &str,
    skill: &str,
    trip: &Trip,
) -> Block {
    let mut prov: Fields = vec![
        ("task".into(), Value::str(trip.task_id.as_str())),
        ("skill".into(), Value::str(skill)),
        ("policy".into(), Value::str(trip.policy.name.0.as_str())),
    ];
    if let Some(d) = &trip.delegate {
        prov.push(("delegate".into(), Value::str(d.client_name().as_str())));
    }
    match &trip.reply.body {
        Body::TaskResult {
            output, provenance, ..
        } => {
            if let Some(p) = provenance {
                prov.push(("delegate_id".into(), Value::str(p.produced_by.as_str())));
                prov.push(("model".into(), Value::str(p.model_version.as_str())));
                if let Some(c) = p.confidence.and_then(Number::from_f64) {
                    prov.push(("confidence".into(), Value::Number(c)));
                }
                if let Some(c) = p.cost_usd.and_then(Number::from_f64) {
                    prov.push(("cost_usd".into(), Value::Number(c)));
                }
            }
            let out = match output.to_value() {
                Ok(v) => from_json(&v, 0),
                Err(_) => Value::str(output.get()),
            };
            Block::obs(Some(id), vec![("out".into(), out)], None).with("x_prov", Value::Map(prov))
        }
        Body::TaskFailed { error, .. } => {
            let code = GatewayCode::from_wire(&error.code);
            let refused = matches!(
                code,
                Some(
                    GatewayCode::NoEligibleDelegate
                        | GatewayCode::BudgetExceeded
                        | GatewayCode::TrustViolation
                        | GatewayCode::UnknownPolicy
                        | GatewayCode::RateLimited
                        | GatewayCode::SessionLimit
                        | GatewayCode::LoopDetected
                )
            );
            if refused {
                let exclude = (code == Some(GatewayCode::NoEligibleDelegate)).then_some(skill);
                let policy = trip.policy.name.0.as_str();
                let a = qualifying(proxy, registry, ctx, Some(policy), exclude);
                let mut b = blk(
                    id,
                    &error.message,
                    &a,
                    code.unwrap_or(GatewayCode::Internal),
                );
                b = b.with("x_prov", Value::Map(prov));
                b
            } else {
                Block::obs(Some(id), Vec::new(), Some(&error.message))
                    .with("x_code", Value::str(error.code.as_str()))
                    .with("x_prov", Value::Map(prov))
            }
        }
        other => Block::obs(
            Some(id),
            Vec::new(),
            Some(&format!(
                "unexpected {} for a task",
                other.message_type().as_str()
            )),
        ),
    }
}

/// `BLK:{ai,w,a,esc:false,x_code}`.
fn blk(id: &str, why: &str, a: &[String], code: GatewayCode) -> Block {
    let mut b = Block::blk(why, a, Some(false)).with("x_code", Value::str(code.as_str()));
    if let LlmxBody::Map(f) = &mut b.body {
        f.insert(0, ("ai".into(), Value::str(id)));
    }
    b
}

/// The skills a REQ of `ctx`'s tenant would be served now under `policy` (the one selection
/// would use when `None`), but `exclude`: each an `exp` that would route.
fn qualifying(
    proxy: &Proxy,
    registry: &Registry,
    ctx: &RequestCtx,
    policy: Option<&str>,
    exclude: Option<&str>,
) -> Vec<String> {
    let index = registry.index();
    let policy = policy.or(ctx.policy.as_deref());
    let domain = ctx
        .tenant
        .trust_domains
        .as_ref()
        .and_then(|d| d.first())
        .map(String::as_str);
    let mut out = Vec::new();
    for skill in index.skills().into_iter().take(MAX_SKILLS_EXPLAINED) {
        if Some(skill) == exclude {
            continue;
        }
        let Ok(e) = proxy.explain(skill, policy, Some(&ctx.tenant.name), domain) else {
            continue;
        };
        if matches!(e.pick, Picked::Delegate(_)) {
            out.push(skill.to_owned());
            if out.len() == MAX_ALTERNATIVES {
                break;
            }
        }
    }
    out
}

/// A delegate's JSON output as an LLMX value: objects whose keys are all identifiers become
/// maps, arrays lists, numbers numbers; what LLMX cannot say as is (other keys, exponents,
/// nesting past [`MAX_OUTPUT_DEPTH`]) is its JSON text; `null` is the bare word `null`. A
/// string longer than a reader takes ([`llmx::MAX_STRING_BYTES`]) is a list of its parts.
fn from_json(v: &serde_json::Value, depth: usize) -> Value {
    use serde_json::Value as J;
    let text = || string(v.to_string());
    match v {
        J::Null => Value::Symbol("null".into()),
        J::Bool(b) => Value::Bool(*b),
        J::String(s) => string(s.clone()),
        J::Number(n) => Number::parse(&n.to_string()).map_or_else(text, Value::Number),
        _ if depth >= MAX_OUTPUT_DEPTH => text(),
        J::Array(items) => Value::List(items.iter().map(|i| from_json(i, depth + 1)).collect()),
        J::Object(m) if m.keys().all(|k| llmx::is_ident(k)) => Value::Map(
            m.iter()
                .map(|(k, v)| (k.clone(), from_json(v, depth + 1)))
                .collect(),
        ),
        J::Object(_) => text(),
    }
}

/// `s` as a string value, or as a list of parts a reader takes when it is longer (each at
/// most [`llmx::MAX_STRING_BYTES`] once escaped, cut between characters).
fn string(s: String) -> Value {
    // Escaping at most doubles a byte (`\n`, `\"`) but for control characters (`\u00XX`, 6).
    const PART: usize = llmx::MAX_STRING_BYTES / 6;
    if s.len() <= PART {
        return Value::Str(s);
    }
    let mut parts = Vec::with_capacity(s.len() / PART + 1);
    let mut rest = s.as_str();
    while !rest.is_empty() {
        let part = crate::ldp::text::cut(rest, PART);
        parts.push(Value::str(part));
        rest = &rest[part.len()..];
    }
    Value::List(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmx::Header;

    #[test]
    fn priorities_map_to_deadline_classes_within_the_task_timeout() {
        let t = Duration::from_secs(90);
        let got: Vec<u64> = (1..=5).map(|p| deadline_for(p, t).as_secs()).collect();
        assert_eq!(got, [10, 30, 60, 90, 90]);
        assert_eq!(deadline_for(5, Duration::from_secs(300)).as_secs(), 300);
    }

    #[test]
    fn json_output_becomes_llmx_values_or_its_text() {
        let v = serde_json::json!({"text": "hi", "n": 1.5, "ok": true, "x": null, "l": [1, "a"]});
        let got = from_json(&v, 0);
        let mut s = String::new();
        llmx::write_block(&mut s, &Block::map("OBS", vec![("c".into(), got)]));
        assert_eq!(
            s,
            "OBS:{c:{l:[1,\"a\"],n:1.5,ok:true,text:\"hi\",x:null}}\n"
        );
        let odd = serde_json::json!({"a b": 1e300});
        assert_eq!(from_json(&odd, 0), Value::str(odd.to_string()));
        // A string a reader would refuse is written as parts it takes.
        let long = "é\n".repeat(llmx::MAX_STRING_BYTES);
        let Value::List(parts) = from_json(&serde_json::Value::String(long.clone()), 0) else {
            panic!("not split");
        };
        let joined: String = parts.iter().filter_map(Value::as_str).collect();
        assert_eq!(joined, long);
        let m = llmx::Message {
            header: Header::new("g", "c", 1),
            blocks: vec![Block::list("OBS", parts)],
        };
        assert!(llmx::parse(&llmx::write(&m)).is_ok());
    }
}
