//! No input makes a reader panic: mangled versions of valid A2A JSON (cut short, bytes
//! replaced, members swapped for other JSON) go through every reader, each of which answers
//! with a value or an error. Readers that accept are checked to write something they read back.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use a2a_wire::{v03, v1, AgentCard, IncomingRequest, Method, ProtocolVersion, Response};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

const SEEDS: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":"r1","method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"},{"data":[1,{"a":null}]},{"raw":"AP8=","mediaType":"x/y"},{"url":"https://u"}],"metadata":{"skill":"s"}},"configuration":{"historyLength":0,"returnImmediately":true}}}"#,
    r#"{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"x"},{"kind":"file","file":{"bytes":"AA==","name":"n"}},{"kind":"data","data":{"value":1},"metadata":{"data_part_compat":true}}]},"configuration":{"blocking":false}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-03-01T12:00:00Z","message":{"messageId":"s","role":"ROLE_AGENT","parts":[{"text":"ok"}]}},"artifacts":[{"artifactId":"a","parts":[{"text":"x"}]}],"metadata":{"k":[1,2.5]}}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}}"#,
    r#"{"jsonrpc":"2.0","id":"x","result":{"kind":"status-update","taskId":"t","contextId":"c","final":true,"status":{"state":"completed"}}}"#,
    r#"{"jsonrpc":"2.0","id":"x","result":{"taskId":"t","contextId":"c","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"y"}]},"append":true}}"#,
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Task not found","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{"taskId":"t"}}]}}"#,
    r#"{"name":"n","description":"d","version":"1","supportedInterfaces":[{"url":"http://h","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"http://h","protocolBinding":"JSONRPC","protocolVersion":"0.3"}],"capabilities":{"streaming":true,"extensions":[{"uri":"u","params":{"a":1}}]},"securitySchemes":{"b":{"httpAuthSecurityScheme":{"scheme":"Bearer"}},"o":{"oauth2SecurityScheme":{"flows":{"clientCredentials":{"tokenUrl":"t","scopes":{"r":"R"}}}}}},"securityRequirements":[{"schemes":{"b":{}}}],"defaultInputModes":[],"defaultOutputModes":[],"skills":[{"id":"s","name":"S","description":"d","tags":["t"]}],"url":"http://h","additionalInterfaces":[{"url":"http://g","transport":"GRPC"}]}"#,
];

/// Reads `text` as `T`; when it reads, what it writes must read again.
fn reads<T: DeserializeOwned + Serialize>(text: &[u8]) {
    if let Ok(t) = serde_json::from_slice::<T>(text) {
        let out = serde_json::to_vec(&t).expect("a read value writes");
        serde_json::from_slice::<T>(&out).expect("what we write reads back");
    }
}

/// Every reader, on every part of `text` a reader would be given.
fn all_readers(text: &[u8]) {
    if let Ok(req) = IncomingRequest::parse(text) {
        let _ = Method::from_name(&req.method);
        let _ = req.params::<v1::SendMessageRequest>();
        let _ = req.params::<v1::GetTaskRequest>();
        let _ = req.params::<v03::MessageSendParams>();
        let _ = req.params::<v03::TaskIdParams>();
    }
    reads::<Response<v1::SendMessageResponse>>(text);
    reads::<Response<v1::StreamResponse>>(text);
    reads::<Response<v03::StreamResult>>(text);
    reads::<Response<v03::SendMessageResult>>(text);
    reads::<Response<Value>>(text);
    reads::<AgentCard>(text);
    if let Ok(card) = serde_json::from_slice::<AgentCard>(text) {
        let _ = card.interfaces();
        let _ = card.served_json();
        let _ = card.v03_card();
    }
    if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(text) {
        for v in m.values() {
            let t = v.to_string();
            reads::<v1::Task>(t.as_bytes());
            reads::<v1::Message>(t.as_bytes());
            reads::<v03::Task>(t.as_bytes());
            reads::<v03::Message>(t.as_bytes());
            if let Ok(r) = serde_json::from_str::<v1::StreamResponse>(&t) {
                let _ = serde_json::to_vec(&v03::StreamResult::from(r)).unwrap();
            }
            if let Ok(r) = serde_json::from_str::<v03::StreamResult>(&t) {
                let _ = serde_json::to_vec(&v1::StreamResponse::from(r)).unwrap();
            }
            if let Ok(p) = serde_json::from_str::<v03::MessageSendParams>(&t) {
                let _ = serde_json::to_vec(&v1::SendMessageRequest::from(p)).unwrap();
            }
            if let Ok(p) = serde_json::from_str::<v1::SendMessageRequest>(&t) {
                let _ = serde_json::to_vec(&v03::MessageSendParams::from(p)).unwrap();
            }
        }
    }
}

fn mangled() -> impl Strategy<Value = Vec<u8>> {
    (
        0..SEEDS.len(),
        any::<prop::sample::Index>(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        prop::sample::select(vec![
            "",
            "null",
            "[]",
            "{}",
            "0",
            "-1",
            "1e999",
            "\"\"",
            "\"\\ud800\"",
            "true",
            "[[[[1]]]]",
        ]),
    )
        .prop_map(|(seed, cut, flips, splice)| {
            let mut b = SEEDS[seed].as_bytes().to_vec();
            for (at, byte) in flips {
                let i = at.index(b.len());
                b[i] = byte;
            }
            // Replace everything after a ':' with other JSON, or cut the text short.
            let at = cut.index(b.len() + 1);
            match b.iter().skip(at).position(|c| *c == b':') {
                Some(p) if !splice.is_empty() => {
                    b.truncate(at + p + 1);
                    b.extend_from_slice(splice.as_bytes());
                    b.extend_from_slice(b"}}}");
                }
                _ => b.truncate(at),
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mangled_json_never_panics(text in mangled()) {
        all_readers(&text);
    }

    #[test]
    fn headers_and_names_never_panic(s in ".{0,24}") {
        let _ = ProtocolVersion::from_header(Some(&s));
        let _ = Method::from_name(&s);
    }
}

#[test]
fn seeds_read() {
    for s in SEEDS {
        all_readers(s.as_bytes());
        serde_json::from_str::<Value>(s).expect("seed is JSON");
    }
    let card: AgentCard = serde_json::from_str(SEEDS[7]).unwrap();
    assert_eq!(card.interfaces().len(), 2);
}

#[test]
fn deep_nesting_is_an_error() {
    let deep = format!(
        r#"{{"messageId":"m","role":"ROLE_USER","parts":[{{"data":{}1{}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(serde_json::from_str::<v1::Message>(&deep).is_err());
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"metadata":{{"a":{}{}}}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    // The envelope skips over params without recursing; reading them hits the limit.
    let req = IncomingRequest::parse(body.as_bytes()).unwrap();
    let err = req.params::<v1::SendMessageRequest>().unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");
}
