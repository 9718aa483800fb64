//! The LLMX bridge's translation (seed `003_…`, LLMX v1.0): a message's `REQ` blocks (with
//! the message's `CTX` and `PLAN`) as tasks, and each task's trip back as LLMX answer blocks.
//!
//! Reading and writing are the `llmx` crate's; this file decides what a message asks of the
//! gateway and what it is answered:
//!
//! - `HEADER` is required (its `t` is not checked: `ALL`, the gateway's id or any name); its
//!   `s` must rise per sender `f` of the tenant (a repeat is a replay), remembered in a
//!   tenant-fair table (`[llmx] max_sender_bytes`, [`crate::fair`]: a tenant over its share
//!   forgets its least recently heard senders first, never another tenant's). The gateway's
//!   answers to a sender are numbered from 1 per tenant and sender.
//! - Each `REQ` is one task. Its skill is the first `exp` entry that is a skill some delegate
//!   offers, or else names a registered delegate (registry name or card `delegate_id`): then
//!   the first of that delegate's skills no other delegate offers, else its first skill. The
//!   policy chooses among the delegates offering that skill (routing has no way to pin one
//!   delegate): naming a delegate with a skill of its own reaches that delegate.
//! - The task's input is the objective `o`, then the message's `CTX` and `PLAN` blocks as
//!   LLMX lines (every `REQ` of a message shares them, as §6.2 sends them together).
//! - `pr` is a deadline class ([`deadline_for`]): 1 → 10 s, 2 → 30 s, 3 → 60 s, 4 → 120 s,
//!   5 → `upstream.task_timeout`, each at most `upstream.task_timeout`; sent as the task's
//!   contract `deadline` (RFC 3339), which routing and the task's timeout honour.
//! - The policy: the REQ's `x_policy`, else the `x-ldp-policy` header, else the tenant's.
//! - Each `REQ` is answered with blocks carrying its reference `ai` (its `i`, else `R<n>`, its
//!   place among the message's REQs): `OBS:{ai,s:OK,c:{out:…},x_prov:{…}}` for a result;
//!   `BLK:{ai,w,a,esc:false,…}` for a refusal (no eligible delegate, budget, trust, limits),
//!   `a` listing the skills that would be served now under the same policy (for an unknown
//!   policy: the policies there are); `OBS` with `s:ERR` for a task that ran and failed.
//! - Unknown block types get `RES:{o:"WARN",…}` (§7.3); `X_` blocks are ignored (§8.1); other
//!   standard blocks (ACT, OBS, …) are not the gateway's to act on and get a WARN too.

use crate::fair::{Changed, FairTable, Kept, TableStats};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, DelegationContract, Json, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use crate::registry::Registry;
use crate::routing::Picked;
use llmx::{kind, Block, Body as LlmxBody, Fields, Header, Limits, Number, ParseError, Value};
use std::collections::HashSet;
use std::time::Duration;

/// Most `REQ` blocks in one message (each is a task run at once).
pub const MAX_REQS: usize = 16;
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

/// What the bridge remembers of one sender of a tenant: the last sequence number it sent,
/// and the last the gateway numbered an answer to it with.
#[derive(Debug, Default)]
struct Peer {
    last_in: Option<u64>,
    sent: u64,
}

impl Kept<String> for Peer {
    fn weight(&self, from: &String) -> usize {
        from.len() + std::mem::size_of::<Peer>()
    }
}

/// The bridge's per-process state: for each tenant's sender, its last sequence number and
/// the gateway's own numbering of its answers to it, in one tenant-fair table.
pub struct LlmxState {
    peers: FairTable<String, Peer>,
}

impl Default for LlmxState {
    fn default() -> Self {
        LlmxState::new(&crate::config::LlmxConfig::default())
    }
}

impl LlmxState {
    /// The state for `config`.
    pub fn new(config: &crate::config::LlmxConfig) -> LlmxState {
        let bytes = usize::try_from(config.max_sender_bytes).unwrap_or(usize::MAX);
        LlmxState {
            peers: FairTable::new(bytes, None),
        }
    }

    /// Accepts `seq` from `tenant`'s sender `from` if it is above the last one accepted.
    pub fn check_seq(&self, tenant: &str, from: &str, seq: u64) -> Result<(), llmx::SeqError> {
        if from.len() > llmx::MAX_SENDER_BYTES {
            return Err(llmx::SeqError::SenderTooLong);
        }
        let new = || Some((from.to_owned(), Peer::default()));
        let checked = self.peers.change(tenant, from, new, |p| match p.last_in {
            Some(last) if seq <= last => Err(llmx::SeqError::NotIncreasing {
                sender: from.to_owned(),
                last,
                got: seq,
            }),
            _ => {
                p.last_in = Some(seq);
                Ok(())
            }
        });
        match checked {
            Changed::Kept(checked, _) => checked,
            // Never for entries this small (a refusal needs an entry over its tenant's
            // share): taken as a first message is.
            Changed::Absent | Changed::Refused(..) => Ok(()),
        }
    }

    /// The gateway's next sequence number for an answer to `tenant`'s sender `to` (rising
    /// from 1 per tenant and sender; a sender too long to remember is answered with 1).
    pub fn next_seq(&self, tenant: &str, to: &str) -> u64 {
        if to.len() > llmx::MAX_SENDER_BYTES {
            return 1;
        }
        let new = || Some((to.to_owned(), Peer::default()));
        match self.peers.change(tenant, to, new, |p| {
            p.sent += 1;
            p.sent
        }) {
            Changed::Kept(n, _) => n,
            Changed::Absent | Changed::Refused(..) => 1,
        }
    }

    /// The table's figures (its metrics).
    pub fn stats(&self) -> TableStats {
        self.peers.stats()
    }
}

/// Why a message is refused whole, answered `RES:{o:"NACK",msg:"…"}` (§7.2).
#[derive(Debug, thiserror::Error)]
pub enum Nack {
    /// Not LLMX, or a `REQ` without its required fields, or over a bound of the reader.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Over the bridge's byte limit.
    #[error("message of {got} bytes is over the limit of {limit}")]
    TooLarge {
        /// Its size.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// `s` not above the sender's last one.
    #[error(transparent)]
    Sequence(#[from] llmx::SeqError),
}

/// A message read and checked: what to run and what to warn about.
#[derive(Debug)]
pub struct Inbound {
    /// The sender's header (answers go back to `f`, in batch `b`).
    pub header: Header,
    /// The REQs, in order.
    pub jobs: Vec<Job>,
    /// `RES:{o:"WARN",…}` for each block not acted on.
    pub warnings: Vec<Block>,
}

/// One `REQ` as a task to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// Its reference (`i`, else `R<n>`), the `ai` of its answer.
    pub id: String,
    /// The request.
    pub request: llmx::Request,
    /// The REQ's `x_policy`.
    pub policy: Option<String>,
    /// The delegate's input: the objective, then the message's CTX and PLAN lines.
    pub input: String,
}

/// The reader's bounds for a body the server accepted (at most `body_limit` bytes).
pub fn limits(body_limit: usize) -> Limits {
    Limits {
        max_input_bytes: body_limit.min(llmx::MAX_INPUT_BYTES),
        ..Limits::default()
    }
}

/// The header of a message that could not be read whole, if its first line is one (so a NACK
/// goes back to its sender, in its batch).
pub fn salvage_header(text: &str) -> Option<Header> {
    let first = text.trim_start().lines().next()?;
    llmx::parse(first).ok().map(|m| m.header)
}

/// Reads `text` for `tenant`: the grammar, the REQs, the sequence number (recorded only for a
/// message accepted whole).
pub fn read(text: &str, limits: &Limits, state: &LlmxState, tenant: &str) -> Result<Inbound, Nack> {
    if text.len() > limits.max_input_bytes {
        return Err(Nack::TooLarge {
            got: text.len(),
            limit: limits.max_input_bytes,
        });
    }
    let parsed = llmx::parse_with(text, limits)?;
    let message = &parsed.message;
    let mut jobs = Vec::new();
    let mut warnings = Vec::new();
    let mut ids = HashSet::new();
    let mut context = String::new();
    for b in message
        .blocks
        .iter()
        .filter(|b| b.kind == kind::CTX || b.kind == kind::PLAN)
    {
        llmx::write_block(&mut context, b);
    }
    for (b, at) in message.blocks.iter().zip(&parsed.block_at) {
        let here = |msg: String| ParseError::at(at.line, at.column, msg);
        match b.kind.as_str() {
            kind::REQ => {
                let request = llmx::Request::from_block(b).map_err(|e| e.at(at.line, at.column))?;
                if jobs.len() == MAX_REQS {
                    return Err(here(format!("more than {MAX_REQS} REQ blocks")).into());
                }
                if !jobs.is_empty() && message.header.batch.is_none() {
                    return Err(here("several REQ blocks need a batch id (HEADER b)".into()).into());
                }
                let id = request
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("R{}", jobs.len() + 1));
                if !ids.insert(id.clone()) {
                    return Err(here(format!("REQ id '{id}' is used twice")).into());
                }
                let policy = match b.get("x_policy") {
                    None => None,
                    Some(v) => Some(
                        v.as_str()
                            .filter(|p| !p.is_empty())
                            .ok_or_else(|| {
                                here("field 'x_policy' in REQ must name a policy".into())
                            })?
                            .to_owned(),
                    ),
                };
                let mut input = request.objective.clone();
                if !context.is_empty() {
                    input.push_str("\n\n");
                    input.push_str(context.trim_end());
                }
                jobs.push(Job {
                    id,
                    request,
                    policy,
                    input,
                });
            }
            kind::CTX | kind::PLAN => {}
            _ if b.is_extension() => {}
            k if b.is_standard() => warnings.push(Block::warn(&format!(
                "{k} ignored: the gateway acts on REQ (with CTX and PLAN)"
            ))),
            k => warnings.push(Block::warn_unknown(k)),
        }
    }
    if jobs.is_empty() {
        let end = parsed.block_at.last().copied().unwrap_or(parsed.header_at);
        return Err(ParseError::at(end.line, end.column, "no REQ block: nothing to do").into());
    }
    let h = &message.header;
    state.check_seq(tenant, &h.from, h.seq)?;
    Ok(Inbound {
        header: h.clone(),
        jobs,
        warnings,
    })
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

    #[test]
    fn a_message_is_read_into_jobs_and_warnings() {
        let state = LlmxState::default();
        let text = "HEADER:{f:Claude,t:gw,s:3,b:B1}\nCTX:{p:myapp}\nREQ:{o:\"a\",pr:1,exp:[x]}\n\
                    CUSTOM:{k:1}\nX_T:{k:1}\nREQ:{i:Q,o:\"b\",pr:5,x_policy:cheapest}\n";
        let inb = read(text, &limits(1 << 20), &state, "t").unwrap();
        let ids: Vec<_> = inb.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["R1", "Q"]);
        assert_eq!(inb.jobs[0].input, "a\n\nCTX:{p:myapp}");
        assert_eq!(inb.jobs[1].policy.as_deref(), Some("cheapest"));
        assert_eq!(inb.warnings, [Block::warn_unknown("CUSTOM")]);
        // The same sequence number again is a replay; another tenant's sender is another.
        assert!(matches!(
            read(text, &limits(1 << 20), &state, "t"),
            Err(Nack::Sequence(_))
        ));
        assert!(read(text, &limits(1 << 20), &state, "u").is_ok());
        let two = "HEADER:{f:C,t:g,s:1}\nREQ:{o:\"a\",pr:1}\nREQ:{o:\"b\",pr:1}";
        let e = read(two, &limits(1 << 20), &state, "t").unwrap_err();
        assert_eq!(
            e.to_string(),
            "parse error at 3:1: several REQ blocks need a batch id (HEADER b)"
        );
    }
}
