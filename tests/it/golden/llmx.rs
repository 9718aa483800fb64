//! LLMX (`POST /llmx`, v1.0 text) in front of LDP delegates: a lone REQ (its objective, CTX
//! and PLAN as the task's input; the result as an OBS with the gateway's `x_prov`), a batch
//! of three REQs answered in one message, and a refusal as a BLK.

use super::{gateway, Case, BEARER};
use crate::support::recorder::{ldp_card, ldp_delegate, Recorder, FIXED_TIME};
use serde_json::{json, Value};

const TEXT: (&str, &str) = ("content-type", "text/plain");

/// A scripted LDP delegate `id` offering `skill`, answering `output`.
async fn delegate(id: &'static str, skill: &str, output: &'static str) -> Recorder {
    let card = ldp_card(id, &format!("{id}-family"), &[(skill, 0.9, false)]);
    ldp_delegate(id, card, move |task: &Value| {
        vec![
            json!({"type": "TASK_RESULT", "task_id": task["body"]["task_id"],
            "output": output,
            "provenance": {"produced_by": format!("ldp:delegate:{id}"),
                "model_version": format!("{id}-1"), "payload_mode_used": "text",
                "confidence": 0.9, "verified": false, "tokens_used": 20, "cost_usd": 0.0021,
                "timestamp": FIXED_TIME}}),
        ]
    })
    .await
}

#[tokio::test]
async fn a_lone_req() {
    let d = delegate("summarizer", "summarize", "The API has two routes.").await;
    let gw = gateway().delegate(&d.url()).spawn().await;
    let mut case = Case::new(
        "llmx__req",
        "LLMX client, one REQ with CTX and PLAN under a policy → gateway → LDP delegate: the \
         objective, CTX and PLAN as the task's text, the result as an OBS with x_prov",
        &gw,
    )
    .upstream("d0", &d);
    let text = "HEADER:{f:Claude,t:gateway,s:1}\n\
                CTX:{p:myapp,f:[\"src/api.ts\"]}\n\
                REQ:{i:T1,o:\"summarize the API\",pr:2,exp:[\"summarize\"],x_policy:\"cheapest\"}\n\
                PLAN:[(i:1,t:\"read\",s:C),(i:2,t:\"summarize\",s:P)]\n";
    let r = case.post("/llmx", &[BEARER, TEXT], text.as_bytes()).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn a_batch() {
    let a = delegate("reviewer", "review", "Looks fine.").await;
    let b = delegate("summarizer", "summarize", "Two routes.").await;
    let c = delegate("translator", "translate", "Bonjour.").await;
    let gw = gateway()
        .delegates(&[a.url(), b.url(), c.url()])
        .spawn()
        .await;
    let mut case = Case::new(
        "llmx__batch",
        "LLMX client, a batch of three REQs → gateway → three LDP delegates at once: each \
         REQ's task, and the one answer message of three OBS (answered in completion order: \
         the blocks are sorted by `ai` here)",
        &gw,
    )
    .upstream("d0", &a)
    .upstream("d1", &b)
    .upstream("d2", &c);
    let text = "HEADER:{f:Orchestrator,t:ALL,s:42,b:B1}\n\
                REQ:{i:A1,o:\"review it\",pr:2,exp:[review]}\n\
                REQ:{i:A2,o:\"summarize it\",pr:2,exp:[summarize]}\n\
                REQ:{i:A3,o:\"translate it\",pr:2,exp:[translate]}\n";
    let r = case.post("/llmx", &[BEARER, TEXT], text.as_bytes()).await;
    assert_eq!(r.status, 200);
    case.sort_answer_lines("OBS:");
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn a_refusal_is_a_blk() {
    let d = delegate("summarizer", "summarize", "unused").await;
    let gw = gateway().delegate(&d.url()).spawn().await;
    let mut case = Case::new(
        "llmx__refused",
        "LLMX client, a REQ for an expert nobody is: a BLK listing the skills that would \
         qualify, nothing sent upstream; a grammar error: a NACK with its line:column",
        &gw,
    )
    .upstream("d0", &d);
    let text = "HEADER:{f:Claude,t:gateway,s:1}\nREQ:{i:E,o:\"x\",pr:3,exp:[\"SECURITY-EXPERT\"]}";
    case.post("/llmx", &[BEARER, TEXT], text.as_bytes()).await;
    let text = "HEADER:{f:Claude,t:gateway,s:2}\nREQ:{o:\"x\",pr:2,,}";
    case.post("/llmx", &[BEARER, TEXT], text.as_bytes()).await;
    case.snapshot();
    gw.shutdown().await;
}
