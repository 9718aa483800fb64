//! Issue 37 item 10: clients are told a delegate by its configured name, else its card's
//! `delegate_id`, never by its address — in the LDP provenance's lineage (`routed_to`, a
//! verification's verifiers and evidence), the LDP stream's progress text, LADP's `(agent …)`,
//! A2A's status messages and `ldp_delegate`, the OpenAI ingress's `x-ldp-delegate`, LLMX's
//! `x_prov`. The delegates here have no configured name (the registry then names them by
//! URL); `[security] expose_delegate_addresses` is the operator's opt-in to that URL.

use crate::support::client::submit_body;
use crate::support::openai::{declared, entry, sse_data, start};
use crate::support::{Client, TestGateway};
use crate::verify::{producer, verifier};
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions};
use serde_json::{json, Value};

/// The OpenAI-backed delegate's model and skill.
const MODEL: &str = "sim-mini";
const CHAT: &str = "chat";

/// Verifies every task with two votes, one round.
const VERIFIED: &str = "name = \"verified\"\n[fallback]\nmax_attempts = 1\n\
    [verify]\nverifiers = 2\nmax_rounds = 1\nsample = 1.0\n";

/// A producer of `qa` (`p-alpha`), two verifiers (`v-beta`, `v-gamma`) and an
/// OpenAI-backed delegate of `chat` in front of `oa`, none with a configured name; the
/// policies `balanced` (the default) and `verified`.
async fn fleet(oa: &OpenAiHandle, expose: bool) -> TestGateway {
    TestGateway::builder()
        .sim(producer("p-alpha", "alpha", 0.9, 0.001, 1.0))
        .sim(verifier("v-beta", "beta", 1.0))
        .sim(verifier("v-gamma", "gamma", 1.0))
        .entry(entry("mini", &oa.url(), MODEL, declared(&[CHAT], 0.8)))
        .policy("balanced.toml", "name = \"balanced\"\n")
        .policy("verified.toml", VERIFIED)
        .config(move |c| {
            for d in &mut c.delegates {
                d.name = None;
            }
            c.security.expose_delegate_addresses = expose;
            c.policies.default = "balanced".into();
            c.ladp.rate_per_minute = 100;
            c.a2a.default_skill = Some("qa".into());
        })
        .spawn()
        .await
}

/// What each client-visible place said, to check as a whole and piece by piece.
struct Told {
    /// An LDP task's answer, unverified and verified.
    ldp: Value,
    ldp_verified: Value,
    /// The LDP stream's events.
    stream: Vec<Value>,
    /// LADP's answer under `verified`, and its `x-ldp-delegate`.
    ladp: String,
    ladp_header: String,
    /// A2A's streamed events.
    a2a: Vec<Value>,
    /// The OpenAI ingress's `x-ldp-delegate`, to the LDP producer and the OpenAI-backed one,
    /// and the answers' bodies.
    openai_ldp: String,
    openai_chat: String,
    openai_bodies: String,
    /// LLMX's answer.
    llmx: String,
}

impl Told {
    /// Everything, as one text.
    fn all(&self) -> String {
        [
            self.ldp.to_string(),
            self.ldp_verified.to_string(),
            Value::from(self.stream.clone()).to_string(),
            self.ladp.clone(),
            self.ladp_header.clone(),
            Value::from(self.a2a.clone()).to_string(),
            self.openai_ldp.clone(),
            self.openai_chat.clone(),
            self.openai_bodies.clone(),
            self.llmx.clone(),
        ]
        .join("\n")
    }

    /// The progress messages of the LDP stream.
    fn progress(&self) -> Vec<&str> {
        self.stream
            .iter()
            .filter(|e| e["body"]["type"] == "TASK_UPDATE")
            .filter_map(|e| e["body"]["message"].as_str())
            .collect()
    }

    /// The text of A2A's status messages.
    fn a2a_status(&self) -> Vec<&str> {
        self.a2a
            .iter()
            .filter_map(|e| {
                e["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"].as_str()
            })
            .collect()
    }

    /// The `ldp_delegate` of A2A's artifact.
    fn a2a_delegate(&self) -> &str {
        self.a2a
            .iter()
            .find_map(|e| {
                e["result"]["artifactUpdate"]["artifact"]["metadata"]["ldp_delegate"].as_str()
            })
            .unwrap_or_else(|| panic!("no ldp_delegate: {:?}", self.a2a))
    }

    /// The `(agent …)` of LADP's forms, in order.
    fn ladp_agents(&self) -> Vec<String> {
        ladp::parse_with(&self.ladp, &ladp::Limits::default())
            .unwrap_or_else(|e| panic!("{e}: {}", self.ladp))
            .iter()
            .filter_map(|f| ladp::Msg::from_sexp(f).ok())
            .filter_map(|m| {
                m.value("agent")
                    .ok()
                    .flatten()
                    .and_then(|v| v.as_name().map(str::to_owned))
            })
            .collect()
    }
}

/// One task through each front end.
async fn ask_everywhere(gw: &TestGateway) -> Told {
    let c = gw.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let ldp = c.task(&session, "qa", json!("2 + 2?"), "text").await;
    assert_eq!(ldp["type"], "TASK_RESULT", "{ldp}");
    let checked = c
        .accepted(json!({"payload_mode": "text", "policy": "verified"}))
        .await;
    let ldp_verified = c.task(&checked, "qa", json!("3 + 3?"), "text").await;
    assert_eq!(ldp_verified["type"], "TASK_RESULT", "{ldp_verified}");
    let (status, stream) = c
        .stream(&c.envelope(&session, submit_body("qa", json!("4 + 4?"))))
        .await;
    assert_eq!(status, 200);

    let task_init =
        "(msg task-init ctl gateway 1\n  (data (skill qa) (task \"5 + 5?\") (policy verified)))";
    let r = c
        .post_with(
            "/ladp",
            task_init.as_bytes().to_vec(),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ladp_header = header(&r, "x-ldp-delegate");

    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER",
            "parts": [{"text": "6 + 6?"}]}}});
    let a2a = c
        .post_with(
            "/a2a",
            send.to_string().into_bytes(),
            &[("content-type", "application/json"), ("A2A-Version", "1.0")],
        )
        .await;
    assert_eq!(a2a.status, 200, "{}", a2a.text());
    let a2a_events = sse_data(&a2a)
        .iter()
        .map(|d| serde_json::from_str(d).expect("an A2A event"))
        .collect();

    let to_ldp = chat(&c, "qa").await;
    let to_openai = chat(&c, CHAT).await;

    let llmx = c
        .post_with(
            "/llmx",
            b"HEADER:{f:ctl,t:gateway,s:1}\nREQ:{i:T1,o:\"7 + 7?\",pr:1,exp:[\"qa\"]}".to_vec(),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(llmx.status, 200, "{}", llmx.text());
    Told {
        ldp,
        ldp_verified,
        stream,
        ladp: r.text(),
        ladp_header,
        a2a: a2a_events,
        openai_ldp: header(&to_ldp, "x-ldp-delegate"),
        openai_chat: header(&to_openai, "x-ldp-delegate"),
        openai_bodies: format!("{}\n{}", to_ldp.text(), to_openai.text()),
        llmx: llmx.text(),
    }
}

/// A chat completion of `model` through the OpenAI ingress.
async fn chat(c: &Client, model: &str) -> crate::support::Resp {
    let r = c
        .post_json(
            "/v1/chat/completions",
            &json!({"model": model, "messages": [{"role": "user", "content": "8 + 8?"}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

fn header(r: &crate::support::Resp, name: &str) -> String {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name}: {:?}", r.headers))
        .to_owned()
}

/// The `routed_to` of the lineage entry of `step` in an LDP answer's provenance.
fn routed_to<'a>(answer: &'a Value, step: &str) -> &'a str {
    let lineage = answer["provenance"]["lineage"]
        .as_array()
        .unwrap_or_else(|| panic!("no lineage: {answer}"));
    lineage
        .iter()
        .find(|e| e["step"] == step)
        .and_then(|e| e["routed_to"].as_str())
        .unwrap_or_else(|| panic!("no {step} step: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_told_a_delegates_name_or_card_id_never_its_address() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = fleet(&oa, false).await;
    let told = ask_everywhere(&gw).await;
    let addresses: Vec<String> = (0..3).map(|i| gw.sim(i).url()).chain([oa.url()]).collect();
    let all = told.all();
    for a in &addresses {
        let authority = a.trim_start_matches("http://").trim_end_matches('/');
        let authority = authority.split('/').next().unwrap_or(authority);
        assert!(
            !all.contains(authority),
            "{authority} told to a client:\n{all}"
        );
    }
    assert!(!all.contains("http://127.0.0.1"), "{all}");

    let (p, beta, gamma) = (
        "ldp:delegate:p-alpha",
        "ldp:delegate:v-beta",
        "ldp:delegate:v-gamma",
    );
    // LDP: the lineage, a verification's verifiers and evidence.
    assert_eq!(routed_to(&told.ldp, "route"), p, "{}", told.ldp);
    assert_eq!(routed_to(&told.ldp_verified, "route"), p);
    let mut judges: Vec<&str> = routed_to(&told.ldp_verified, "verify")
        .split(", ")
        .collect();
    judges.sort();
    assert_eq!(judges, [beta, gamma], "{}", told.ldp_verified);
    let evidence = told.ldp_verified["provenance"]["evidence"].to_string();
    assert!(
        evidence.contains(&format!("qa judged by {beta}")),
        "{evidence}"
    );
    // The LDP stream's progress.
    assert_eq!(
        told.progress(),
        [format!("routed to {p}")],
        "{:?}",
        told.stream
    );
    // LADP: the producer and each verifier, twice each (verify and vote); the header.
    let mut agents = told.ladp_agents();
    agents.sort();
    assert_eq!(agents, [p, beta, beta, gamma, gamma], "{}", told.ladp);
    assert_eq!(told.ladp_header, p);
    // A2A: the status messages and the artifact's delegate.
    assert!(
        told.a2a_status()
            .contains(&format!("routed to {p}").as_str()),
        "{:?}",
        told.a2a
    );
    assert_eq!(told.a2a_delegate(), p);
    // The OpenAI ingress: an LDP delegate by its card's id, an OpenAI-backed one by the id
    // of the card declared for it, named after its model.
    assert_eq!(told.openai_ldp, p);
    assert_eq!(told.openai_chat, format!("ldp:delegate:{MODEL}"));
    // LLMX.
    assert!(
        told.llmx.contains(&format!("delegate:\"{p}\"")),
        "{}",
        told.llmx
    );
    eprintln!(
        "told clients: {p} (progress {:?}, LADP {agents:?})",
        told.progress()
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_may_opt_in_to_telling_clients_delegate_addresses() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = fleet(&oa, true).await;
    let told = ask_everywhere(&gw).await;
    let p = gw.sim(0).url();
    let p = p.trim_end_matches('/');
    assert_eq!(routed_to(&told.ldp, "route"), p, "{}", told.ldp);
    assert_eq!(told.progress(), [format!("routed to {p}")]);
    assert!(told.ladp_agents().iter().any(|a| a == p), "{}", told.ladp);
    assert_eq!(told.ladp_header, p);
    assert!(told
        .a2a_status()
        .contains(&format!("routed to {p}").as_str()));
    assert_eq!(told.a2a_delegate(), p);
    assert_eq!(told.openai_ldp, p);
    assert!(
        told.openai_chat.starts_with("http://127.0.0.1:"),
        "{}",
        told.openai_chat
    );
    assert!(told.llmx.contains(p), "{}", told.llmx);
    gw.shutdown().await;
}
