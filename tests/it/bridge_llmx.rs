//! The LLMX bridge (`POST /llmx`, seed `003_…`): the seed's own examples read and written
//! back, then end to end through a gateway in front of three simulated delegates — a REQ
//! routed under a policy and answered in LLMX with its ledger row, every refusal in LLMX's
//! own forms (NACK with line:column, WARN, BLK listing what would qualify), and a batch
//! answered in completion order.

use crate::support::{card, Card, TestGateway};
use ldp_gateway::config::{Config, TenantConfig};
use ldp_gateway::frontend::llmx::{limits, read, LlmxState};
use ldp_gateway::provenance::{Ingress, Outcome};
use ldp_gateway::sim::SimOptions;
use llmx::{kind, parse, write, Block, Message, Value};
use serde_json::json;
use std::time::Duration;

/// The tenant's key.
const KEY: &str = "sk-llmx-acme";
/// The key of a tenant allowed one request, then one each 100 s.
const LIMITED_KEY: &str = "sk-llmx-limited";
/// The slow delegate's latency (`d0`, skill `review`): far above the others' 0 ms, so the
/// order of a batch's answers holds on a loaded machine.
const SLOW: Duration = Duration::from_millis(1500);

/// Every block example of §3 and the batch of §5, verbatim (the `llmx` crate's tests pin the
/// structure read; here: each is read by the same reader the bridge uses and written back).
const SEED: [&str; 17] = [
    "HEADER:{f:Claude,t:Gemini,s:1}",
    "HEADER:{f:Orchestrator,t:ALL,s:42,b:B1}",
    r#"CTX:{p:myapp,f:["src/api.ts","src/db.ts"],st:{phase:"P1",env:"dev"},issue:"PROJ-123"}"#,
    r#"REQ:{o:"implement user authentication",pr:2,d:["PROJ-100"],exp:["SECURITY-EXPERT"]}"#,
    r#"PLAN:[(i:1,t:"analyze requirements",s:C),(i:2,t:"implement core",s:I),(i:3,t:"write tests",s:P)]"#,
    r#"ACT:{i:A1,op:edit,tgt:"p:src/auth.ts#L42",args:{action:"add validation"}}"#,
    r#"ACT:{op:shell,tgt:"npm test"}"#,
    r#"OBS:{ai:A1,s:OK,c:{lines:45,modified:true}}"#,
    r#"OBS:{ai:A2,s:ERR,e:"file not found: src/missing.ts"}"#,
    r#"BLK:{w:"missing API credentials",a:["use mock","wait for config","skip feature"],esc:true}"#,
    r#"ASK:{q:"which auth method?",o:["JWT","session","OAuth2"],def:"JWT"}"#,
    r#"END:{n:"security review",t:["npm test","npm run lint"],r:["needs load testing"],del:["src/auth.ts","src/auth.test.ts"]}"#,
    r#"RES:{o:"ACK",msg:"proceeding with implementation"}"#,
    r#"RES:{o:"JWT",msg:"will use RS256 signing"}"#,
    "HEADER:{f:Claude,t:ALL,s:1,b:B1}\nACT:{i:A1,op:read,tgt:\"p:file1.ts\"}\n\
     ACT:{i:A2,op:read,tgt:\"p:file2.ts\"}\nACT:{i:A3,op:search,tgt:\"p:src/\",args:{q:\"TODO\"}}",
    "HEADER:{f:Gemini,t:Claude,s:2,b:B1}\nOBS:{ai:A1,s:OK,c:{lines:100}}\n\
     OBS:{ai:A3,s:OK,c:{matches:5}}\nOBS:{ai:A2,s:OK,c:{lines:50}}",
    r#"REQ:{o:"task",pr:2,x_team:"frontend",x_deadline:"2024-01-15"}"#,
];

/// A gateway with the tenants `acme` and `limited` and three delegates: `d0` (`review`, slow), `d1`
/// (`summarize`) and `d2` (`translate`, the only one in an EU jurisdiction).
async fn fleet() -> TestGateway {
    let mut slow = SimOptions::new(card("slow", "default", &[("review", 0.9)], &["text"]));
    slow.latency = SLOW;
    let fast = SimOptions::new(card("fast", "default", &[("summarize", 0.9)], &["text"]));
    let eu = Card::new("eu")
        .set("jurisdiction", json!("eu-west"))
        .skill("translate", 0.9)
        .build();
    let tenant: TenantConfig = serde_json::from_value(json!({
        "name": "acme",
        "api_key_sha256": [ldp_gateway::secret::hash_key(KEY)],
        "trust_domains": ["default"],
    }))
    .unwrap();
    let limited: TenantConfig = serde_json::from_value(json!({
        "name": "limited",
        "api_key_sha256": [ldp_gateway::secret::hash_key(LIMITED_KEY)],
        "trust_domains": ["default"],
        "limits": {"rps": 0.01, "burst": 1},
    }))
    .unwrap();
    TestGateway::builder()
        .sim(slow)
        .sim(fast)
        .sim(SimOptions::new(eu))
        .tenant(tenant)
        .tenant(limited)
        .spawn()
        .await
}

/// An answer: status, content type, body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    content_type: String,
    pub(crate) body: String,
}

impl Answer {
    /// The body read as an LLMX message (every answer must be one).
    pub(crate) fn message(&self) -> Message {
        parse(&self.body).unwrap_or_else(|e| panic!("{e}\n{}", self.body))
    }

    /// The `msg` of the answer's one `RES:{o:"NACK",…}`.
    fn nack(&self) -> String {
        let m = self.message();
        assert_eq!(m.blocks.len(), 1, "{}", self.body);
        let res = &m.blocks[0];
        assert_eq!((res.kind.as_str(), res.str("o")), ("RES", Some("NACK")));
        res.str("msg").unwrap().to_owned()
    }
}

/// POSTs `text` to `/llmx` with `key` (none: no `Authorization`).
pub(crate) async fn post(gw: &TestGateway, key: Option<&str>, text: impl Into<String>) -> Answer {
    let mut req = reqwest::Client::new()
        .post(format!("{}/llmx", gw.ldp_url()))
        .header("content-type", "text/plain")
        .body(text.into());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("POST /llmx");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = resp.text().await.expect("body");
    Answer {
        status,
        content_type,
        body,
    }
}

/// The `x_prov` field `key` of an answer block, as text.
fn prov<'b>(b: &'b Block, key: &str) -> &'b str {
    b.get("x_prov")
        .and_then(|p| p.get(key))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no x_prov.{key} in {b:?}"))
}

#[test]
fn the_seeds_examples_parse_and_round_trip() {
    for text in SEED {
        let text = match text.starts_with("HEADER:") {
            true => text.to_owned(),
            false => format!("{}\n{text}", SEED[0]),
        };
        let m = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let written = write(&m);
        assert_eq!(parse(&written), Ok(m), "{written}");
    }
    // §6.2's delegation message, as the bridge reads it: one task whose input is the
    // objective, then the message's CTX and PLAN as written.
    let text = format!("{}\n{}\n{}\n{}", SEED[0], SEED[2], SEED[3], SEED[4]);
    let inbound = read(&text, &limits(1 << 20), &LlmxState::default(), "acme").unwrap();
    assert_eq!(inbound.jobs.len(), 1);
    let job = &inbound.jobs[0];
    assert_eq!(job.id, "R1");
    assert_eq!(job.request.experts, ["SECURITY-EXPERT"]);
    assert_eq!(
        job.input,
        format!("implement user authentication\n\n{}\n{}", SEED[2], SEED[4])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_req_is_routed_under_a_policy_and_answered_in_llmx() {
    let gw = fleet().await;
    let text = r#"HEADER:{f:Claude,t:gateway,s:1}
CTX:{p:myapp,f:["src/api.ts"]}
REQ:{i:T1,o:"summarize the API",pr:2,exp:["summarize"],x_policy:"cheapest"}
PLAN:[(i:1,t:"read",s:C),(i:2,t:"summarize",s:P)]
"#;
    let a = post(&gw, Some(KEY), text).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.content_type.starts_with("text/plain"),
        "{}",
        a.content_type
    );
    let m = a.message();
    assert_eq!(m.header.from, Config::default().identity.delegate_id);
    assert_eq!((m.header.to.as_str(), m.header.batch), ("Claude", None));
    assert_eq!(m.blocks.len(), 1, "{}", a.body);
    let obs = &m.blocks[0];
    assert_eq!(obs.kind, kind::OBS);
    assert_eq!((obs.str("ai"), obs.str("s")), (Some("T1"), Some("OK")));
    assert!(
        obs.get("c").and_then(|c| c.get("out")).is_some(),
        "{}",
        a.body
    );
    // The simulator's text echoes its input: the objective, then the CTX and PLAN lines.
    let echoed = obs
        .get("c")
        .and_then(|c| c.get("out"))
        .and_then(|o| o.get("text"));
    let echoed = echoed.and_then(Value::as_str).unwrap_or_default();
    assert!(
        echoed.contains(r#"summarize the API CTX:{p:myapp,f:["src/api.ts"]} PLAN:[(i:1,"#),
        "{}",
        a.body
    );
    assert_eq!(prov(obs, "policy"), "cheapest");
    assert_eq!(prov(obs, "delegate"), "d1");
    assert_eq!(prov(obs, "skill"), "summarize");
    let row = gw.ledger_row(prov(obs, "task")).await;
    assert_eq!(row.ingress, Ingress::Llmx);
    assert_eq!(row.outcome, Outcome::Result);
    assert_eq!(row.policy.as_deref(), Some("cheapest"));
    assert_eq!(
        (row.skill.as_str(), row.delegate.as_deref()),
        ("summarize", Some("d1"))
    );
    assert_eq!(gw.sim(1).stats().tasks, 1);

    // `exp` naming a delegate (its card id) routes to the skill only it offers; the
    // gateway's sequence numbers rise.
    let text =
        "HEADER:{f:Claude,t:gateway,s:2}\nREQ:{o:\"bonjour\",pr:1,exp:[\"ldp:delegate:eu\"]}";
    let b = post(&gw, Some(KEY), text).await;
    let m2 = b.message();
    let obs = &m2.blocks[0];
    assert_eq!(
        (obs.str("ai"), obs.str("s")),
        (Some("R1"), Some("OK")),
        "{}",
        b.body
    );
    assert_eq!(
        (prov(obs, "skill"), prov(obs, "delegate")),
        ("translate", "d2")
    );
    assert!(m2.header.seq > m.header.seq);
    let scrape = gw.metrics().await;
    let counted = scrape.sum("ldp_gateway_http_requests_total{route=\"/llmx\",status=\"200\"");
    assert_eq!(counted, 2.0, "{scrape}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_nacked_in_llmx_with_its_place() {
    let gw = fleet().await;
    // A grammar error: answered to the sender its first line names.
    let a = post(
        &gw,
        Some(KEY),
        "HEADER:{f:Claude,t:g,s:1}\nREQ:{o:\"x\",pr:2,,}",
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.content_type.starts_with("text/plain"));
    assert_eq!(a.message().header.to, "Claude");
    let msg = a.nack();
    assert!(msg.starts_with("parse error at 2:17: "), "{msg}");
    // A REQ without its objective (§7.2's own example), at the REQ.
    let a = post(&gw, Some(KEY), "HEADER:{f:Claude,t:g,s:1}\n  REQ:{pr:2}").await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.nack(),
        "parse error at 2:3: missing required field 'o' in REQ"
    );
    // Not even a header: answered to `unknown`.
    let a = post(&gw, Some(KEY), "REQ:{o:\"x\",pr:2}").await;
    assert_eq!((a.status, a.message().header.to.as_str()), (400, "unknown"));
    assert!(a.nack().starts_with("parse error at 1:1: "));

    // Over-size: a string over the reader's bound (at its place), a body over the limit, more
    // REQs than a message may carry.
    let long = "a".repeat(llmx::MAX_STRING_BYTES + 1);
    let a = post(
        &gw,
        Some(KEY),
        format!("HEADER:{{f:C,t:g,s:1}}\nREQ:{{o:\"{long}\",pr:1}}"),
    )
    .await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.nack(),
        format!(
            "parse error at 2:8: string longer than {} bytes",
            llmx::MAX_STRING_BYTES
        )
    );
    let body_limit = Config::default().server.body_limit_bytes;
    let huge = format!("HEADER:{{f:C,t:g,s:1}}\n{}", " ".repeat(body_limit));
    let a = post(&gw, Some(KEY), huge).await;
    assert_eq!(a.status, 413);
    assert!(a.nack().contains("over the"), "{}", a.body);
    let many = ldp_gateway::frontend::llmx::MAX_REQS + 1;
    let reqs: String = (0..many)
        .map(|i| format!("REQ:{{i:Q{i},o:\"x\",pr:3,exp:[summarize]}}\n"))
        .collect();
    let a = post(
        &gw,
        Some(KEY),
        format!("HEADER:{{f:C,t:g,s:1,b:B}}\n{reqs}"),
    )
    .await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.nack(),
        format!(
            "parse error at {}:1: more than {} REQ blocks",
            many + 1,
            many - 1
        )
    );
    // Nothing was run; every refusal was counted as the LDP routes' are.
    assert_eq!(gw.sim(1).stats().tasks, 0);
    let scrape = gw.metrics().await;
    let counted = |code: &str| scrape.sum(&format!("ldp_gateway_errors_total{{code=\"{code}\"}}"));
    assert_eq!(counted("bad_request"), 5.0, "{scrape}");
    assert_eq!(counted("payload_too_large"), 1.0, "{scrape}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_key_is_required() {
    let gw = fleet().await;
    let text = "HEADER:{f:Claude,t:g,s:1}\nREQ:{o:\"x\",pr:3,exp:[summarize]}";
    for key in [None, Some("sk-wrong")] {
        let a = post(&gw, key, text).await;
        assert_eq!(a.status, 401, "{key:?}: {}", a.body);
        assert!(!a.nack().is_empty());
    }
    assert_eq!(gw.sim(1).stats().tasks, 0);
    // The refused messages recorded no sequence number: s:1 is still the sender's first.
    assert_eq!(post(&gw, Some(KEY), text).await.status, 200);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_req_is_a_blk_with_429() {
    let gw = fleet().await;
    let msg =
        |s: u64| format!("HEADER:{{f:Claude,t:g,s:{s}}}\nREQ:{{o:\"x\",pr:3,exp:[summarize]}}");
    assert_eq!(post(&gw, Some(LIMITED_KEY), msg(1)).await.status, 200);
    let a = post(&gw, Some(LIMITED_KEY), msg(2)).await;
    assert_eq!(a.status, 429, "{}", a.body);
    let m = a.message();
    let blk = &m.blocks[0];
    assert_eq!((blk.kind.as_str(), blk.str("ai")), ("BLK", Some("R1")));
    assert_eq!(blk.str("x_code"), Some("RATE_LIMITED"));
    let wait = blk.strs("a").unwrap();
    assert!(wait[0].starts_with("retry after "), "{}", a.body);
    assert_eq!(gw.sim(1).stats().tasks, 1);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_numbers_must_rise_per_sender() {
    let gw = fleet().await;
    let msg = |f: &str, s: u64| {
        format!("HEADER:{{f:{f},t:g,s:{s}}}\nREQ:{{o:\"x\",pr:3,exp:[summarize]}}")
    };
    assert_eq!(post(&gw, Some(KEY), msg("Claude", 5)).await.status, 200);
    for s in [5, 4] {
        let a = post(&gw, Some(KEY), msg("Claude", s)).await;
        assert_eq!(a.status, 409, "{}", a.body);
        assert_eq!(
            a.nack(),
            format!("sequence {s} from 'Claude' is not above the last one, 5")
        );
    }
    // Another sender counts on its own; the first goes on from its last.
    assert_eq!(post(&gw, Some(KEY), msg("Gemini", 1)).await.status, 200);
    assert_eq!(post(&gw, Some(KEY), msg("Claude", 6)).await.status, 200);
    assert_eq!(gw.sim(1).stats().tasks, 3);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_block_is_warned_and_the_rest_answered() {
    let gw = fleet().await;
    let text = "HEADER:{f:Claude,t:g,s:1}\nCUSTOM:{k:1}\nX_TRACE:{k:1}\n\
                REQ:{o:\"x\",pr:3,exp:[summarize]}";
    let a = post(&gw, Some(KEY), text).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let m = a.message();
    let kinds: Vec<_> = m.blocks.iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(kinds, ["RES", "OBS"], "{}", a.body);
    assert_eq!(m.blocks[0], Block::warn_unknown("CUSTOM"));
    assert_eq!(
        m.blocks[0].str("msg"),
        Some("unknown message type: CUSTOM ignored")
    );
    assert_eq!(m.blocks[1].str("s"), Some("OK"));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_a_blk_listing_what_would_qualify() {
    let gw = fleet().await;
    // Under `eu-only` no delegate of `summarize` qualifies; `translate`'s would.
    let text = "HEADER:{f:Claude,t:g,s:1}\n\
                REQ:{i:E,o:\"x\",pr:3,exp:[summarize],x_policy:\"eu-only\"}";
    let a = post(&gw, Some(KEY), text).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let m = a.message();
    assert_eq!(m.blocks.len(), 1, "{}", a.body);
    let blk = &m.blocks[0];
    assert_eq!(blk.kind, kind::BLK);
    assert_eq!(blk.str("ai"), Some("E"));
    assert_eq!(blk.strs("a"), Some(vec!["translate"]), "{}", a.body);
    assert_eq!(blk.str("x_code"), Some("NO_ELIGIBLE_DELEGATE"));
    assert!(!blk.str("w").unwrap().is_empty());
    let row = gw.ledger_row(prov(blk, "task")).await;
    assert_eq!(
        (row.ingress, row.policy.as_deref()),
        (Ingress::Llmx, Some("eu-only"))
    );
    assert_eq!(row.error_code.as_deref(), Some("NO_ELIGIBLE_DELEGATE"));

    // An expert nobody is: every skill served now under the tenant's policy qualifies.
    let text = "HEADER:{f:Claude,t:g,s:2}\nREQ:{o:\"x\",pr:3,exp:[\"SECURITY-EXPERT\"]}";
    let a = post(&gw, Some(KEY), text).await;
    let m = a.message();
    let blk = &m.blocks[0];
    assert_eq!((blk.kind.as_str(), blk.str("ai")), ("BLK", Some("R1")));
    assert_eq!(
        blk.strs("a"),
        Some(vec!["review", "summarize", "translate"]),
        "{}",
        a.body
    );

    // A policy there is not: the policies there are.
    let text = "HEADER:{f:Claude,t:g,s:3}\nREQ:{o:\"x\",pr:3,exp:[summarize],x_policy:nope}";
    let m = post(&gw, Some(KEY), text).await.message();
    let blk = &m.blocks[0];
    assert_eq!(blk.str("x_code"), Some("UNKNOWN_POLICY"));
    assert!(blk.strs("a").unwrap().contains(&"eu-only"), "{blk:?}");
    assert_eq!(gw.sim(1).stats().tasks, 0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_answered_in_completion_order() {
    let gw = fleet().await;
    // The slow delegate's REQ first (named by its registry name), then two fast ones.
    let text = "HEADER:{f:Orchestrator,t:ALL,s:42,b:B1}\n\
                REQ:{i:A1,o:\"review it\",pr:2,exp:[d0]}\n\
                REQ:{i:A2,o:\"summarize it\",pr:2,exp:[summarize]}\n\
                REQ:{i:A3,o:\"translate it\",pr:2,exp:[translate]}\n";
    // Read as it streams: the fast answers come while the slow delegate is still working.
    let mut resp = reqwest::Client::new()
        .post(format!("{}/llmx", gw.ldp_url()))
        .bearer_auth(KEY)
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = String::new();
    let mut slow_done_when_two_came = None;
    while let Some(chunk) = resp.chunk().await.unwrap() {
        body.push_str(std::str::from_utf8(&chunk).unwrap());
        if slow_done_when_two_came.is_none() && body.matches("OBS:").count() == 2 {
            slow_done_when_two_came = Some(gw.sim(0).stats().results);
        }
    }
    assert_eq!(slow_done_when_two_came, Some(0), "streamed: {body}");
    let m = parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert_eq!(
        (m.header.to.as_str(), m.header.batch.as_deref()),
        ("Orchestrator", Some("B1"))
    );
    let answers: Vec<_> = m.blocks_of(kind::OBS).collect();
    assert_eq!(answers.len(), 3, "{body}");
    assert!(answers.iter().all(|b| b.str("s") == Some("OK")), "{body}");
    let order: Vec<_> = answers.iter().filter_map(|b| b.str("ai")).collect();
    assert_eq!(order.len(), 3);
    assert_eq!(order[2], "A1", "the slow REQ is answered last: {order:?}");
    assert_eq!(prov(answers[2], "delegate"), "d0");
    for b in answers {
        assert_eq!(gw.ledger_row(prov(b, "task")).await.ingress, Ingress::Llmx);
    }
    gw.shutdown().await;
}
