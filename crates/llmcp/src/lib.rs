//! Laika LLMCP v1 (seed `002_…`, "Laika LLM Context Protocol – JSON + Markdown"): the wire
//! types of the `/llmcp` bridge (issue 26) and the pure rules around them.
//!
//! - [`read_request`]: bytes → [`Request`], or a [`ReadError`] (unsupported protocol or
//!   version named first, then serde's field and line:column). [`Probe::of`] reads what it
//!   can of a refused packet (its id, its conversation) for the [`ErrorPacket`] answering it.
//! - [`Response`] (`Response::answering` a request), [`Assistant`] (title, `render`
//!   [`Node`] tree or `markdown`, [`Citation`]s with their [`Locator`]), [`ToolCall`]s.
//! - [`read_answer`] / [`read`]: a model's answer checked against the response schema and
//!   the tool validator ([`tools::validate`]); [`Assistant::markdown`]: the Markdown fallback.
//! - [`write()`]: any packet → JSON bytes; `read(write(p)) == p` for every packet read.
//!
//! Packets keep the fields they do not model (`rest`), so nothing a sender adds is dropped;
//! tool calls are the exception, strict as the seed demands.
//!
//! # Where the seed is ambiguous, and what this crate chose
//!
//! 1. **Error form.** The seed defines none. [`ErrorPacket`]: the response envelope with
//!    `type: "error"`, `in_reply_to` and `conversation` when the request's could be read,
//!    and `error: {code, message, retryable, supported?}`.
//! 2. **What the model returns in JSON mode.** "JSON that matches the response schema": the
//!    whole packet or just `{assistant, tool_calls}` are both read; the envelope is the
//!    gateway's to set. One outer Markdown code fence is stripped (the seed's "safe repair
//!    mode"); nothing else is repaired.
//! 3. **`render` vs `markdown`.** `render` is "required in JSON mode", yet `markdown` alone
//!    is "accepted as a lenient fallback": an answer needs one of the two.
//! 4. **The doc tree.** Only `doc`, `paragraph` and `text` are shown: any node type is kept,
//!    the root must be `doc`, the tree is bounded ([`answer::MAX_RENDER_DEPTH`],
//!    [`answer::MAX_RENDER_NODES`]).
//! 5. **Citations.** Fields are "recommended": a citation must name `source_id` or `doc_id`
//!    (else it cites nothing); `confidence` must be within 0..1; `locator.type` is one of
//!    the two shown.
//! 6. **Unknown tools or keys.** "Reject … at the boundary": a tool call the validator
//!    refuses (unknown name, unknown or missing key, wrong type, a key beside `name` and
//!    `arguments`) makes the whole answer invalid (so it is repaired or falls back to
//!    Markdown, which carries no tool calls) rather than being silently dropped.
//! 7. **`trust`.** Only `"untrusted"` is named; anything but an explicit `"trusted"`
//!    (absent included) is read as untrusted.
//! 8. **Required fields.** The "full envelope" fields are required; `input.user_message` is
//!    optional (a transform has none), `input.task.name` is required (it names the skill),
//!    `context` and `output` default to empty and JSON.
//! 9. **Markdown mode and JSON.** "The host may still accept JSON": a Markdown-mode answer
//!    that is a valid JSON answer is read as one, without its tool calls.
//! 10. **Versions.** `protocol.version` must be the integer 1 (`"1"` or `1.0` are another
//!     version).
//!
//! And what the gateway's bridge (`src/frontend/llmcp.rs`) chose where the seed leaves it open:
//!
//! 11. **Transport.** "User content: the serialized request packet (or its input + context)":
//!     the delegate gets one text — task, args, user message, each document between
//!     `BEGIN`/`END DOCUMENT` lines whose fence id is the first 16 hex digits of the
//!     document's own SHA-256 (unforgeable from inside it), its `markdown` raw and the rest of
//!     its content as JSON metadata — then the answer format.
//! 12. **Repair.** "Optionally … a safe repair mode": one more task with the original text,
//!     what was wrong and the first 4 KiB of the answer; the fallback takes the *repaired*
//!     answer's whole output (the last the model said), or the first's when the repair could
//!     not run.
//! 13. **Storage.** "Digests + short previews": the ledger keeps each document's id, kind,
//!     trust, size and SHA-256, and no preview of its content at all (a page's first
//!     sentences are its text); user message, task and args are kept ("always store: user
//!     prompts").
//! 14. **Provenance.** An extra top-level `ldp_gateway` field on the response (task ids,
//!     policy, delegate, the LDP provenance, `repaired`, `fallback`).

pub mod answer;
pub mod error;
pub mod packet;
pub mod tools;

pub use answer::{
    read, read_answer, read_markdown, Assistant, Citation, Format, Locator, LocatorType,
    ModelAnswer, Node,
};
pub use error::{AnswerError, ReadError, ToolError};
pub use packet::{
    Context, Conversation, Document, ErrorBody, ErrorPacket, InReplyTo, Input, Output, PacketType,
    Probe, Protocol, Request, Response, Role, Sender, Task, UserMessage, PROTOCOL_NAME,
    PROTOCOL_VERSION,
};
pub use tools::ToolCall;

/// Longest packet id, conversation id or task name read.
pub const MAX_ID_BYTES: usize = 256;
/// Most context documents of one request.
pub const MAX_DOCUMENTS: usize = 256;

/// Reads a request packet: `protocol` first (an unsupported one is named as such, whatever
/// else is wrong), then `type`, then the whole schema and the bounds.
pub fn read_request(bytes: &[u8]) -> Result<Request, ReadError> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        protocol: Option<serde_json::Value>,
        #[serde(default, rename = "type")]
        kind: Option<serde_json::Value>,
    }
    let invalid = |e: serde_json::Error| ReadError::Invalid(cut(&e.to_string(), 256));
    let head: Head = serde_json::from_slice(bytes).map_err(invalid)?;
    let protocol: Protocol = match head.protocol {
        None => return Err(ReadError::NoProtocol),
        Some(p) => serde_json::from_value(p).map_err(|_| ReadError::NoProtocol)?,
    };
    if !protocol.is_supported() {
        return Err(ReadError::Unsupported {
            name: cut(&protocol.name, 64),
            version: cut(&protocol.version.to_string(), 64),
        });
    }
    match head.kind.as_ref().and_then(|k| k.as_str()) {
        Some("request") => {}
        Some(other) => return Err(ReadError::NotARequest(cut(other, 64))),
        None => return Err(ReadError::Invalid("missing field `type`".into())),
    }
    let req: Request = serde_json::from_slice(bytes).map_err(invalid)?;
    let name = &req.input.task.name;
    if name.trim().is_empty() {
        return Err(ReadError::Field(
            "`input.task.name` must not be empty".into(),
        ));
    }
    for (what, v) in [
        ("id", &req.id),
        ("conversation.id", &req.conversation.id),
        ("input.task.name", name),
    ] {
        if v.len() > MAX_ID_BYTES {
            return Err(ReadError::Field(format!(
                "`{what}` is over {MAX_ID_BYTES} bytes"
            )));
        }
    }
    if req.context.documents.len() > MAX_DOCUMENTS {
        return Err(ReadError::Field(format!(
            "more than {MAX_DOCUMENTS} context documents"
        )));
    }
    Ok(req)
}

/// Any packet as JSON bytes.
pub fn write<T: serde::Serialize>(packet: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(packet)
}

/// Client text for an error message: at most `max` characters.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's "summarize this page" request, as written there.
    pub const SEED_REQUEST: &str = r###"{
  "protocol": { "name": "laika.llmcp", "version": 1 },
  "id": "req-1",
  "type": "request",
  "created_at": "2026-01-28T12:34:56.789Z",
  "conversation": { "id": "c-1", "turn": 1 },
  "sender": { "role": "agent" },
  "input": {
    "user_message": { "id": "u-1", "text": "summarize this page" },
    "task": { "name": "web.summarize", "args": { "style": "concise" } }
  },
  "context": {
    "documents": [
      {
        "doc_id": "doc:web:summary",
        "kind": "web.observation.summary.v1",
        "trust": "untrusted",
        "content": {
          "doc_type": "web.observation.summary.v1",
          "url": "https://example.com",
          "title": "Example",
          "markdown": "# Example\\n\\n..."
        }
      }
    ]
  },
  "output": { "format": "json" }
}"###;

    /// The seed's "summarize this page" response, as written there.
    pub const SEED_RESPONSE: &str = r###"{
  "protocol": { "name": "laika.llmcp", "version": 1 },
  "id": "res-1",
  "type": "response",
  "created_at": "2026-01-28T12:34:57.123Z",
  "conversation": { "id": "c-1", "turn": 1 },
  "sender": { "role": "assistant" },
  "in_reply_to": { "request_id": "req-1" },
  "assistant": {
    "title": "Summary",
    "markdown": "## Summary\\n\\n- ...\\n\\n## What to verify\\n\\n- ...",
    "citations": [{ "doc_id": "doc:web:summary", "url": "https://example.com", "quote": "..." }]
  },
  "tool_calls": []
}"###;

    #[test]
    fn the_seeds_request_reads_and_round_trips() {
        let req = read_request(SEED_REQUEST.as_bytes()).unwrap();
        assert_eq!(req.id, "req-1");
        assert_eq!(req.input.task.name, "web.summarize");
        assert_eq!(req.input.task.args["style"], "concise");
        assert_eq!(
            req.input.user_message.as_ref().unwrap().text,
            "summarize this page"
        );
        assert_eq!(req.output.format, Format::Json);
        let doc = &req.context.documents[0];
        assert!(doc.is_untrusted());
        assert_eq!(doc.content["url"], "https://example.com");
        let written = write(&req).unwrap();
        assert_eq!(read_request(&written).unwrap(), req);
        // Nothing lost: the same JSON value as the seed's.
        let a: serde_json::Value = serde_json::from_slice(&written).unwrap();
        let b: serde_json::Value = serde_json::from_str(SEED_REQUEST).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn the_seeds_response_reads_and_round_trips() {
        let res: Response = serde_json::from_str(SEED_RESPONSE).unwrap();
        assert_eq!(res.in_reply_to.request_id, "req-1");
        assert_eq!(res.sender.role, Role::Assistant);
        let c = &res.assistant.citations[0];
        assert_eq!(c.doc_id.as_deref(), Some("doc:web:summary"));
        assert_eq!(c.quote.as_deref(), Some("..."));
        let written = write(&res).unwrap();
        let back: Response = serde_json::from_slice(&written).unwrap();
        assert_eq!(back, res);
        let a: serde_json::Value = serde_json::from_slice(&written).unwrap();
        let b: serde_json::Value = serde_json::from_str(SEED_RESPONSE).unwrap();
        assert_eq!(a, b);
        // As a model's answer, it passes the checks.
        let answer = read_answer(SEED_RESPONSE).unwrap();
        assert_eq!(answer.assistant, res.assistant);
    }

    #[test]
    fn the_seeds_citation_with_locator_and_render_tree_read() {
        let c: Citation = serde_json::from_str(
            r#"{"source_id": "src_123", "url": "https://example.com/story",
                "quote": "The launch is expected in Q2.",
                "locator": {"type": "text_fragment", "value": "launch is expected in Q2"},
                "confidence": 0.72}"#,
        )
        .unwrap();
        assert_eq!(c.locator.as_ref().unwrap().kind, LocatorType::TextFragment);
        assert_eq!(c.confidence, Some(0.72));
        let a: Assistant = serde_json::from_str(
            r#"{"title": "Optional short title", "render": {"type": "doc", "children": [
                {"type": "paragraph", "children": [{"type": "text", "text": "Markdown content..."}]}]},
                "citations": [{"source_id": "src:1", "url": "https://...", "quote": "short supporting excerpt"}]}"#,
        )
        .unwrap();
        answer::check_tree(a.render.as_ref().unwrap()).unwrap();
        let back: Assistant = serde_json::from_slice(&write(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn unsupported_protocols_and_bad_requests_are_named() {
        let with = |from: &str, to: &str| SEED_REQUEST.replacen(from, to, 1);
        let cases = [
            (
                with("laika.llmcp", "laika.other"),
                "unsupported protocol \"laika.other\"",
            ),
            (with("\"version\": 1", "\"version\": 2"), "version 2"),
            (
                with("\"version\": 1", "\"version\": \"1\""),
                "version \"1\"",
            ),
            (with("\"protocol\"", "\"protocol_\""), "missing `protocol`"),
            (
                with("\"type\": \"request\"", "\"type\": \"response\""),
                "not \"response\"",
            ),
            (
                with("\"name\": \"web.summarize\"", "\"name\": \"\""),
                "must not be empty",
            ),
            (
                with("\"role\": \"agent\"", "\"role\": \"robot\""),
                "unknown variant `robot`",
            ),
            (with("\"turn\": 1", "\"turn\": -1"), "invalid value"),
            ("{".to_owned(), "EOF"),
        ];
        for (text, why) in cases {
            let e = read_request(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
        let e = read_request(with("laika.llmcp", "x").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("`laika.llmcp` version 1"), "{e}");
    }

    #[test]
    fn an_error_packet_answers_what_could_be_read() {
        let probe = Probe::of(SEED_REQUEST.replace("laika.llmcp", "x").as_bytes());
        assert_eq!(probe.id.as_deref(), Some("req-1"));
        let e = ErrorPacket::new(
            probe,
            "err-1".into(),
            "t".into(),
            ErrorBody {
                code: "UNSUPPORTED_PROTOCOL".into(),
                message: "m".into(),
                retryable: false,
                supported: Some(vec![Protocol::v1()]),
            },
        );
        let v: serde_json::Value = serde_json::from_slice(&write(&e).unwrap()).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["in_reply_to"]["request_id"], "req-1");
        assert_eq!(v["conversation"]["id"], "c-1");
        assert_eq!(v["error"]["supported"][0]["version"], 1);
        assert_eq!(Probe::of(b"not json"), Probe::default());
    }
}
