//! Memory of idle client sessions, and of the conversations the gateway keeps in them for
//! OpenAI-backed delegates: resident memory per session (the process's RSS growth over 20,000
//! sessions, each count of turns measured in a fresh process, since freed memory is reused),
//! for sessions with 0, 1, 4 and 16 remembered turns of one skill (each turn a 100-byte
//! question and a 400-byte answer). (A counting allocator would be exact, but this crate
//! forbids `unsafe`, which a `GlobalAlloc` needs.)
//!
//! `cargo bench --bench session_memory`

#[path = "support/sessions.rs"]
mod sessions;

use ldp_gateway::session::SessionTable;
use ldp_gateway::{chat::Turn, state::conversation_store::ConversationMemory};
use sessions::new_session;
use std::sync::Arc;

const SESSIONS: usize = 20_000;
const QUESTION: usize = 100;
const ANSWER: usize = 400;

/// Resident bytes of this process now (`/proc/self/statm`; 0 where there is none).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Opens the sessions with `turns` turns each; the RSS growth per session.
fn measure(turns: usize) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build();
    let Ok(rt) = rt else { return 0.0 };
    let _guard = rt.enter();
    let table = SessionTable::default();
    let memory = ConversationMemory::new(usize::MAX);
    let before = rss();
    let mut kept = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        let s = table.open(new_session(i));
        for t in 0..turns {
            let turn = Turn {
                user: Arc::from("q".repeat(QUESTION).as_str()),
                assistant: Arc::from(format!("{t:0>ANSWER$}").as_str()),
            };
            memory.push(&s.tenant, &s.id, "chat", turn, usize::MAX, s.ttl);
        }
        kept.push(s);
    }
    let per = rss().saturating_sub(before) as f64 / SESSIONS as f64;
    std::hint::black_box((&kept, &memory));
    per
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(turns) = args
        .iter()
        .position(|a| a == "--turns")
        .and_then(|i| args.get(i + 1))
    {
        println!("{}", measure(turns.parse().unwrap_or(0)));
        return;
    }
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    println!("| turns kept | bytes per idle session (RSS) | of which text | overhead |");
    println!("|---|---|---|---|");
    for turns in [0usize, 1, 4, 16] {
        let out = std::process::Command::new(&me)
            .args(["--turns", &turns.to_string()])
            .output();
        let per: f64 = out
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(f64::NAN);
        let text = (turns * (QUESTION + ANSWER)) as f64;
        println!("| {turns} | {per:.0} | {text:.0} | {:.0} |", per - text);
    }
}
