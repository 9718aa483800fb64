//! Fuzz oracles: each reader of untrusted input fed arbitrary bytes, then the contracts its
//! result must keep.
//!
//! Shared by the libFuzzer targets (`fuzz_targets/*.rs`) and by the stable replay of the
//! committed corpora (`tests/it/fuzz_corpus.rs` includes this file as a module), so CI checks
//! exactly what the fuzzer checked. A panic is a finding: either a reader panicked, or an
//! `assert!` below caught a result that breaks its contract. Each function returns whether the
//! input was accepted, so the replay can also pin that the `valid-` seeds stay valid.

use ldp_gateway::ldp::{self, CapabilityManifest, Envelope, IdentityCard, SessionConfig};
use ldp_gateway::policy::{self, Glob, PolicySet};
use llmx::{Block, Header, Message, Request, SeqChecker};
use std::sync::Arc;

/// Names the policy oracle passes as the file path (problems must carry it back).
const POLICY_PATH: &str = "fuzz/policy.toml";

/// Strings glob matching is tried against: ASCII, mixed case, multi-byte, empty.
const PROBES: [&str; 6] = [
    "",
    "summarize",
    "EU-West",
    "reasoning-deep",
    "ß-İ-日本",
    "*",
];

/// Envelope reader (both dialects). Accepted envelopes must be written in a shape the reader
/// takes back, naming the same message. Also feeds the same JSON to the manifest and session
/// config readers, which bodies reach only through their own fields.
pub fn envelope(data: &[u8]) -> bool {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Ok(m) = CapabilityManifest::from_value(&value) {
            for c in &m.capabilities {
                let _ = c.name.len();
            }
        }
        if let Ok(config) = serde_json::from_value::<SessionConfig>(value) {
            let prefs = config.preferences();
            assert!(!prefs.is_empty(), "a session config always has preferences");
            let n = ldp::negotiate(&prefs, &ldp::PayloadMode::ALL);
            let _ = n.next_after(n.mode);
            if let Err(e) = serde_json::to_vec(&config) {
                panic!("an accepted session config cannot be written: {e}");
            }
        }
    }

    let env = match Envelope::from_slice(data) {
        Ok(env) => env,
        Err(e) => {
            // Error messages reach clients: rendering one must not panic.
            let _ = e.to_string();
            return false;
        }
    };
    let kind = env.body.message_type();
    let task_id = env.body.task_id().map(str::to_owned);
    if let ldp::Body::TaskSubmit {
        contract: Some(c), ..
    } = &env.body
    {
        let _ = c.deadline_at();
    }
    if let ldp::Body::SessionPropose { config } = &env.body {
        let _ = config.preferences();
    }

    let bytes = match env.to_vec() {
        Ok(b) => b,
        Err(e) => panic!("an accepted envelope cannot be written: {e}"),
    };
    let back = match Envelope::from_slice(&bytes) {
        Ok(b) => b,
        Err(e) => panic!(
            "the gateway writes an envelope it cannot read back: {e}\nwritten: {}",
            String::from_utf8_lossy(&bytes)
        ),
    };
    assert_eq!(back.body.message_type(), kind, "message type changed");
    assert_eq!(back.body.task_id(), task_id.as_deref(), "task id changed");
    assert_eq!(back.message_id, env.message_id, "message id changed");
    assert_eq!(back.session_id, env.session_id, "session id changed");
    assert_eq!(back.from, env.from, "sender changed");
    assert_eq!(back.to, env.to, "recipient changed");
    assert!(
        back.payload_mode.is_emittable(),
        "wrote a mode the SDKs reject"
    );
    true
}

/// Identity card reader (both dialects). Accepted cards must answer every accessor, and be
/// written in a shape the reader takes back with the same identity and skills.
pub fn card(data: &[u8]) -> bool {
    let card = match serde_json::from_slice::<IdentityCard>(data) {
        Ok(c) => c,
        Err(_) => return false,
    };
    assert!(
        !card.supported_payload_modes.is_empty(),
        "a card always supports some mode"
    );
    assert_ne!(card.context_window, Some(0), "0 means unknown");
    let _ = card.labels();
    let _ = card.latency();
    let _ = card.cost_tier();
    for c in &card.capabilities {
        let hints = card.effective_hints(&c.name);
        assert!(hints.is_some(), "a listed skill has hints");
    }
    let _ = card.effective_hints("no-such-skill-\u{1F980}");
    let _ = ldp::negotiate(
        &[ldp::PayloadMode::SemanticFrame, ldp::PayloadMode::Text],
        &card.supported_payload_modes,
    );
    let _ = ldp::trust::check_session(&card.trust_domain, "default", Some("default"));

    let bytes = match serde_json::to_vec(&card) {
        Ok(b) => b,
        Err(e) => panic!("an accepted card cannot be written: {e}"),
    };
    let back = match serde_json::from_slice::<IdentityCard>(&bytes) {
        Ok(b) => b,
        Err(e) => panic!(
            "the gateway writes a card it cannot read back: {e}\nwritten: {}",
            String::from_utf8_lossy(&bytes)
        ),
    };
    assert_eq!(back.delegate_id, card.delegate_id, "delegate id changed");
    assert_eq!(back.name, card.name, "name changed");
    assert_eq!(back.model_family, card.model_family, "model family changed");
    assert_eq!(
        back.model_version, card.model_version,
        "model version changed"
    );
    assert_eq!(back.trust_domain, card.trust_domain, "trust domain changed");
    assert_eq!(
        back.context_window, card.context_window,
        "context window changed"
    );
    assert_eq!(back.metadata, card.metadata, "metadata changed");
    let names = |c: &IdentityCard| -> Vec<String> {
        c.capabilities.iter().map(|c| c.name.clone()).collect()
    };
    assert_eq!(names(&back), names(&card), "skills changed");
    true
}

/// Policy parser and compiler. A compiled policy keeps every documented bound (routing
/// divides by the weight sum and trusts the rest); a rejected one names at least one problem,
/// each in this file, on a line that exists, with problems in line order.
pub fn policy(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let p = match policy::parse_str(POLICY_PATH, &text) {
        Ok(p) => p,
        Err(problems) => {
            assert!(!problems.is_empty(), "rejected without a problem");
            let lines = text.lines().count().max(1) + 1;
            for p in &problems {
                assert_eq!(p.file, POLICY_PATH, "problem names another file: {p}");
                assert!(
                    p.line <= lines,
                    "problem on line {} of {lines}: {p}",
                    p.line
                );
                assert!(!p.key.is_empty(), "problem without a key: {p}");
                assert!(!p.reason.is_empty(), "problem without a reason: {p}");
                let _ = p.to_string();
            }
            assert!(
                problems.windows(2).all(|w| w[0].line <= w[1].line),
                "problems out of line order"
            );
            return false;
        }
    };

    assert!(
        !p.name.0.is_empty()
            && p.name
                .0
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')),
        "accepted policy name {:?}",
        p.name.0
    );
    let w = p.weights;
    let total = w.quality + w.cost + w.latency;
    for x in [w.quality, w.cost, w.latency] {
        assert!(x.is_finite() && x >= 0.0, "accepted weight {x}");
    }
    assert!(
        total.is_finite() && total > 0.0,
        "accepted weights {w:?} do not normalise (sum {total})"
    );
    assert!(
        (0.0..1.0).contains(&p.tolerance),
        "tolerance {}",
        p.tolerance
    );
    assert!(
        (1..=10).contains(&p.max_attempts),
        "max_attempts {}",
        p.max_attempts
    );
    if let Some(l) = p.limits {
        assert!(l.rps.is_finite() && l.rps > 0.0, "rps {}", l.rps);
        assert!(l.burst >= 1, "burst {}", l.burst);
    }
    let r = &p.require;
    if let Some(q) = r.min_quality {
        assert!((0.0..=1.0).contains(&q), "min_quality {q}");
    }
    if let Some(c) = r.max_cost_usd {
        assert!(c.is_finite() && c >= 0.0, "max_cost_usd {c}");
    }
    assert_ne!(r.max_latency_ms, Some(0), "max_latency_ms 0 accepted");
    let globs: Vec<&Glob> = r
        .jurisdictions
        .iter()
        .chain(&r.deny_jurisdictions)
        .chain(&r.model_families)
        .chain(&r.deny_model_families)
        .chain(p.matcher.iter().flat_map(|m| &m.skills))
        .collect();
    for g in globs {
        assert!(!g.0.is_empty(), "empty glob accepted");
        for s in PROBES {
            let _ = g.matches(s);
        }
        let _ = g.matches(&g.0);
    }

    let name = p.name.0.clone();
    let set = PolicySet {
        default: p.name.clone(),
        policies: vec![Arc::new(p)],
    };
    for s in PROBES {
        match set.select(None, None, s, s) {
            Ok((chosen, _)) => assert_eq!(chosen.name.0, name, "selected another policy"),
            Err(e) => panic!("selection without a name failed: {e}"),
        }
    }
    true
}

/// LLMX reader (`crates/llmx`), default limits. A refused message names a place inside the
/// text and becomes a §7.2 NACK the reader takes back; an accepted one stays within the
/// limits, answers every helper, and is written (`llmx::write`) as text that reads back as
/// the same message and is written again byte for byte.
pub fn llmx(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let parsed = match llmx::parse_with(&text, &llmx::Limits::default()) {
        Ok(p) => p,
        Err(e) => {
            assert!(e.line >= 1 && e.column >= 1, "position 0 in {e}");
            let lines = text.split('\n').count();
            assert!(e.line <= lines, "line {} of {lines}: {e}", e.line);
            let line_chars = text
                .split('\n')
                .nth(e.line - 1)
                .map_or(0, |l| l.chars().count());
            assert!(
                e.column <= line_chars + 1,
                "column past the line's end: {e}"
            );
            assert!(!e.message.is_empty(), "error without a message");
            let nack = Message {
                header: Header::new("gateway", "sender", 1),
                blocks: vec![Block::nack(&e)],
            };
            match llmx::parse(&llmx::write(&nack)) {
                Ok(back) => assert_eq!(back, nack, "the NACK does not read back"),
                Err(e2) => panic!("the NACK for `{e}` does not parse: {e2}"),
            }
            return false;
        }
    };
    let m = &parsed.message;
    assert!(
        m.blocks.len() <= llmx::MAX_BLOCKS,
        "{} blocks",
        m.blocks.len()
    );
    assert_eq!(
        parsed.block_at.len(),
        m.blocks.len(),
        "a block without a position"
    );
    assert!(
        parsed
            .block_at
            .windows(2)
            .all(|w| (w[0].line, w[0].column) < (w[1].line, w[1].column)),
        "block positions out of order"
    );
    assert!(
        !m.header.from.is_empty() && !m.header.to.is_empty(),
        "empty f or t"
    );
    for b in &m.blocks {
        assert_ne!(b.kind, "HEADER", "a second HEADER accepted");
        if b.kind == llmx::kind::REQ {
            if let Ok(r) = Request::from_block(b) {
                assert!((1..=5).contains(&r.priority), "priority {}", r.priority);
            }
        }
        for (_, v) in b.fields() {
            let _ = v.to_json();
        }
        for v in b.items() {
            let _ = v.to_json();
        }
    }
    let _ = m.unknown_blocks().count();
    let mut seq = SeqChecker::new(4);
    if seq.check(&m.header.from, m.header.seq).is_ok() {
        assert!(
            seq.check(&m.header.from, m.header.seq).is_err(),
            "a replay accepted"
        );
    }

    let written = llmx::write(m);
    match llmx::parse(&written) {
        Ok(back) => assert_eq!(&back, m, "read back differently:\n{written}"),
        Err(e) => panic!("the writer wrote text the reader refuses: {e}\nwritten:\n{written}"),
    }
    let again = llmx::parse(&written).map(|b| llmx::write(&b));
    assert_eq!(
        again.as_deref(),
        Ok(written.as_str()),
        "writing is not stable"
    );
    true
}

/// LADP reader (`ladp::parse_bytes`, the 64 KiB profile) and its message layer. An accepted
/// input must write to text that reads back to the same forms (read without the size cap:
/// writing may lengthen a form, `\n` → `\\n`, `1e15` → `1000000000000000.0`); every
/// `(msg …)` and `(meta …)` form among them must write back to the same message, and the
/// `task-init` getters answer. A refused input names a position inside it.
pub fn ladp(data: &[u8]) -> bool {
    let limits = ladp::Limits::default();
    let forms = match ladp::parse_bytes(data, &limits) {
        Ok(forms) => forms,
        Err(e) => {
            let _ = e.to_string();
            assert!(e.line >= 1 && e.column >= 1, "position is 1-based: {e}");
            let lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
            assert!(e.line as usize <= lines, "line past the input: {e}");
            return false;
        }
    };
    let reread = ladp::Limits {
        max_bytes: usize::MAX,
        ..limits
    };
    let text: Vec<String> = forms.iter().map(ladp::Sexp::write).collect();
    match ladp::parse_with(&text.join("\n"), &reread) {
        Ok(back) => assert_eq!(back, forms, "forms changed through write → read"),
        Err(e) => panic!("written forms do not read back: {e}\nwritten: {text:?}"),
    }
    for form in &forms {
        if let Ok(m) = ladp::Msg::from_sexp(form) {
            match ladp::Msg::parse(&m.write()) {
                Ok(back) => assert_eq!(back, m, "message changed through write → read"),
                Err(e) => {
                    // Only the size cap may refuse a written message.
                    assert!(
                        m.write().len() > ladp::MAX_INPUT_BYTES,
                        "{e}: {}",
                        m.write()
                    );
                }
            }
            if let Ok(t) = ladp::TaskInit::from_msg(&m) {
                assert!(t.quorum.is_none_or(|q| (0.0..=1.0).contains(&q)));
                assert!(t
                    .timeout
                    .is_none_or(|d| d.as_secs_f64() <= ladp::MAX_TIMEOUT_SECS && !d.is_zero()));
            }
            let reply = ladp::Reply {
                sender: "gateway".into(),
                recipient: m.sender.clone(),
                epoch_ms: m.epoch_ms,
            };
            let err = reply.error("x", Some((1, 1)));
            assert_eq!(ladp::Msg::parse(&err.write()).ok(), Some(err));
        }
        if let Ok(meta) = ladp::Meta::from_sexp(form) {
            assert_eq!(ladp::Meta::from_sexp(&meta.to_sexp()).ok(), Some(meta));
        }
    }
    true
}

/// LLMCP reader (`crates/llmcp`): the bytes as a request (`read_request`), a response, an
/// error packet and a model's answer. A refused request's error and probe render; an accepted
/// packet is written and read back equal; a request renders for a delegate and the ledger,
/// whose stand-in holds no document's `markdown`; an accepted answer passes the validator and
/// round-trips.
pub fn llmcp(data: &[u8]) -> bool {
    use ldp_gateway::frontend::llmcp::{ledger_input, render_input};
    let probe = llmcp::Probe::of(data);
    assert!(probe
        .id
        .as_ref()
        .is_none_or(|id| id.len() <= llmcp::MAX_ID_BYTES));
    let mut accepted = false;
    match llmcp::read_request(data) {
        Err(e) => {
            let _ = e.to_string();
        }
        Ok(req) => {
            accepted = true;
            let bytes = llmcp::write(&req).unwrap_or_else(|e| panic!("unwritable request: {e}"));
            match llmcp::read_request(&bytes) {
                Ok(back) => assert_eq!(back, req, "request changed through write → read"),
                Err(e) => panic!("a written request reads back refused: {e}"),
            }
            let _ = render_input(&req);
            let stand_in = ledger_input(&req, false).to_string();
            // The request without its documents' bodies: what the stand-in may repeat.
            let mut bare = req.clone();
            for d in &mut bare.context.documents {
                d.content = serde_json::Value::Null;
            }
            let allowed = serde_json::to_string(&bare).unwrap_or_default();
            for d in &req.context.documents {
                if let Some(md) = d.content.get("markdown").and_then(|m| m.as_str()) {
                    let quoted = serde_json::Value::from(md).to_string();
                    let inner = &quoted[1..quoted.len() - 1];
                    // Long enough not to be a digest's or a key's few characters.
                    if inner.len() >= 24 && !allowed.contains(inner) {
                        assert!(
                            !stand_in.contains(inner),
                            "document text in the ledger stand-in"
                        );
                    }
                }
            }
        }
    }
    if let Ok(res) = serde_json::from_slice::<llmcp::Response>(data) {
        accepted = true;
        let bytes = llmcp::write(&res).unwrap_or_else(|e| panic!("unwritable response: {e}"));
        let back: llmcp::Response = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("a written response reads back refused: {e}"));
        assert_eq!(back, res, "response changed through write → read");
    }
    if let Ok(err) = serde_json::from_slice::<llmcp::ErrorPacket>(data) {
        let bytes = llmcp::write(&err).unwrap_or_else(|e| panic!("unwritable error packet: {e}"));
        let back: llmcp::ErrorPacket = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("a written error packet reads back refused: {e}"));
        assert_eq!(back, err, "error packet changed through write → read");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(answer) = llmcp::read_answer(text) {
            for call in &answer.tool_calls {
                assert!(
                    llmcp::tools::validate(call).is_ok(),
                    "an unvalidated tool call"
                );
            }
            let bytes = llmcp::write(&answer.assistant).unwrap_or_default();
            let back: llmcp::Assistant = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("a written assistant reads back refused: {e}"));
            assert_eq!(
                back, answer.assistant,
                "assistant changed through write → read"
            );
        }
        let md = llmcp::read_markdown(text);
        assert!(md.markdown.is_some() || md.render.is_some());
    }
    accepted
}

/// The A2A bridge's reader (`frontend::a2a::read`, then `job` for a send) under each kind of
/// `A2A-Version`: never a panic; every error object has a bounded message, and a v0.3 caller
/// never gets v1.0's -32009; a task made has a skill and a bounded context id. Accepted: read
/// under some version.
pub fn a2a(data: &[u8]) -> bool {
    use ldp_gateway::frontend::a2a::{job, read, Call, MAX_ID_BYTES};
    let mut accepted = false;
    for version in [Some("1.0"), None, Some("0.3"), Some("v9")] {
        match read(data, version) {
            Err((_, dialect, e)) => {
                let obj = e.to_error(dialect);
                assert!(obj.message.len() <= 512, "unbounded message");
                if dialect == a2a_wire::Dialect::V03 {
                    assert_ne!(obj.code, -32009, "v0.3 has no -32009");
                }
            }
            Ok(incoming) => {
                accepted = true;
                if let Call::Send { req, .. } = incoming.call {
                    match job(*req, Some("default")) {
                        Ok(j) => {
                            assert!(!j.skill.is_empty());
                            assert!(j.task.context_id.len() <= MAX_ID_BYTES.max(36));
                        }
                        Err(e) => {
                            let _ = e.to_error(incoming.dialect);
                        }
                    }
                }
            }
        }
    }
    accepted
}
