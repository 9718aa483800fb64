//! Issue 37, item 11: every byte of an upstream's Server-Sent Events counts against the answer
//! cap. A malicious upstream that streams nothing but comment lines (`: x`) — which carry no
//! event, so no event ever grew — made the gateway read 17 GB until the task deadline. Each
//! stream reader (an LDP delegate's `/ldp/stream`, an OpenAI-compatible delegate's streamed
//! completion, a streaming A2A agent's `SendStreamingMessage`) now stops at the cap and fails
//! the attempt as an answer past the cap does. Bounded by the bytes the rogue wrote, never by
//! time.

use super::liar::{handshake, is_card, Asked};
use crate::support::openai::{declared, entry as openai_entry, sse_data};
use crate::support::rogue::{Answer, Rogue, RogueOpenAi};
use crate::support::{client::submit_body, eventually, Card, TestGateway};
use ldp_gateway::config::{DelegateConfig, DelegateKind};
use ldp_gateway::upstream::{DEFAULT_MAX_RESPONSE_BYTES, STREAM_BYTES_PER_ANSWER_BYTE};
use serde_json::{json, Value};
use std::time::Duration;

const SKILL: &str = "chat";
/// The stream's cap every stream is read within (a multiple of the answer cap).
const CAP: u64 = (DEFAULT_MAX_RESPONSE_BYTES * STREAM_BYTES_PER_ANSWER_BYTE) as u64;
/// Where the rogue stops on its own: far past the cap (the old gateway read all of it).
const LIMIT: u64 = 3 * CAP;
/// Most the rogue may write: the cap, and what the loopback sockets hold when the gateway
/// lets go (its receive buffer grows up to `tcp_rmem`'s maximum, 32 MiB on some kernels; the
/// rogue's send buffer, `tcp_wmem`'s 4 MiB; 40 MiB in all).
const MOST_WRITTEN: u64 = CAP + (40 << 20);
/// How long the gateway may take to let go of the rogue (a generous ceiling).
const SETTLED_WITHIN: Duration = Duration::from_secs(60);

/// Comment lines and nothing else, 16 KiB a write, until `LIMIT` bytes.
fn comments() -> Answer {
    Answer::Endless {
        event: b": x\n".repeat(4096),
        limit: LIMIT,
    }
}

/// The rogue let go of early: its one stream abandoned by the gateway, not written to its
/// end, after about the cap (what the socket buffers held besides).
async fn assert_cut_at_the_cap(rogue: &Rogue) {
    let let_go = eventually(SETTLED_WITHIN, || rogue.ends().0 >= 1).await;
    let written = rogue.streamed();
    assert!(
        let_go,
        "the gateway read on: {:?} (abandoned, finished), {} MiB written",
        rogue.ends(),
        written >> 20
    );
    assert_eq!(rogue.ends().1, 0, "a stream was read to the rogue's end");
    assert!(
        (CAP..MOST_WRITTEN).contains(&written),
        "{written} bytes written, cap {CAP}"
    );
    eprintln!(
        "comments: {} MiB written before the gateway let go (cap {} MiB, the rogue's end {} MiB), ends {:?}",
        written >> 20,
        CAP >> 20,
        LIMIT >> 20,
        rogue.ends()
    );
}

/// An LDP delegate whose card offers [`SKILL`] streamed, that answers the handshake and
/// streams comments on `/ldp/stream`: the streaming client's task fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ldp_stream_of_comments_is_cut_at_the_answer_cap() {
    let card = Card::new("comments").capability(json!({"name": SKILL,
        "quality": {"quality_score": 0.9, "supports_streaming": true}}));
    let card = serde_json::to_value(card.build()).unwrap();
    let rogue = Rogue::start(move |path, request| {
        if is_card(path) {
            return Answer::Json(card.clone());
        }
        if path == "/ldp/stream" {
            return comments();
        }
        let asked = Asked {
            path: path.to_owned(),
            body: request.to_string(),
        };
        let answer = handshake("comments", &asked).map_or(json!({}), |lie| {
            serde_json::from_str(&lie.body).expect("an envelope")
        });
        Answer::Json(answer)
    })
    .await;
    let gw = TestGateway::builder()
        .entry(DelegateConfig {
            name: Some("comments".into()),
            ..DelegateConfig::new(rogue.url())
        })
        .spawn()
        .await;
    let c = gw.client();
    let (session, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let env = c.envelope(&session, submit_body(SKILL, json!("talk")));
    let (status, events) = c.stream(&env).await;
    assert_eq!(status, 200);
    let last = &events.last().expect("events")["body"];
    assert_eq!(last["type"], "TASK_FAILED", "{events:?}");
    assert_cut_at_the_cap(&rogue).await;
    gw.shutdown().await;
}

/// An OpenAI-compatible delegate whose streamed completion is comments: the streaming
/// client's answer ends in an error, not `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_stream_of_comments_is_cut_at_the_answer_cap() {
    let rogue = RogueOpenAi::start(|_| comments()).await;
    let gw = TestGateway::builder()
        .entry(openai_entry(
            "comments",
            &rogue.url(),
            "rogue",
            declared(&[SKILL], 0.8),
        ))
        .spawn()
        .await;
    let ask = json!({"model": SKILL, "stream": true,
        "messages": [{"role": "user", "content": "talk"}]});
    let r = gw.client().post_json("/v1/chat/completions", &ask).await;
    let data = sse_data(&r);
    assert_ne!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let failed = r.status != 200
        || data
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .any(|v| v["error"]["message"].is_string());
    assert!(failed, "{} {data:?}", r.status);
    assert_cut_at_the_cap(rogue.rogue()).await;
    // Failed as a streamed answer past the cap is.
    let task = r.headers["x-ldp-task-id"].to_str().unwrap();
    let why = gw.ledger_row(task).await.error_message.unwrap_or_default();
    assert!(why.contains(&format!("larger than {CAP} bytes")), "{why}");
    gw.shutdown().await;
}

/// A streaming A2A agent that answers `SendStreamingMessage` with comments: the task fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_stream_of_comments_is_cut_at_the_answer_cap() {
    let card = json!({"name": "comments", "version": "1", "capabilities": {"streaming": true},
        "supportedInterfaces": [{"url": "/", "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"}],
        "skills": [{"id": SKILL, "name": SKILL}]});
    let rogue = Rogue::start(move |path, _| {
        if path.starts_with("/.well-known/agent") {
            Answer::Json(card.clone())
        } else {
            comments()
        }
    })
    .await;
    let gw = TestGateway::builder()
        .entry(DelegateConfig {
            name: Some("comments".into()),
            kind: DelegateKind::A2a,
            ..DelegateConfig::new(rogue.url())
        })
        .spawn()
        .await;
    let c = gw.client();
    let (session, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let answer = c.task(&session, SKILL, json!("talk"), "text").await;
    assert_eq!(answer["type"], "TASK_FAILED", "{answer}");
    assert_cut_at_the_cap(&rogue).await;
    gw.shutdown().await;
}
