//! `ldp-gateway delegate`: run one simulated delegate (`ldp_gateway::sim`) until Ctrl-C.

use anyhow::Context as _;
use ldp_gateway::ldp::PayloadMode;
use ldp_gateway::sim::{load_card, spawn, SimOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;

/// Flags of `ldp-gateway delegate`.
#[derive(clap::Args, Debug, Clone)]
pub struct DelegateArgs {
    /// Identity card (JSON, RFC or reference dialect).
    #[arg(long)]
    pub card: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Latency of every task in ms. Absent: each skill's declared p50 latency from the card
    /// (capability hint, else the card's `latency_profile`), 0 if it declares none.
    #[arg(long)]
    pub latency_ms: Option<u64>,
    /// Uniform jitter in ms, added to or taken from the latency.
    #[arg(long, default_value_t = 0)]
    pub jitter_ms: u64,
    /// Probability (0..=1) that a task fails with the retryable `SIMULATED_FAILURE`.
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Payload modes whose tasks always fail validation (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    pub fail_mode: Vec<String>,
}

/// Binds, prints `listening on URL` (the readiness line), serves until Ctrl-C.
pub async fn run(args: DelegateArgs) -> anyhow::Result<()> {
    let card = load_card(&args.card)?;
    let mut opts = SimOptions::new(card);
    match args.latency_ms {
        Some(ms) => opts.latency = Duration::from_millis(ms),
        None => opts.card_latency = true,
    }
    opts.jitter = Duration::from_millis(args.jitter_ms);
    if !(0.0..=1.0).contains(&args.fail_rate) {
        anyhow::bail!(
            "--fail-rate must be between 0 and 1, got {}",
            args.fail_rate
        );
    }
    opts.fail_rate = args.fail_rate;
    for mode in &args.fail_mode {
        let parsed = PayloadMode::parse(mode.trim())
            .with_context(|| format!("--fail-mode: unknown payload mode `{mode}`"))?;
        opts.fail_modes.push(parsed);
    }
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let handle = spawn(listener, opts).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", handle.url())?;
        out.flush()?;
    }
    tracing::info!(delegate = %handle.state().card().delegate_id, url = %handle.url(), "simulated delegate up");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    handle.shutdown().await;
    Ok(())
}
