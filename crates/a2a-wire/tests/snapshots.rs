//! Snapshots: canonical objects the gateway will write, byte for byte, checked in under
//! `tests/snapshots/<type>__<name>.json` and reviewed like code. `A2A_WIRE_BLESS=1 cargo test
//! -p a2a-wire --test snapshots` rewrites them after an intended change. The SDK checks the
//! same files strictly (`tests/it/a2a_wire.rs` in the workspace root).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use a2a_wire::card::{
    AgentCapabilities, AgentExtension, AgentInterface, AgentProvider, AgentSkill,
    SecurityRequirement, StringList,
};
use a2a_wire::v1::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use a2a_wire::{v03, AgentCard, ErrorCode, ErrorObject, Id, Map, Response, SecurityScheme};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;

fn map(v: Value) -> Map {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn gateway_card() -> AgentCard {
    let url = "http://127.0.0.1:8080/a2a";
    let interface = |version: &str| AgentInterface {
        url: url.into(),
        protocol_binding: "JSONRPC".into(),
        protocol_version: version.into(),
        ..AgentInterface::default()
    };
    let skill = |id: &str, name: &str, description: &str| AgentSkill {
        id: id.into(),
        name: name.into(),
        description: description.into(),
        tags: vec!["ldp".into(), id.into()],
        ..AgentSkill::default()
    };
    AgentCard {
        name: "LDP Gateway".into(),
        description: "One LDP endpoint in front of many LLM delegates.".into(),
        supported_interfaces: vec![interface("1.0"), interface("0.3")],
        provider: Some(AgentProvider {
            url: "https://example.org".into(),
            organization: "Example".into(),
            ..AgentProvider::default()
        }),
        version: "0.1.0".into(),
        capabilities: Some(AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: vec![AgentExtension {
                uri: "https://ldp.example/a2a/ext/identity/v1".into(),
                description: "LDP identity (RFC §9.1 ldp.* labels)".into(),
                required: None,
                params: Some(map(json!({
                    "ldp.delegate_id": "ldp:delegate:gateway",
                    "ldp.trust_domain": "default",
                    "ldp.model_family": "gateway",
                }))),
                rest: Map::new(),
            }],
            ..AgentCapabilities::default()
        }),
        security_schemes: [(
            "bearer".to_owned(),
            SecurityScheme::http_bearer("the tenant's API key"),
        )]
        .into(),
        security_requirements: vec![SecurityRequirement {
            schemes: [("bearer".to_owned(), StringList::default())].into(),
            rest: Map::new(),
        }],
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills: vec![
            skill("summarize", "Summarize", "Summarizes text."),
            skill("translate", "Translate", "Translates text."),
        ],
        ..AgentCard::default()
    }
}

fn agent_says(id: &str, text: &str) -> Message {
    Message::new(id, Role::Agent, vec![Part::text(text)])
}

fn completed_task() -> Task {
    let mut status = TaskStatus::new(TaskState::Completed);
    status.timestamp = Some("2026-03-01T12:00:01.250Z".into());
    Task {
        id: "task-1".into(),
        context_id: "session-1".into(),
        status,
        artifacts: vec![Artifact {
            artifact_id: "task-1-output".into(),
            name: "output".into(),
            description: String::new(),
            parts: vec![Part::text("A short summary.")],
            metadata: None,
            extensions: Vec::new(),
            rest: Map::new(),
        }],
        history: Vec::new(),
        metadata: Some(map(json!({"ldp_provenance": {
            "produced_by": "ldp:delegate:sim-fast",
            "model_version": "sim-1.0",
            "verification_status": "unverified",
        }}))),
        rest: Map::new(),
    }
}

fn rejected_task() -> Task {
    let mut status = TaskStatus::new(TaskState::Rejected);
    status.message = Some(agent_says(
        "task-2-status",
        "BUDGET_EXCEEDED: the contract's budget is spent",
    ));
    Task {
        id: "task-2".into(),
        context_id: "session-1".into(),
        status,
        artifacts: Vec::new(),
        history: Vec::new(),
        metadata: None,
        rest: Map::new(),
    }
}

fn status_working() -> StreamResponse {
    let mut status = TaskStatus::new(TaskState::Working);
    status.message = Some(agent_says(
        "task-1-routed",
        "routed to ldp:delegate:sim-fast",
    ));
    StreamResponse::StatusUpdate(Box::new(TaskStatusUpdateEvent {
        task_id: "task-1".into(),
        context_id: "session-1".into(),
        status,
        metadata: None,
        rest: Map::new(),
    }))
}

fn artifact_last() -> StreamResponse {
    StreamResponse::ArtifactUpdate(Box::new(TaskArtifactUpdateEvent {
        task_id: "task-1".into(),
        context_id: "session-1".into(),
        artifact: completed_task().artifacts.remove(0),
        append: false,
        last_chunk: true,
        metadata: None,
        rest: Map::new(),
    }))
}

fn task_not_found() -> Response<Value> {
    let err = ErrorObject::a2a(
        ErrorCode::TaskNotFound,
        ErrorCode::TaskNotFound.default_message(),
        map(json!({"taskId": "task-9"})),
    );
    Response::error(Id::from("req-1"), err)
}

fn pretty<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap();
    s.push('\n');
    s
}

/// Every snapshot: file name and content.
fn snapshots() -> Vec<(&'static str, String)> {
    let card = gateway_card();
    let v03 = |t: Task| v03::Task::from(t);
    let err = task_not_found();
    let err03 = Response::<Value>::error(err.id.clone(), err.error.clone().unwrap().to_v03());
    vec![
        ("v1.AgentCard__gateway.json", pretty(&card)),
        (
            "served.AgentCard__gateway.json",
            pretty(&card.served_json()),
        ),
        (
            "v03.AgentCard__gateway.json",
            pretty(&card.v03_card().unwrap()),
        ),
        ("v1.Task__completed.json", pretty(&completed_task())),
        ("v03.Task__completed.json", pretty(&v03(completed_task()))),
        ("v1.Task__rejected.json", pretty(&rejected_task())),
        ("v03.Task__rejected.json", pretty(&v03(rejected_task()))),
        (
            "v1.StreamResponse__status_working.json",
            pretty(&status_working()),
        ),
        (
            "v03.StreamResult__status_working.json",
            pretty(&v03::StreamResult::from(status_working())),
        ),
        (
            "v1.StreamResponse__artifact_last.json",
            pretty(&artifact_last()),
        ),
        (
            "v03.StreamResult__artifact_last.json",
            pretty(&v03::StreamResult::from(artifact_last())),
        ),
        ("jsonrpc.Error__task_not_found.json", pretty(&err)),
        ("jsonrpc.Error__task_not_found_v03.json", pretty(&err03)),
    ]
}

#[test]
fn snapshots_are_unchanged() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let bless = std::env::var("A2A_WIRE_BLESS").is_ok_and(|v| v == "1");
    let wanted = snapshots();
    let mut changed = Vec::new();
    for (name, content) in &wanted {
        let path = dir.join(name);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, content).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(old) if old == *content => {}
            Ok(old) => changed.push(format!("{name}:\n--- checked in\n{old}+++ now\n{content}")),
            Err(e) => changed.push(format!("{name}: {e}\n+++ now\n{content}")),
        }
    }
    // No snapshot file without a case (a renamed case leaves none behind).
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !wanted.iter().any(|(w, _)| *w == name) {
            changed.push(format!("{name}: no case writes it"));
        }
    }
    assert!(
        changed.is_empty(),
        "snapshots differ (A2A_WIRE_BLESS=1 rewrites them after review):\n{}",
        changed.join("\n")
    );
}

/// The snapshots read back into our types unchanged (the writer and the reader agree).
#[test]
fn snapshots_read_back() {
    let card: AgentCard = serde_json::from_str(&pretty(&gateway_card().served_json())).unwrap();
    assert_eq!(
        serde_json::to_value(&card).unwrap(),
        gateway_card().served_json()
    );
    let t: Task = serde_json::from_str(&pretty(&completed_task())).unwrap();
    assert_eq!(t, completed_task());
    let t03: v03::Task = serde_json::from_str(&pretty(&v03::Task::from(rejected_task()))).unwrap();
    assert_eq!(Task::from(t03), rejected_task());
}
