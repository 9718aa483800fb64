//! An LLMX message read: the grammar (the `llmx` crate), the `REQ` blocks with the message's
//! `CTX` and `PLAN` as jobs, a WARN for each block not acted on, the sender's sequence number.

use super::senders::LlmxState;
use llmx::{kind, Block, Header, Limits, ParseError};
use std::collections::HashSet;

/// Most `REQ` blocks in one message (each is a task run at once).
pub const MAX_REQS: usize = 16;

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
/// message accepted whole) by a single node's state ([`LlmxState::check_seq`]; the route
/// reads with [`read_unchecked`], then checks through the store it was given).
pub fn read(text: &str, limits: &Limits, state: &LlmxState, tenant: &str) -> Result<Inbound, Nack> {
    let inbound = read_unchecked(text, limits)?;
    let h = &inbound.header;
    state.check_seq(tenant, &h.from, h.seq)?;
    Ok(inbound)
}

/// Reads `text`: the grammar and the REQs, the sequence number not yet checked.
pub fn read_unchecked(text: &str, limits: &Limits) -> Result<Inbound, Nack> {
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
    Ok(Inbound {
        header: message.header.clone(),
        jobs,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
