//! OpenAI's chat-completions dialect in the pipeline's words, both ways: a request's messages
//! and parameters read as a [`Conversation`] and one written from it; an answer's finish
//! reason, tool calls and stream pieces read and written.

use super::{
    input_of, text_of, Answer, Chat, Conversation, Delta, Dialect, Finish, Image, Native, Part,
    Role, Said, Tool, ToolCall, ToolCallPiece, ToolChoice,
};
use serde_json::{json, Map, Value};

/// An OpenAI request read as a conversation: `system` and `developer` messages as the system
/// prompt; user text and images; assistant text and `tool_calls`; each `tool` message as a
/// result in the user's turn; `tools` (functions), `tool_choice`, `stop`, `temperature`,
/// `top_p`. Anything else (audio, files, legacy function calls) has no neutral word and is
/// left out.
pub(super) fn read(chat: &Chat) -> Conversation {
    let mut c = Conversation::default();
    for m in &chat.messages {
        match m.role.as_str() {
            "system" | "developer" => {
                if !c.system.is_empty() {
                    c.system.push_str("\n\n");
                }
                c.system.push_str(&m.text());
            }
            "user" => push(&mut c.turns, Role::User, user_parts(&m.content)),
            "assistant" => {
                let mut parts = Vec::new();
                let text = m.text();
                if !text.is_empty() {
                    parts.push(Part::Text(text));
                }
                parts.extend(tool_calls(&m.fields).into_iter().map(Part::ToolUse));
                push(&mut c.turns, Role::Assistant, parts);
            }
            "tool" => {
                let id = m
                    .fields
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let result = Part::ToolResult {
                    id: id.to_owned(),
                    text: text_of(&m.content),
                    is_error: false,
                };
                push(&mut c.turns, Role::User, vec![result]);
            }
            _ => {}
        }
    }
    let p = &chat.params;
    if let Some(Value::Array(tools)) = p.get("tools") {
        c.tools = tools.iter().filter_map(tool).collect();
    }
    c.tool_choice = p.get("tool_choice").and_then(|v| match v {
        Value::String(s) => match s.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "required" => Some(ToolChoice::Any),
            "none" => Some(ToolChoice::None),
            _ => None,
        },
        Value::Object(o) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(|n| ToolChoice::Named(n.to_owned())),
        _ => None,
    });
    c.stop = match p.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    c.temperature = p.get("temperature").and_then(Value::as_f64);
    c.top_p = p.get("top_p").and_then(Value::as_f64);
    c
}

/// `parts` said by `role`, joined to the turn before when it is the same side's (a tool's
/// results and the user's next words are one turn).
fn push(turns: &mut Vec<Said>, role: Role, parts: Vec<Part>) {
    if parts.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(last) if last.role == role => last.parts.extend(parts),
        _ => turns.push(Said { role, parts }),
    }
}

/// A user message's content: its text and images.
fn user_parts(content: &Value) -> Vec<Part> {
    match content {
        Value::String(s) => vec![Part::Text(s.clone())],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => p
                    .get("text")
                    .and_then(Value::as_str)
                    .map(|t| Part::Text(t.to_owned())),
                Some("image_url") => p
                    .get("image_url")
                    .and_then(|i| i.get("url"))
                    .and_then(Value::as_str)
                    .map(|url| Part::Image(image(url))),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An image URL: a `data:` URL's media type and base64 data, else the URL.
fn image(url: &str) -> Image {
    let inline = url.strip_prefix("data:").and_then(|rest| {
        let (media_type, data) = rest.split_once(";base64,")?;
        Some(Image::Data {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        })
    });
    inline.unwrap_or_else(|| Image::Url(url.to_owned()))
}

/// A `tools` entry of type `function`.
fn tool(v: &Value) -> Option<Tool> {
    let f = v.get("function")?;
    Some(Tool {
        name: f.get("name")?.as_str()?.to_owned(),
        description: f
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        schema: f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
    })
}

/// A conversation as OpenAI messages and parameters (`tools`, `tool_choice`, `stop`,
/// `temperature`, `top_p`): the system prompt first, each tool result a `tool` message before
/// the user's words of the same turn.
pub fn write(c: &Conversation) -> (Vec<Value>, Map<String, Value>) {
    let mut messages = Vec::with_capacity(c.turns.len() + 1);
    if !c.system.is_empty() {
        messages.push(json!({"role": "system", "content": c.system}));
    }
    for said in &c.turns {
        match said.role {
            Role::User => {
                let mut content = Vec::new();
                for part in &said.parts {
                    match part {
                        // OpenAI's tool message has no error flag: a failure says so in
                        // its text, so the model does not read it as a result.
                        Part::ToolResult { id, text, is_error } => {
                            let content = if *is_error {
                                format!("Error: {text}")
                            } else {
                                text.clone()
                            };
                            messages.push(json!({
                                "role": "tool", "tool_call_id": id, "content": content}));
                        }
                        Part::Text(t) => content.push(json!({"type": "text", "text": t})),
                        Part::Image(i) => content.push(json!({"type": "image_url",
                            "image_url": {"url": image_url(i)}})),
                        // A user does not call tools; nothing to say of one.
                        Part::ToolUse(_) => {}
                    }
                }
                match content.as_slice() {
                    [] => {}
                    [only] if only["type"] == "text" => {
                        messages.push(json!({"role": "user", "content": only["text"]}));
                    }
                    _ => messages.push(json!({"role": "user", "content": content})),
                }
            }
            Role::Assistant => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for part in &said.parts {
                    match part {
                        Part::Text(t) => text.push_str(t),
                        Part::ToolUse(call) => calls.push(tool_call(call)),
                        // A model neither shows images nor returns results here.
                        Part::Image(_) | Part::ToolResult { .. } => {}
                    }
                }
                let mut m = json!({"role": "assistant",
                    "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                messages.push(m);
            }
        }
    }
    let mut params = Map::new();
    if !c.tools.is_empty() {
        let tools = c.tools.iter().map(|t| {
            let mut f = json!({"name": t.name, "parameters": t.schema});
            if let Some(d) = &t.description {
                f["description"] = Value::String(d.clone());
            }
            json!({"type": "function", "function": f})
        });
        params.insert("tools".into(), tools.collect());
    }
    if let Some(choice) = &c.tool_choice {
        let v = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Any => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Named(n) => json!({"type": "function", "function": {"name": n}}),
        };
        params.insert("tool_choice".into(), v);
    }
    if !c.stop.is_empty() {
        params.insert("stop".into(), json!(c.stop));
    }
    if let Some(t) = c.temperature {
        params.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        params.insert("top_p".into(), json!(p));
    }
    (messages, params)
}

/// An image as an `image_url`'s URL (inline data as a `data:` URL).
fn image_url(i: &Image) -> String {
    match i {
        Image::Url(u) => u.clone(),
        Image::Data { media_type, data } => format!("data:{media_type};base64,{data}"),
    }
}

/// A call as an OpenAI `tool_calls` entry (its input as JSON text).
fn tool_call(call: &ToolCall) -> Value {
    json!({"id": call.id, "type": "function",
        "function": {"name": call.name, "arguments": call.input.to_string()}})
}

/// A `finish_reason` in neutral words.
pub fn finish(reason: &str) -> Finish {
    match reason {
        "stop" => Finish::Done,
        "length" => Finish::Length,
        "tool_calls" => Finish::ToolUse,
        "content_filter" => Finish::Refused,
        other => Finish::Other(Dialect::OpenAi, other.to_owned()),
    }
}

/// A finish as OpenAI's `finish_reason`.
pub fn finish_reason(f: &Finish) -> &str {
    match f {
        Finish::Done | Finish::StopSequence(_) => "stop",
        Finish::Length => "length",
        Finish::ToolUse => "tool_calls",
        Finish::Refused => "content_filter",
        Finish::Other(Dialect::OpenAi, s) => s,
        Finish::Other(Dialect::Anthropic, _) => "stop",
    }
}

/// The calls of an answered message's `tool_calls`.
pub fn tool_calls(fields: &Map<String, Value>) -> Vec<ToolCall> {
    let Some(Value::Array(calls)) = fields.get("tool_calls") else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(|c| {
            let f = c.get("function")?;
            Some(ToolCall {
                id: c.get("id").and_then(Value::as_str).unwrap_or("").to_owned(),
                name: f.get("name")?.as_str()?.to_owned(),
                input: input_of(f.get("arguments").and_then(Value::as_str).unwrap_or("")),
            })
        })
        .collect()
}

/// An answered message's fields besides its role and text, for an OpenAI client: an OpenAI
/// delegate's as they came, else its tool calls written OpenAI's way.
pub fn message_fields(answer: &Answer) -> Map<String, Value> {
    if let Some(fields) = Native::of(answer.native.as_ref(), Dialect::OpenAi) {
        return fields.clone();
    }
    let mut m = Map::new();
    if !answer.tool_calls.is_empty() {
        let calls = answer.tool_calls.iter().map(tool_call).collect();
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    m
}

/// The pieces of tool calls in a streamed delta's `tool_calls`.
pub fn delta_tool_calls(fields: &Map<String, Value>) -> Vec<ToolCallPiece> {
    let Some(Value::Array(calls)) = fields.get("tool_calls") else {
        return Vec::new();
    };
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.get("function");
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
            ToolCallPiece {
                index: c
                    .get("index")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(i as u32),
                id: text(c.get("id")),
                name: text(f.and_then(|f| f.get("name"))),
                arguments: text(f.and_then(|f| f.get("arguments"))).unwrap_or_default(),
            }
        })
        .collect()
}

/// A streamed piece's fields besides its text, for an OpenAI client: an OpenAI delegate's as
/// they came, else its tool-call pieces written OpenAI's way (none: nothing to add).
pub fn delta_fields(delta: &Delta) -> Option<Map<String, Value>> {
    if let Some(fields) = Native::of(delta.native.as_ref(), Dialect::OpenAi) {
        return Some(fields.clone());
    }
    if delta.tool_calls.is_empty() {
        return None;
    }
    let calls = delta.tool_calls.iter().map(|p| {
        let mut f = Map::new();
        if let Some(n) = &p.name {
            f.insert("name".into(), Value::String(n.clone()));
        }
        f.insert("arguments".into(), Value::String(p.arguments.clone()));
        let mut c = json!({"index": p.index, "function": f});
        if let Some(id) = &p.id {
            c["id"] = Value::String(id.clone());
            c["type"] = json!("function");
        }
        c
    });
    let mut m = Map::new();
    m.insert("tool_calls".into(), calls.collect());
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Message;

    fn chat(messages: Value, params: Value) -> Chat {
        let messages = serde_json::from_value::<Vec<Value>>(messages).unwrap();
        Chat {
            messages: messages
                .into_iter()
                .map(|m| {
                    let Value::Object(mut o) = m else { panic!() };
                    let role = o.remove("role").unwrap().as_str().unwrap().to_owned();
                    let content = o.remove("content").unwrap_or(Value::Null);
                    Message {
                        role,
                        content,
                        fields: o,
                    }
                })
                .collect(),
            params: serde_json::from_value(params).unwrap(),
            ..Chat::new(Dialect::OpenAi)
        }
    }

    #[test]
    fn a_tool_loop_reads_and_writes_back_the_same() {
        let c = chat(
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "weather?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ]),
            json!({"tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object"}}}], "tool_choice": "required", "stop": "END",
                "temperature": 0.5}),
        );
        let conv = c.conversation();
        assert_eq!(conv.system, "be brief");
        assert_eq!(conv.turns.len(), 3);
        assert_eq!(
            conv.turns[1].parts,
            [Part::ToolUse(ToolCall {
                id: "c1".into(),
                name: "get_weather".into(),
                input: json!({"city": "Paris"})
            })]
        );
        assert_eq!(conv.tool_choice, Some(ToolChoice::Any));
        assert_eq!(conv.stop, ["END"]);
        let (messages, params) = write(&conv);
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            messages[1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(messages[2]["content"], Value::Null);
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            messages[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
        );
        assert_eq!(params["tool_choice"], "required");
        assert_eq!(params["stop"], json!(["END"]));

        // A failed tool (Anthropic's `is_error`) says so in the tool message's text.
        let failed = Conversation {
            turns: vec![Said {
                role: Role::User,
                parts: vec![Part::ToolResult {
                    id: "c1".into(),
                    text: "no such city".into(),
                    is_error: true,
                }],
            }],
            ..Conversation::default()
        };
        assert_eq!(
            write(&failed).0[0],
            json!({"role": "tool", "tool_call_id": "c1", "content": "Error: no such city"})
        );
    }

    #[test]
    fn finish_reasons_round_trip_and_pieces_carry_their_index() {
        for r in [
            "stop",
            "length",
            "tool_calls",
            "content_filter",
            "function_call",
        ] {
            assert_eq!(finish_reason(&finish(r)), r);
        }
        let Value::Object(fields) = json!({"tool_calls": [{"index": 1, "id": "c", "type": "function",
            "function": {"name": "f", "arguments": ""}}]})
        else {
            unreachable!()
        };
        let pieces = delta_tool_calls(&fields);
        assert_eq!(pieces[0].index, 1);
        assert_eq!(pieces[0].name.as_deref(), Some("f"));
        let d = Delta {
            tool_calls: pieces,
            ..Delta::default()
        };
        assert_eq!(
            delta_fields(&d).unwrap()["tool_calls"][0]["function"]["name"],
            "f"
        );
    }
}
