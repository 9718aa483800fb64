//! The LADP bridge (`POST /ladp`, seed `004_…` v1.9): the seed's constructs read and written
//! back; a `task-init` through the gateway under a policy with and without `[verify]`
//! (consensus, the retry limit's `meta abort`, the message's own quorum), `status-request`,
//! `halt`; bad input (grammar, size, rate, key) in LADP's own error form with its 4xx.

use crate::support::openai::{declared, entry};
use crate::support::rogue::{completion, Answer as Rogue, RogueOpenAi};
use crate::support::{card, eventually, TestGateway};
use crate::verify::{producer, verifier};
use ladp::{Msg, Sexp};
use ldp_gateway::config::{LadpConfig, TenantConfig};
use ldp_gateway::provenance::Ingress;
use ldp_gateway::sim::SimOptions;
use serde_json::json;
use std::time::Duration;

/// A delegate offering `qa`.
fn solo() -> SimOptions {
    SimOptions::new(card("solo", "default", &[("qa", 0.9)], &["text"]))
}

/// An answer of `/ladp`: its status, headers, text and the forms it reads as.
pub(crate) struct Said {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) text: String,
    pub(crate) forms: Vec<Msg>,
}

impl Said {
    fn kinds(&self) -> Vec<&str> {
        self.forms.iter().map(|m| m.kind.as_str()).collect()
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name}: {:?}", self.headers))
    }
}

/// POSTs `body` to `/ladp` with `key` as the Bearer key.
pub(crate) async fn send(gw: &TestGateway, key: Option<&str>, body: impl Into<Vec<u8>>) -> Said {
    let c = gw.client();
    let mut req = c
        .http
        .post(c.url("/ladp"))
        .header("content-type", "text/plain")
        .body(body.into());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("POST /ladp");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    // Answers may be longer than the 64 KiB a message may be (an output echoing its task).
    let limits = ladp::Limits {
        max_bytes: 4 << 20,
        ..ladp::Limits::default()
    };
    let forms = ladp::parse_with(&text, &limits)
        .unwrap_or_else(|e| panic!("answer does not read ({e}): {text}"))
        .iter()
        .map(|f| Msg::from_sexp(f).unwrap_or_else(|e| panic!("{e}: {text}")))
        .collect();
    Said {
        status,
        headers,
        text,
        forms,
    }
}

/// `(msg task-init <sender> gateway <ms> (data (skill qa) (task "<task>") <extra>))`.
pub(crate) fn task_init(sender: &str, ms: i64, task: &str, extra: &str) -> String {
    format!("(msg task-init {sender} gateway {ms}\n  (data (skill qa) (task {task:?}) {extra}))")
}

pub(crate) fn status_request(sender: &str, ms: i64) -> String {
    format!("(msg status-request {sender} gateway {ms} (data))")
}

/// The single value of `m`'s `(field v)`.
pub(crate) fn value<'m>(m: &'m Msg, field: &'static str) -> &'m Sexp {
    m.value(field)
        .unwrap()
        .unwrap_or_else(|| panic!("no {field} in {}", m.write()))
}

pub(crate) fn string<'m>(m: &'m Msg, field: &'static str) -> &'m str {
    value(m, field)
        .as_name()
        .unwrap_or_else(|| panic!("{field} of {}", m.write()))
}

fn number(m: &Msg, field: &'static str) -> f64 {
    value(m, field)
        .as_f64()
        .unwrap_or_else(|| panic!("{field} of {}", m.write()))
}

/// Lets `rate` messages a minute through (the tests that are not about the rate).
fn rate(per_minute: u32) -> impl FnOnce(&mut ldp_gateway::config::Config) {
    move |c| {
        c.ladp = LadpConfig {
            rate_per_minute: per_minute,
            ..LadpConfig::default()
        }
    }
}

/// A policy named `name` verifying every task with `verifiers` votes, `rounds` rounds.
fn verified(name: &str, verifiers: u32, rounds: u32) -> String {
    format!(
        "name = \"{name}\"\n[fallback]\nmax_attempts = 1\n\
         [verify]\nverifiers = {verifiers}\nmax_rounds = {rounds}\nsample = 1.0\n"
    )
}

/// An OpenAI-backed verifier whose every verdict is `passed`, at declared quality 0.9.
async fn judge(passed: bool) -> RogueOpenAi {
    RogueOpenAi::start(move |_| {
        let verdict = json!({"passed": passed, "confidence": 0.8,
            "reason": if passed { "it holds" } else { "it does not hold" }});
        Rogue::Json(completion(
            &verdict.to_string(),
            json!({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}),
        ))
    })
    .await
}

/// The default policy, beside the one a test names.
const BALANCED: &str = "name = \"balanced\"\n";

const SECTION_13: &str = r#"(verify (target-msg <msg-id>) (result failed) (reason "<failure-reason>"))
(reject-proposal (target-msg <msg-id>) (reason "<failure-reason>"))
(meta abort (reason "verification-retry-exceeded") (reference <msg-id>))
(meta halt (reason "critical-verification-failure") (reference <Semantic-ID>))
(msg agenda-revise controller ...)
(msg phase-back controller (data (phase "<previous-phase>")))"#;

const SECTION_4: &str = r#"(param-sweep (parameter β*) (range (start 0) (end 1/2) (step 0.05)))
(define-invariant (id "inv-1") (name "ΔI ≥ 0") (description "∀ x ∃ y (→ x y)") (domains (ΔH ΔE ΔC)))
(verify (target-msg m1) (checks (syntax logical-consistency)) (result passed) (confidence 0.9))
(vote (proposal p1) (agent a1) (weight 0.5) (decision yes)) ; a comment
(anomaly-detected (metric drift) (value 1.5e-3) (threshold -2))
(calibration (round 2) (reference-source kb) (adjustment-factor 3/4))
(claim (target-msg m1) (text "¬(∧ a b) ↔ (∨ ¬a ¬b)")) (phase DIVERGE)"#;

const FINALIZE: &str = r#"(msg finalize-proposal llm-assistant controller 1746176400000
  (data
    (proposal-id "MetaOrgPrinciples_v1.0")
    (status "finalized")
    (support-rate 1.0)
  )
)"#;

#[tokio::test]
async fn seed_constructs_and_finalize_proposal_read_and_round_trip() {
    for text in [SECTION_4, SECTION_13, FINALIZE] {
        let forms = ladp::parse_all(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let written: Vec<String> = forms.iter().map(Sexp::write).collect();
        let again = ladp::parse_all(&written.join("\n")).unwrap();
        assert_eq!(again, forms, "{written:?}");
    }
    let m = Msg::parse(FINALIZE).unwrap();
    assert_eq!(
        (m.kind.as_str(), m.sender.as_str(), m.epoch_ms),
        ("finalize-proposal", "llm-assistant", 1_746_176_400_000)
    );
    assert_eq!(string(&m, "proposal-id"), "MetaOrgPrinciples_v1.0");
    assert_eq!(number(&m, "support-rate"), 1.0);
    assert_eq!(Msg::parse(&m.write()).unwrap(), m);
    let abort = ladp::Meta::from_sexp(&ladp::parse_all(SECTION_13).unwrap()[2]).unwrap();
    assert_eq!(abort, ladp::Meta::abort_retry_exceeded("<msg-id>"));

    // The gateway reads it too, and says it does not answer it, in LADP, to its sender.
    let gw = TestGateway::builder().spawn().await;
    let said = send(&gw, None, FINALIZE).await;
    assert_eq!(said.status, 400, "{}", said.text);
    assert_eq!(said.kinds(), ["error"]);
    assert_eq!(said.forms[0].recipient, "llm-assistant");
    assert!(
        string(&said.forms[0], "reason").contains("`finalize-proposal` is not answered"),
        "{}",
        said.text
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn without_verify_a_task_init_is_synthesis_then_integration() {
    let gw = TestGateway::builder()
        .sim(solo())
        .policy("plain.toml", "name = \"plain\"\n")
        .policy("balanced.toml", BALANCED)
        .config(rate(100))
        .spawn()
        .await;
    let task = "What is ∀x. x = x?";
    let said = send(
        &gw,
        None,
        task_init("ctl", 1, task, "(policy plain) (timeout 30)"),
    )
    .await;
    assert_eq!(said.status, 200, "{}", said.text);
    assert!(said.header("content-type").starts_with("text/plain"));
    assert_eq!(said.kinds(), ["synthesis", "integration"], "{}", said.text);
    let (syn, int) = (&said.forms[0], &said.forms[1]);
    assert_eq!(
        (syn.sender.as_str(), syn.recipient.as_str()),
        ("gateway", "ctl")
    );
    assert_eq!(string(syn, "agent"), "d0");
    // The sim's output names the input it was given: the task text, as it was sent.
    let out: serde_json::Value = serde_json::from_str(string(syn, "text")).unwrap();
    assert_eq!(out["input_chars"], task.chars().count(), "{out}");
    assert_eq!(
        out["input_fingerprint"],
        ldp_gateway::sim::fingerprint(&json!(task))
    );
    assert_eq!(string(int, "text"), string(syn, "text"));
    assert_eq!(string(int, "target-msg"), string(syn, "msg-id"));
    assert_eq!(said.header("x-ldp-policy"), "plain");
    let task_id = said.header("x-ldp-task-id").to_owned();
    assert_eq!(string(syn, "msg-id"), format!("{task_id}-r1"));

    let row = gw.ledger_row(&task_id).await;
    assert_eq!(row.ingress, Ingress::Ladp);
    assert_eq!(row.policy.as_deref(), Some("plain"));

    // A policy that does not exist is refused in LADP, before any task.
    let said = send(&gw, None, task_init("ctl", 2, "x", "(policy nosuch)")).await;
    assert_eq!(said.status, 403, "{}", said.text);
    assert_eq!(said.kinds(), ["error"]);
    assert_eq!(
        string(&said.forms[0], "reason"),
        "there is no policy 'nosuch'"
    );
    assert_eq!(gw.sim(0).stats().tasks, 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn consensus_is_integration_verified_with_the_votes() {
    let gw = TestGateway::builder()
        .sim(producer("p-alpha", "alpha", 0.9, 0.001, 1.0))
        .sim(verifier("v-beta", "beta", 1.0))
        .sim(verifier("v-gamma", "gamma", 1.0))
        .policy("verified.toml", &verified("verified", 2, 3))
        .policy("balanced.toml", BALANCED)
        .config(rate(100))
        .spawn()
        .await;
    let said = send(
        &gw,
        None,
        task_init("ctl", 7, "2 + 2?", "(policy verified)"),
    )
    .await;
    assert_eq!(said.status, 200, "{}", said.text);
    assert_eq!(
        said.kinds(),
        [
            "synthesis",
            "verify",
            "vote",
            "verify",
            "vote",
            "integration-verified"
        ],
        "{}",
        said.text
    );
    let id = string(&said.forms[0], "msg-id").to_owned();
    assert_eq!(string(&said.forms[0], "agent"), "d0");
    let mut judges = Vec::new();
    for pair in said.forms[1..5].chunks(2) {
        let (verify, vote) = (&pair[0], &pair[1]);
        assert_eq!(string(verify, "target-msg"), id);
        assert_eq!(string(verify, "result"), "passed");
        assert_eq!(number(verify, "confidence"), 1.0);
        assert_eq!(string(vote, "proposal"), id);
        assert_eq!(string(vote, "decision"), "yes");
        assert_eq!(string(vote, "agent"), string(verify, "agent"));
        assert!(number(vote, "weight") > 0.0, "{}", vote.write());
        judges.push(string(vote, "agent").to_owned());
    }
    judges.sort();
    assert_eq!(judges, ["d1", "d2"]);
    let done = &said.forms[5];
    assert_eq!(string(done, "target-msg"), id);
    assert_eq!(number(done, "support-rate"), 1.0);
    assert_eq!(
        number(done, "quorum"),
        0.75,
        "the policy's default threshold"
    );
    assert_eq!(string(done, "text"), string(&said.forms[0], "text"));

    let row = gw.ledger_row(said.header("x-ldp-task-id")).await;
    assert_eq!(row.ingress, Ingress::Ladp);
    assert_eq!(row.verification_status.as_deref(), Some("peer_verified"));
    gw.shutdown().await;
}

#[tokio::test]
async fn a_producer_always_voted_down_ends_in_meta_abort_after_the_retry_limit() {
    let no = judge(false).await;
    let gw = TestGateway::builder()
        .sim(producer("p-alpha", "alpha", 0.9, 0.001, 1.0))
        .sim(producer("p-delta", "delta", 0.8, 0.001, 1.0))
        .entry(entry(
            "naysayer",
            &no.url(),
            "rogue",
            declared(&["verify"], 0.9),
        ))
        .policy("verified.toml", &verified("verified", 1, 2))
        .policy("balanced.toml", BALANCED)
        .config(rate(100))
        .spawn()
        .await;
    let said = send(
        &gw,
        None,
        task_init("ctl", 9, "2 + 2?", "(policy verified)"),
    )
    .await;
    assert_eq!(
        said.status, 502,
        "VERIFICATION_FAILED's status: {}",
        said.text
    );
    assert_eq!(
        said.kinds(),
        [
            "synthesis",
            "verify",
            "vote",
            "reject-proposal",
            "synthesis",
            "verify",
            "vote",
            "reject-proposal",
            "meta"
        ],
        "{}",
        said.text
    );
    let task_id = said.header("x-ldp-task-id").to_owned();
    let mut producers = Vec::new();
    for (round, f) in said.forms[..8].chunks(4).enumerate() {
        let id = format!("{task_id}-r{}", round + 1);
        assert_eq!(string(&f[0], "msg-id"), id);
        producers.push(string(&f[0], "agent").to_owned());
        assert_eq!(string(&f[1], "result"), "failed");
        assert_eq!(string(&f[1], "reason"), "it does not hold");
        assert_eq!(string(&f[1], "agent"), "naysayer");
        assert_eq!(string(&f[2], "decision"), "no");
        assert_eq!(string(&f[3], "target-msg"), id);
        assert_eq!(number(&f[3], "attempt"), (round + 1) as f64);
    }
    producers.sort();
    assert_eq!(producers, ["d0", "d1"], "re-routed to the other producer");
    let abort = ladp::Meta::from_sexp(&said.forms[8].data[0]).unwrap();
    assert_eq!(
        abort,
        ladp::Meta::abort_retry_exceeded(&format!("{task_id}-r2"))
    );
    assert!(
        said.text.contains(&format!(
            "(meta abort (reason \"verification-retry-exceeded\") (reference {task_id}-r2))"
        )),
        "{}",
        said.text
    );
    let row = gw.ledger_row(&task_id).await;
    assert_eq!(row.ingress, Ingress::Ladp);
    assert_eq!(row.error_code.as_deref(), Some("VERIFICATION_FAILED"));
    gw.shutdown().await;
}

/// [`verified`] judging by `threshold` in place of the default 0.75.
fn verified_at(name: &str, verifiers: u32, rounds: u32, threshold: f64) -> String {
    format!(
        "{}threshold = {threshold}\n",
        verified(name, verifiers, rounds)
    )
}

/// A gateway with one producer and two verifiers of equal weight, one saying yes and one
/// no, under the default policy `verified` judging by `threshold`.
async fn split_vote(threshold: f64) -> (TestGateway, RogueOpenAi, RogueOpenAi) {
    let (yes, no) = (judge(true).await, judge(false).await);
    let gw = TestGateway::builder()
        .sim(producer("p-alpha", "alpha", 0.9, 0.001, 1.0))
        .entry(entry(
            "aye",
            &yes.url(),
            "rogue",
            declared(&["verify"], 0.9),
        ))
        .entry(entry("nay", &no.url(), "rogue", declared(&["verify"], 0.9)))
        .policy("verified.toml", &verified_at("verified", 2, 1, threshold))
        .config(|c| c.policies.default = "verified".into())
        .config(rate(100))
        .spawn()
        .await;
    (gw, yes, no)
}

#[tokio::test]
async fn the_message_s_quorum_tightens_the_policy_s_threshold_and_never_loosens_it() {
    let (gw, _yes, _no) = split_vote(0.5).await;
    // One yes, one no, of equal weight: half the weight says yes, the policy's threshold.
    let said = send(&gw, None, task_init("ctl", 1, "x?", "")).await;
    assert_eq!(said.status, 200, "{}", said.text);
    let done = said.forms.last().unwrap();
    assert_eq!(done.kind, "integration-verified", "{}", said.text);
    assert_eq!(number(done, "support-rate"), 0.5);
    assert_eq!(number(done, "quorum"), 0.5);
    let decisions: Vec<&str> = said
        .forms
        .iter()
        .filter(|m| m.kind == "vote")
        .map(|m| string(m, "decision"))
        .collect();
    assert_eq!(decisions.len(), 2);
    assert!(decisions.contains(&"yes") && decisions.contains(&"no"));

    // A lower quorum asks for less than the operator's threshold: the threshold holds.
    let said = send(&gw, None, task_init("ctl", 2, "x?", "(quorum 0.25)")).await;
    assert_eq!(said.status, 200, "{}", said.text);
    let done = said.forms.last().unwrap();
    assert_eq!(done.kind, "integration-verified", "{}", said.text);
    assert_eq!(number(done, "quorum"), 0.5, "{}", said.text);

    // Unanimity asked: the same votes fail it.
    let said = send(&gw, None, task_init("ctl", 3, "x?", "(quorum 1)")).await;
    assert_eq!(said.status, 502, "{}", said.text);
    assert_eq!(
        said.kinds(),
        [
            "synthesis",
            "verify",
            "vote",
            "verify",
            "vote",
            "reject-proposal",
            "meta"
        ],
        "{}",
        said.text
    );
    assert!(string(&said.forms[5], "reason").contains("below the quorum 1"));
    gw.shutdown().await;
}

#[tokio::test]
async fn a_quorum_of_zero_does_not_verify_a_result_every_verifier_voted_down() {
    let (no, nope) = (judge(false).await, judge(false).await);
    let gw = TestGateway::builder()
        .sim(producer("p-alpha", "alpha", 0.9, 0.001, 1.0))
        .entry(entry("nay", &no.url(), "rogue", declared(&["verify"], 0.9)))
        .entry(entry(
            "nope",
            &nope.url(),
            "rogue",
            declared(&["verify"], 0.9),
        ))
        .policy("verified.toml", &verified("verified", 2, 1))
        .config(|c| c.policies.default = "verified".into())
        .config(rate(100))
        .spawn()
        .await;
    let said = send(&gw, None, task_init("ctl", 1, "x?", "(quorum 0)")).await;
    assert!(
        !said.kinds().contains(&"integration-verified"),
        "0 yes votes answered verified: {}",
        said.text
    );
    assert_eq!(said.status, 502, "VERIFICATION_FAILED: {}", said.text);
    assert_eq!(
        said.kinds(),
        [
            "synthesis",
            "verify",
            "vote",
            "verify",
            "vote",
            "reject-proposal",
            "meta"
        ],
        "{}",
        said.text
    );
    assert!(
        string(&said.forms[5], "reason").contains("below the quorum 0.75"),
        "the policy's threshold, not the message's 0: {}",
        said.text
    );
    let row = gw.ledger_row(said.header("x-ldp-task-id")).await;
    assert_ne!(
        row.verification_status.as_deref(),
        Some("peer_verified"),
        "{row:?}"
    );
    assert_eq!(row.error_code.as_deref(), Some("VERIFICATION_FAILED"));
    gw.shutdown().await;
}

#[tokio::test]
async fn a_task_s_quorum_does_not_decide_what_verifiers_learn() {
    let (gw, _yes, _no) = split_vote(0.5).await;
    // Unanimity asked fails one yes of two; the policy's threshold (0.5) would pass it:
    // agreement is learnt against the policy's, so the naysayer is the one that disagreed.
    for ms in 1..=4 {
        send(&gw, None, task_init("ctl", ms, "x?", "(quorum 1)")).await;
    }
    let scrape = gw.metrics().await;
    let reliability = |d: &str| -> f64 {
        let series =
            format!("ldp_gateway_verifier_reliability{{delegate=\"{d}\",skill=\"verify\"}}");
        scrape
            .samples()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no reliability for {d}"))
    };
    assert!(
        reliability("aye") > reliability("nay"),
        "aye {} nay {}",
        reliability("aye"),
        reliability("nay")
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_grammar_error_is_answered_in_ladp_with_its_line_and_column() {
    let gw = TestGateway::builder()
        .sim(solo())
        .config(rate(100))
        .spawn()
        .await;
    let body = "(msg task-init ctl gateway 1\n  (data (skill qa) (task \"x\\q\")))";
    let said = send(&gw, None, body).await;
    assert_eq!(said.status, 400, "{}", said.text);
    assert!(said.header("content-type").starts_with("text/plain"));
    assert_eq!(said.kinds(), ["error"]);
    let e = &said.forms[0];
    assert_eq!(
        (e.sender.as_str(), e.recipient.as_str()),
        ("gateway", "unknown")
    );
    // Column 28 is the backslash of `\q`.
    assert_eq!(string(e, "at"), "2:28", "{}", said.text);
    assert!(string(e, "reason").contains("escape"), "{}", said.text);
    // A message that reads but lacks a field names the field, to its sender.
    let said = send(
        &gw,
        None,
        "(msg task-init ctl gateway 1 (data (task \"x\")))",
    )
    .await;
    assert_eq!(said.status, 400);
    assert_eq!(said.forms[0].recipient, "ctl");
    assert_eq!(string(&said.forms[0], "reason"), "field `skill`: missing");
    gw.shutdown().await;
}

#[tokio::test]
async fn an_oversized_message_is_413_in_ladp() {
    let gw = TestGateway::builder()
        .sim(solo())
        .config(rate(100))
        .spawn()
        .await;
    let shell = task_init("ctl", 1, "", "").len();
    // Exactly 64 KiB reads and runs; one byte more is refused.
    let fits = task_init("ctl", 1, &"a".repeat(ladp::MAX_INPUT_BYTES - shell), "");
    assert_eq!(fits.len(), 64 * 1024);
    let said = send(&gw, None, fits).await;
    assert_eq!(
        said.status,
        200,
        "{}",
        &said.text[..200.min(said.text.len())]
    );
    let over = task_init("ctl", 2, &"a".repeat(ladp::MAX_INPUT_BYTES - shell + 1), "");
    let said = send(&gw, None, over).await;
    assert_eq!(said.status, 413, "{}", said.text);
    assert_eq!(said.kinds(), ["error"]);
    assert_eq!(string(&said.forms[0], "at"), "1:1");
    assert!(
        string(&said.forms[0], "reason").contains("65537 bytes"),
        "{}",
        said.text
    );
    assert_eq!(gw.sim(0).stats().tasks, 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn the_fifth_message_of_an_agent_within_a_minute_is_429() {
    let gw = TestGateway::builder()
        .sim(solo())
        .config(rate(4)) // the default, given explicitly
        .spawn()
        .await;
    for ms in 1..=4 {
        let said = send(&gw, None, status_request("ctl", ms)).await;
        assert_eq!(said.status, 200, "{ms}: {}", said.text);
    }
    let said = send(&gw, None, status_request("ctl", 5)).await;
    assert_eq!(said.status, 429, "{}", said.text);
    assert_eq!(said.kinds(), ["error"]);
    assert_eq!(said.forms[0].recipient, "ctl");
    assert!(string(&said.forms[0], "reason").contains("rate limit"));
    let wait: u64 = said.header("retry-after").parse().unwrap();
    assert!((1..=15).contains(&wait), "one message in 15 s: {wait}");
    // Another agent has its own allowance.
    let said = send(&gw, None, status_request("other", 6)).await;
    assert_eq!(said.status, 200, "{}", said.text);
    // Counted under the route, the refusal under its code.
    let m = gw.metrics().await;
    let route = |status: &str| {
        m.sum(&format!(
            "ldp_gateway_http_requests_total{{route=\"/ladp\",status=\"{status}\"}}"
        ))
    };
    assert_eq!((route("200"), route("429")), (5.0, 1.0));
    assert_eq!(
        m.sum("ldp_gateway_errors_total{code=\"rate_limited\"}"),
        1.0
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_tenant_key_is_required() {
    let key = crate::support::unique("sk");
    let tenant: TenantConfig = serde_json::from_value(json!({
        "name": "acme",
        "api_key_sha256": [ldp_gateway::secret::hash_key(&key)],
        "trust_domains": ["default"],
    }))
    .unwrap();
    let gw = TestGateway::builder()
        .sim(solo())
        .tenant(tenant)
        .config(rate(100))
        .spawn()
        .await;
    for bad in [None, Some("sk-wrong")] {
        let said = send(&gw, bad, status_request("ctl", 1)).await;
        assert_eq!(said.status, 401, "{bad:?}: {}", said.text);
        assert_eq!(said.kinds(), ["error"]);
    }
    let said = send(&gw, Some(&key), status_request("ctl", 1)).await;
    assert_eq!(said.status, 200, "{}", said.text);
    assert_eq!(string(&said.forms[0], "phase"), "idle");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halt_cancels_the_sender_s_running_task_and_status_tells_its_phase() {
    let mut slow = SimOptions::new(card("slow", "default", &[("qa", 0.9)], &["text"]));
    slow.latency = Duration::from_secs(30);
    let gw = TestGateway::builder()
        .sim(slow)
        .config(rate(100))
        .spawn()
        .await;
    let running = {
        let c = gw.client();
        let body = task_init("ctl", 42, "take your time", "");
        tokio::spawn(async move {
            let resp = c
                .http
                .post(c.url("/ladp"))
                .body(body)
                .send()
                .await
                .expect("task-init");
            (
                resp.status().as_u16(),
                resp.text().await.unwrap_or_default(),
            )
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || gw.sim(0).stats().tasks == 1).await,
        "the task reached the delegate"
    );
    let said = send(&gw, None, status_request("ctl", 43)).await;
    assert_eq!(said.kinds(), ["status"], "{}", said.text);
    assert_eq!(string(&said.forms[0], "phase"), "running");
    let task_id = string(&said.forms[0], "task-id").to_owned();
    // Another agent's halt stops nothing of this one.
    let said = send(&gw, None, "(msg halt someone-else gateway 44 (data))").await;
    assert!(said.text.contains("(cancelled 0)"), "{}", said.text);

    let said = send(&gw, None, "(msg halt ctl gateway 45 (data))").await;
    assert_eq!(said.status, 200, "{}", said.text);
    assert_eq!(said.kinds(), ["meta"]);
    let halt = ladp::Meta::from_sexp(&said.forms[0].data[0]).unwrap();
    assert_eq!(halt, ladp::Meta::halt_controller("45", 1));

    let (status, text) = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the halted task answers at once")
        .unwrap();
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("CANCELLED"), "{text}");
    assert!(text.contains(&format!("(task-id \"{task_id}\")")), "{text}");
    assert!(
        eventually(Duration::from_secs(10), || gw.sim(0).stats().cancels == 1).await,
        "the delegate was told"
    );
    let said = send(
        &gw,
        None,
        "(msg status-request ctl gateway 46 (data (target-msg 42)))",
    )
    .await;
    assert_eq!(string(&said.forms[0], "phase"), "failed", "{}", said.text);
    assert_eq!(string(&said.forms[0], "task-id"), task_id);
    let row = gw.ledger_row(&task_id).await;
    assert_eq!(row.ingress, Ingress::Ladp);
    gw.shutdown().await;
}
