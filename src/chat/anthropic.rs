//! Anthropic's Messages dialect in the pipeline's words, both ways: a request's `system`,
//! messages and parameters read as a [`Conversation`] and one written from it; an answer's
//! stop reason, content blocks and tool calls read and written; a stream's events read as
//! pieces ([`PieceReader`]) and pieces written as events ([`EventWriter`]).

use super::{
    text_of, Answer, Chat, Conversation, Delta, Dialect, Finish, Image, Native, Part, Role, Said,
    Tool, ToolCall, ToolCallPiece, ToolChoice,
};
use serde_json::{json, Map, Value};

/// An Anthropic request read as a conversation: `system` (a string or text blocks); each
/// message's text, images, `tool_use` and `tool_result` blocks; `tools` with an input schema,
/// `tool_choice`, `stop_sequences`, `temperature`, `top_p`. Blocks without a neutral word
/// (thinking, documents, server tools' calls) are left out: they only travel to an Anthropic
/// delegate, as they came.
pub(super) fn read(chat: &Chat) -> Conversation {
    let p = &chat.params;
    let mut c = Conversation {
        system: p.get("system").map(text_of).unwrap_or_default(),
        ..Conversation::default()
    };
    for m in &chat.messages {
        let role = match m.role.as_str() {
            "assistant" => Role::Assistant,
            _ => Role::User,
        };
        let parts: Vec<Part> = match &m.content {
            Value::String(s) => vec![Part::Text(s.clone())],
            Value::Array(blocks) => blocks.iter().filter_map(part).collect(),
            _ => Vec::new(),
        };
        if parts.is_empty() {
            continue;
        }
        match c.turns.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => c.turns.push(Said { role, parts }),
        }
    }
    if let Some(Value::Array(tools)) = p.get("tools") {
        c.tools = tools.iter().filter_map(tool).collect();
    }
    c.tool_choice =
        p.get("tool_choice")
            .and_then(|v| match v.get("type").and_then(Value::as_str)? {
                "auto" => Some(ToolChoice::Auto),
                "any" => Some(ToolChoice::Any),
                "none" => Some(ToolChoice::None),
                "tool" => Some(ToolChoice::Named(v.get("name")?.as_str()?.to_owned())),
                _ => None,
            });
    if let Some(Value::Array(stops)) = p.get("stop_sequences") {
        c.stop = stops
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    c.temperature = p.get("temperature").and_then(Value::as_f64);
    c.top_p = p.get("top_p").and_then(Value::as_f64);
    c
}

/// A content block in neutral words, if it has some.
fn part(b: &Value) -> Option<Part> {
    let text = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_owned);
    match b.get("type")?.as_str()? {
        "text" => Some(Part::Text(text("text")?)),
        "image" => {
            let s = b.get("source")?;
            let get = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_owned);
            match s.get("type")?.as_str()? {
                "base64" => Some(Part::Image(Image::Data {
                    media_type: get("media_type")?,
                    data: get("data")?,
                })),
                "url" => Some(Part::Image(Image::Url(get("url")?))),
                _ => None,
            }
        }
        "tool_use" => Some(Part::ToolUse(ToolCall {
            id: text("id").unwrap_or_default(),
            name: text("name")?,
            input: b.get("input").cloned().unwrap_or_else(|| json!({})),
        })),
        "tool_result" => Some(Part::ToolResult {
            id: text("tool_use_id").unwrap_or_default(),
            text: b.get("content").map(text_of).unwrap_or_default(),
            is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        }),
        _ => None,
    }
}

/// A `tools` entry with an input schema (a server tool, which has none, is Anthropic's own).
fn tool(v: &Value) -> Option<Tool> {
    Some(Tool {
        name: v.get("name")?.as_str()?.to_owned(),
        description: v
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        schema: v.get("input_schema")?.clone(),
    })
}

/// A conversation as Anthropic's `system`, messages and parameters (`tools`, `tool_choice`,
/// `stop_sequences`, `temperature`, `top_p`): the turns alternate, a user's tool results
/// first in its turn, a lone text as a string.
pub fn write(c: &Conversation) -> (Option<Value>, Vec<Value>, Map<String, Value>) {
    let system = (!c.system.is_empty()).then(|| Value::String(c.system.clone()));
    let mut messages: Vec<Value> = Vec::with_capacity(c.turns.len());
    let mut last_role = None;
    for said in &c.turns {
        let mut blocks: Vec<Value> = said.parts.iter().map(block).collect();
        // A user's tool results come first in its turn, as Anthropic requires.
        blocks.sort_by_key(|b| b["type"] != "tool_result");
        if blocks.is_empty() {
            continue;
        }
        let role = match said.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        if last_role == Some(role) {
            if let Some(Value::Array(prev)) = messages.last_mut().map(|m| &mut m["content"]) {
                prev.extend(blocks);
                continue;
            }
        }
        last_role = Some(role);
        messages.push(json!({"role": role, "content": blocks}));
    }
    // A lone text block reads as a string.
    for m in &mut messages {
        if let Value::Array(blocks) = &m["content"] {
            if let [only] = blocks.as_slice() {
                if only["type"] == "text" {
                    m["content"] = only["text"].clone();
                }
            }
        }
    }
    let mut params = Map::new();
    if !c.tools.is_empty() {
        let tools = c.tools.iter().map(|t| {
            let mut v = json!({"name": t.name, "input_schema": t.schema});
            if let Some(d) = &t.description {
                v["description"] = Value::String(d.clone());
            }
            v
        });
        params.insert("tools".into(), tools.collect());
    }
    if let Some(choice) = &c.tool_choice {
        let v = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Any => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Named(n) => json!({"type": "tool", "name": n}),
        };
        params.insert("tool_choice".into(), v);
    }
    if !c.stop.is_empty() {
        params.insert("stop_sequences".into(), json!(c.stop));
    }
    if let Some(t) = c.temperature {
        // OpenAI's range is 0–2, Anthropic's 0–1: a hotter request is as hot as it goes here.
        params.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
    }
    if let Some(p) = c.top_p {
        params.insert("top_p".into(), json!(p));
    }
    (system, messages, params)
}

/// A part as a content block.
fn block(p: &Part) -> Value {
    match p {
        Part::Text(t) => json!({"type": "text", "text": t}),
        Part::Image(Image::Url(u)) => json!({"type": "image", "source": {"type": "url", "url": u}}),
        Part::Image(Image::Data { media_type, data }) => json!({"type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data}}),
        Part::ToolUse(call) => tool_use(call),
        Part::ToolResult { id, text, is_error } => {
            let mut b = json!({"type": "tool_result", "tool_use_id": id, "content": text});
            if *is_error {
                b["is_error"] = Value::Bool(true);
            }
            b
        }
    }
}

/// A call as a `tool_use` block.
fn tool_use(call: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
}

/// A `stop_reason` (and the stop sequence met) in neutral words.
pub fn finish(reason: &str, sequence: Option<&str>) -> Finish {
    match reason {
        "end_turn" => Finish::Done,
        "max_tokens" => Finish::Length,
        "stop_sequence" => Finish::StopSequence(sequence.map(str::to_owned)),
        "tool_use" => Finish::ToolUse,
        "refusal" => Finish::Refused,
        other => Finish::Other(Dialect::Anthropic, other.to_owned()),
    }
}

/// A finish as Anthropic's `stop_reason` and `stop_sequence`.
pub fn stop_reason(f: &Finish) -> (&str, Option<&str>) {
    match f {
        Finish::Done => ("end_turn", None),
        Finish::Length => ("max_tokens", None),
        Finish::StopSequence(s) => ("stop_sequence", s.as_deref()),
        Finish::ToolUse => ("tool_use", None),
        Finish::Refused => ("refusal", None),
        Finish::Other(Dialect::Anthropic, s) => (s, None),
        Finish::Other(Dialect::OpenAi, _) => ("end_turn", None),
    }
}

/// The text of an answer's content blocks, joined.
pub fn text(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The calls of an answer's `tool_use` blocks.
pub fn tool_calls(blocks: &[Value]) -> Vec<ToolCall> {
    blocks
        .iter()
        .filter_map(|b| match part(b) {
            Some(Part::ToolUse(call)) if b["type"] == "tool_use" => Some(call),
            _ => None,
        })
        .collect()
}

/// An answer's content blocks, for an Anthropic client: an Anthropic delegate's as they came,
/// else its text (when it has some) and its calls as `tool_use` blocks (an empty answer has
/// none, as Anthropic answers).
pub fn content(text: &str, answer: &Answer) -> Vec<Value> {
    if let Some(Value::Array(blocks)) =
        Native::of(answer.native.as_ref(), Dialect::Anthropic).and_then(|f| f.get("content"))
    {
        return blocks.clone();
    }
    let mut blocks = Vec::with_capacity(answer.tool_calls.len() + 1);
    // An empty text block is refused when sent back in the next request: none is written.
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    blocks.extend(answer.tool_calls.iter().map(tool_use));
    blocks
}

/// The events a stream carries for content block `index` of a whole message, in order:
/// `content_block_start` (the block begun empty), one delta with all of it, then
/// `content_block_stop`. A block of a type with no known delta begins whole.
pub fn block_events(index: usize, block: &Value) -> Vec<(&'static str, Map<String, Value>)> {
    let event = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let start = |b: Value| {
        event(json!({"type": "content_block_start", "index": index, "content_block": b}))
    };
    let delta =
        |d: Value| event(json!({"type": "content_block_delta", "index": index, "delta": d}));
    let mut out = Vec::with_capacity(4);
    match block["type"].as_str() {
        Some("text") => {
            out.push((
                "content_block_start",
                start(json!({"type": "text", "text": ""})),
            ));
            let text = block["text"].as_str().unwrap_or_default();
            out.push((
                "content_block_delta",
                delta(json!({"type": "text_delta", "text": text})),
            ));
        }
        Some("tool_use") => {
            let mut begun = block.clone();
            begun["input"] = json!({});
            out.push(("content_block_start", start(begun)));
            let input = block
                .get("input")
                .map_or_else(|| "{}".to_owned(), Value::to_string);
            out.push((
                "content_block_delta",
                delta(json!({"type": "input_json_delta", "partial_json": input})),
            ));
        }
        Some("thinking") => {
            out.push((
                "content_block_start",
                start(json!({"type": "thinking", "thinking": "", "signature": ""})),
            ));
            let thinking = block["thinking"].as_str().unwrap_or_default();
            out.push((
                "content_block_delta",
                delta(json!({"type": "thinking_delta", "thinking": thinking})),
            ));
            out.push((
                "content_block_delta",
                delta(json!({"type": "signature_delta", "signature": block["signature"]})),
            ));
        }
        _ => out.push(("content_block_start", start(block.clone()))),
    }
    out.push((
        "content_block_stop",
        event(json!({"type": "content_block_stop", "index": index})),
    ));
    out
}

/// Reads an Anthropic stream's content events as pieces: text deltas as text, `tool_use`
/// blocks and their `input_json_delta`s as numbered tool-call pieces (calls counted apart
/// from the other blocks, as OpenAI numbers them), every event kept whole as the native part.
#[derive(Debug, Default)]
pub struct PieceReader {
    /// Calls begun so far.
    calls: u32,
    /// The call each `tool_use` block is, by block index (a block begun again is the newer
    /// call): found in one step however many blocks a stream begins.
    by_block: std::collections::HashMap<u32, u32>,
}

impl PieceReader {
    /// The piece of a `content_block_start`, `content_block_delta` or `content_block_stop`
    /// event (`event` whole, `kind` its type).
    pub fn piece(&mut self, kind: &str, event: Map<String, Value>) -> Delta {
        let index = event
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        let mut d = Delta::default();
        match kind {
            "content_block_start" => {
                let b = event.get("content_block");
                if b.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    let get = |k: &str| {
                        b.and_then(|b| b.get(k))
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    };
                    d.tool_calls.push(ToolCallPiece {
                        index: self.calls,
                        id: get("id"),
                        name: get("name"),
                        arguments: String::new(),
                    });
                    self.by_block.insert(index, self.calls);
                    self.calls = self.calls.saturating_add(1);
                } else if let Some(t) = b.and_then(|b| b.get("text")).and_then(Value::as_str) {
                    d.text = t.to_owned();
                }
            }
            "content_block_delta" => {
                let delta = event.get("delta");
                let get = |k: &str| delta.and_then(|x| x.get(k)).and_then(Value::as_str);
                match get("type") {
                    Some("text_delta") => d.text = get("text").unwrap_or_default().to_owned(),
                    Some("input_json_delta") => {
                        if let Some(&call) = self.by_block.get(&index) {
                            d.tool_calls.push(ToolCallPiece {
                                index: call,
                                arguments: get("partial_json").unwrap_or_default().to_owned(),
                                ..ToolCallPiece::default()
                            });
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        d.native = Some(Native {
            dialect: Dialect::Anthropic,
            fields: event,
        });
        d
    }
}

/// Writes pieces as an Anthropic stream's content events: an Anthropic delegate's events as
/// they came; anyone else's text and tool-call pieces as `text` and `tool_use` blocks, each
/// opened, added to and closed in turn.
#[derive(Debug, Default)]
pub struct EventWriter {
    /// The block open: its index, and the call it is (none: text).
    open: Option<(u32, Option<u32>)>,
    /// Blocks opened so far.
    blocks: u32,
}

impl EventWriter {
    /// The events of `d`, each its type and data.
    pub fn events(&mut self, d: &Delta) -> Vec<(String, Value)> {
        if let Some(fields) = Native::of(d.native.as_ref(), Dialect::Anthropic) {
            let kind = fields
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("content_block_delta")
                .to_owned();
            return vec![(kind, Value::Object(fields.clone()))];
        }
        let mut out = Vec::new();
        if !d.text.is_empty() {
            if !matches!(self.open, Some((_, None))) {
                self.close_into(&mut out);
                self.open_block(json!({"type": "text", "text": ""}), None, &mut out);
            }
            let index = self.blocks - 1;
            out.push(delta_event(
                index,
                json!({"type": "text_delta", "text": d.text}),
            ));
        }
        for p in &d.tool_calls {
            // A call's first piece names it and opens its block; the others add to it.
            if !matches!(self.open, Some((_, Some(c))) if c == p.index) {
                self.close_into(&mut out);
                let block = json!({"type": "tool_use", "id": p.id.clone().unwrap_or_default(),
                    "name": p.name.clone().unwrap_or_default(), "input": {}});
                self.open_block(block, Some(p.index), &mut out);
            }
            if !p.arguments.is_empty() {
                let index = self.blocks - 1;
                out.push(delta_event(
                    index,
                    json!({"type": "input_json_delta", "partial_json": p.arguments}),
                ));
            }
        }
        out
    }

    /// The event that closes the block open, if one is.
    pub fn close(&mut self) -> Option<(String, Value)> {
        let mut out = Vec::new();
        self.close_into(&mut out);
        out.pop()
    }

    fn open_block(&mut self, block: Value, call: Option<u32>, out: &mut Vec<(String, Value)>) {
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((index, call));
        out.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
    }

    fn close_into(&mut self, out: &mut Vec<(String, Value)>) {
        if let Some((index, _)) = self.open.take() {
            out.push((
                "content_block_stop".into(),
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }
}

fn delta_event(index: u32, delta: Value) -> (String, Value) {
    (
        "content_block_delta".into(),
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Message;

    #[test]
    fn an_empty_answer_has_no_empty_text_block() {
        let empty = Answer {
            finish: Some(Finish::Done),
            tool_calls: Vec::new(),
            native: None,
        };
        assert_eq!(content("", &empty), Vec::<Value>::new());
        assert_eq!(
            content("hi", &empty),
            [json!({"type": "text", "text": "hi"})]
        );
    }

    #[test]
    fn a_prompt_counts_tool_results_calls_and_documents_not_just_text() {
        let mut chat = Chat::new(Dialect::Anthropic);
        let big = "x".repeat(10_000);
        chat.messages.push(Message {
            role: "user".into(),
            content: json!([{"type": "tool_result", "tool_use_id": "t1",
                "content": [{"type": "text", "text": big}]},
                {"type": "image", "source": {"type": "base64", "data": "A".repeat(1_000_000)}}]),
            fields: Map::new(),
        });
        let bytes = chat.prompt_bytes();
        assert!((10_000..20_000).contains(&bytes), "{bytes}");
    }

    #[test]
    fn a_tool_loop_reads_and_writes_back_the_same() {
        let messages = [
            ("user", json!("weather in Paris?")),
            (
                "assistant",
                json!([{"type": "thinking", "thinking": "…", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]),
            ),
            (
                "user",
                json!([{"type": "tool_result", "tool_use_id": "t1",
                "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "thanks"}]),
            ),
        ];
        let chat = Chat {
            messages: messages
                .into_iter()
                .map(|(role, content)| Message {
                    role: role.into(),
                    content,
                    fields: Map::new(),
                })
                .collect(),
            params: serde_json::from_value(
                json!({"system": [{"type": "text", "text": "be brief"}],
                "tools": [{"name": "get_weather", "input_schema": {"type": "object"}},
                    {"type": "web_search_20250305", "name": "web_search"}],
                "tool_choice": {"type": "tool", "name": "get_weather"},
                "stop_sequences": ["END"]}),
            )
            .unwrap(),
            ..Chat::new(Dialect::Anthropic)
        };
        let conv = chat.conversation();
        assert_eq!(conv.system, "be brief");
        assert_eq!(conv.tools.len(), 1, "a server tool has no neutral word");
        assert_eq!(conv.turns[1].parts.len(), 2, "thinking is Anthropic's own");
        assert_eq!(
            conv.turns[2].parts[0],
            Part::ToolResult {
                id: "t1".into(),
                text: "sunny".into(),
                is_error: false
            }
        );
        let (system, messages, params) = write(&conv);
        assert_eq!(system, Some(json!("be brief")));
        assert_eq!(messages[0]["content"], "weather in Paris?");
        assert_eq!(messages[1]["content"][1]["input"], json!({"city": "Paris"}));
        assert_eq!(messages[2]["content"][0]["type"], "tool_result");
        assert_eq!(
            params["tool_choice"],
            json!({"type": "tool", "name": "get_weather"})
        );
        // The same conversation through OpenAI's words and back.
        let (m, p) = crate::chat::openai::write(&conv);
        let back = Chat {
            messages: m
                .into_iter()
                .map(|v| {
                    let Value::Object(mut o) = v else { panic!() };
                    Message {
                        role: o.remove("role").unwrap().as_str().unwrap().to_owned(),
                        content: o.remove("content").unwrap_or(Value::Null),
                        fields: o,
                    }
                })
                .collect(),
            params: p,
            ..Chat::new(Dialect::OpenAi)
        };
        assert_eq!(back.conversation(), conv);
    }

    #[test]
    fn stop_reasons_round_trip() {
        for r in [
            "end_turn",
            "max_tokens",
            "tool_use",
            "refusal",
            "pause_turn",
        ] {
            assert_eq!(stop_reason(&finish(r, None)), (r, None));
        }
        assert_eq!(
            stop_reason(&finish("stop_sequence", Some("END"))),
            ("stop_sequence", Some("END"))
        );
        // A reason of the other dialect's own is a plain stop here, and the other way round.
        let other = super::super::openai::finish("function_call");
        assert_eq!(stop_reason(&other), ("end_turn", None));
        assert_eq!(
            super::super::openai::finish_reason(&finish("pause_turn", None)),
            "stop"
        );
    }

    #[test]
    fn a_whole_messages_blocks_are_the_events_a_stream_carries() {
        let mut pieces = PieceReader::default();
        let blocks = [
            json!({"type": "thinking", "thinking": "hm", "signature": "s"}),
            json!({"type": "text", "text": "hi"}),
            json!({"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}),
        ];
        let mut text = String::new();
        let mut args = String::new();
        for (i, b) in blocks.iter().enumerate() {
            let events = block_events(i, b);
            assert_eq!(events.first().map(|e| e.0), Some("content_block_start"));
            assert_eq!(events.last().map(|e| e.0), Some("content_block_stop"));
            for (kind, event) in events {
                assert_eq!(event["index"], i);
                let d = pieces.piece(kind, event);
                text.push_str(&d.text);
                args.extend(d.tool_calls.iter().map(|c| c.arguments.as_str()));
            }
        }
        assert_eq!(text, "hi");
        assert_eq!(args, r#"{"a":1}"#);
    }

    #[test]
    fn pieces_written_as_blocks_open_add_and_close_in_turn() {
        let mut w = EventWriter::default();
        let text = |t: &str| Delta {
            text: t.into(),
            ..Delta::default()
        };
        let call = |id: Option<&str>, args: &str| Delta {
            tool_calls: vec![ToolCallPiece {
                index: 0,
                id: id.map(str::to_owned),
                name: id.map(|_| "f".to_owned()),
                arguments: args.into(),
            }],
            ..Delta::default()
        };
        let kinds = |events: Vec<(String, Value)>| {
            events
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", v["index"]))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds(w.events(&text("a"))),
            ["content_block_start:0", "content_block_delta:0"]
        );
        assert_eq!(kinds(w.events(&text("b"))), ["content_block_delta:0"]);
        assert_eq!(
            kinds(w.events(&call(Some("c1"), ""))),
            ["content_block_stop:0", "content_block_start:1"]
        );
        assert_eq!(
            kinds(w.events(&call(None, "{\"a\":1}"))),
            ["content_block_delta:1"]
        );
        assert_eq!(
            w.close().map(|(k, _)| k).as_deref(),
            Some("content_block_stop")
        );
        assert_eq!(w.close(), None);
        // And read back.
        let mut r = PieceReader::default();
        let start = json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "c1", "name": "f", "input": {}}});
        let Value::Object(start) = start else {
            unreachable!()
        };
        let p = r.piece("content_block_start", start);
        assert_eq!(p.tool_calls[0].index, 0);
        let delta = json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{}"}});
        let Value::Object(delta) = delta else {
            unreachable!()
        };
        assert_eq!(
            r.piece("content_block_delta", delta).tool_calls[0].arguments,
            "{}"
        );
    }
}
