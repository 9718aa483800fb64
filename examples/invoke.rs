//! Invoke a skill through the gateway (or any LDP endpoint) with the `ldp-client` adapter:
//! `cargo run --example invoke -- ldp://127.0.0.1:8700 summarize "Some text to summarize."`

use ldp_client::{Adapter, Config, Task};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), ldp_client::Error> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "ldp://127.0.0.1:8700".into());
    let skill = args.next().unwrap_or_else(|| "summarize".into());
    let text = args
        .next()
        .unwrap_or_else(|| "LDP routes tasks to delegates.".into());
    // `Config::default()` plus, for a gateway with tenants, `api_key: Secret::from_env(…)`.
    let adapter = Adapter::new(Config::default())?;
    let input = json!({"task_type": "summarization", "instruction": "Summarize", "input": text});
    let outcome = adapter.call(&url, Task::new(skill, input)).await?;
    println!("{:#}", outcome.output); // the output, its provenance under `ldp_provenance`
    println!(
        "answered by {} in {:?}",
        outcome.answered_by, outcome.elapsed
    );
    adapter.close().await; // SESSION_CLOSE now, before the runtime ends
    Ok(())
}
