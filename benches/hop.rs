//! One-task latency: direct to a zero-latency simulated delegate vs through the gateway, in one
//! run, sequential requests over keep-alive. `cargo bench --bench hop [-- TASKS]`.

#[path = "support/propose.rs"]
mod propose;

use ldp_client::Transport;
use ldp_gateway::config::{Config, DelegateConfig};
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode};
use ldp_gateway::server::Gateway;
use ldp_gateway::sim::{self, SimOptions};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

async fn run(client: &Transport, base: &str, tasks: usize) -> anyhow::Result<Vec<Duration>> {
    let sid = propose::session(client, base, TIMEOUT).await?;
    let mut out = Vec::with_capacity(tasks);
    for i in 0..tasks + tasks / 10 {
        let env = Envelope::new(
            sid.as_str(),
            client.from_id(),
            "x",
            Body::TaskSubmit {
                task_id: format!("t{i}").into(),
                skill: "echo".into(),
                input: serde_json::json!("hello").into(),
                contract: None,
            },
            PayloadMode::Text,
        );
        let t = Instant::now();
        let reply = client.send(base, &env, TIMEOUT).await?;
        let took = t.elapsed();
        if !matches!(reply.body, Body::TaskResult { .. }) {
            anyhow::bail!("task failed: {:?}", reply.body);
        }
        if i >= tasks / 10 {
            out.push(took); // the first 10% warm the connection pools
        }
    }
    out.sort();
    Ok(out)
}

fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let tasks: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let card: IdentityCard = serde_json::from_value(serde_json::json!({
        "delegate_id": "ldp:delegate:fast", "name": "fast", "model_family": "sim", "model_version": "1",
        "trust_domain": "default", "context_window": 8192, "supported_payload_modes": ["text"],
        "capabilities": [{"name": "echo", "quality": {"quality_score": 0.9, "supports_streaming": false}}]
    }))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let delegate = sim::spawn(listener, SimOptions::new(card)).await?;
    let mut cfg = Config::default();
    cfg.server.listen = "127.0.0.1:0".parse()?;
    cfg.admin.listen = "127.0.0.1:0".parse()?;
    cfg.delegates = vec![DelegateConfig::new(delegate.url())];
    let gw = Gateway::start(cfg).await?;
    let client = Transport::new("ldp:client:bench", TIMEOUT, TIMEOUT);

    let direct = run(&client, &delegate.url(), tasks).await?;
    let via = run(&client, &gw.ldp_url(), tasks).await?;
    println!("one-task latency, {tasks} sequential tasks, 1 connection, zero-latency delegate");
    println!("{:<10} {:>10} {:>10} {:>10}", "path", "p50", "p99", "p99.9");
    for (name, v) in [("direct", &direct), ("gateway", &via)] {
        println!(
            "{name:<10} {:>10.3?} {:>10.3?} {:>10.3?}",
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 0.999)
        );
    }
    let added = pct(&via, 0.5).saturating_sub(pct(&direct, 0.5));
    println!(
        "added by the gateway at p50: {added:.3?} ({:.2}x direct)",
        pct(&via, 0.5).as_secs_f64() / pct(&direct, 0.5).as_secs_f64()
    );
    gw.shutdown().await;
    delegate.shutdown().await;
    Ok(())
}
