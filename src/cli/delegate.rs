//! `ldp-gateway delegate`: run one simulated delegate (`ldp_gateway::sim`), or with `--openai` a
//! simulated OpenAI-compatible server (`ldp_gateway::sim::openai`), until Ctrl-C.

use anyhow::Context as _;
use ldp_gateway::ldp::PayloadMode;
use ldp_gateway::secret::Secret;
use ldp_gateway::sim::openai::{self, OpenAiOptions};
use ldp_gateway::sim::{load_card, spawn, SimOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;

/// Flags of `ldp-gateway delegate`.
#[derive(clap::Args, Debug, Clone)]
pub struct DelegateArgs {
    /// Identity card (JSON, RFC or reference dialect); required unless `--openai`.
    #[arg(long, required_unless_present = "openai", conflicts_with = "openai")]
    pub card: Option<PathBuf>,
    /// Serve the OpenAI chat-completions API (`/v1/models`, `/v1/chat/completions`) instead.
    #[arg(long)]
    pub openai: bool,
    /// With `--openai`: a model it serves (repeat for more; others get a 404). Default `sim-gpt`.
    #[arg(long = "model", conflicts_with = "card")]
    pub models: Vec<String>,
    /// With `--openai`: probability (0..=1) of a 429 with `Retry-After`. Default 0.
    #[arg(long, conflicts_with = "card")]
    pub rate_limit_rate: Option<f64>,
    /// With `--openai`: the 429's `Retry-After` in seconds. Default 1.
    #[arg(long, conflicts_with = "card")]
    pub retry_after: Option<u64>,
    /// With `--openai`: the environment variable holding the API key it requires.
    #[arg(long, conflicts_with = "card")]
    pub api_key_env: Option<String>,
    /// With `--openai`: prompts estimated above this many tokens get `context_length_exceeded`.
    #[arg(long, conflicts_with = "card")]
    pub context_window: Option<u64>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Latency of every task in ms. Absent: each skill's declared p50 latency from the card
    /// (capability hint, else the card's `latency_profile`), 0 if it declares none (with
    /// `--openai`: 0).
    #[arg(long)]
    pub latency_ms: Option<u64>,
    /// Uniform jitter in ms, added to or taken from the latency.
    #[arg(long, default_value_t = 0, conflicts_with = "openai")]
    pub jitter_ms: u64,
    /// Probability (0..=1) that a task fails with the retryable `SIMULATED_FAILURE` (with
    /// `--openai`: that a completion gets a 500).
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Payload modes whose tasks always fail validation (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', conflicts_with = "openai")]
    pub fail_mode: Vec<String>,
    /// Probability (0..=1) of the right answer `{"answer": <expected>}` to a task whose input
    /// carries `expected` (else `{"answer": {"wrong": <expected>}}`), and of an honest verdict.
    #[arg(long, conflicts_with = "openai")]
    pub accuracy: Option<f64>,
    /// Offer the `verify` skill and judge verification tasks (correctly with probability
    /// `--accuracy`, default 1).
    #[arg(long, conflicts_with = "openai")]
    pub verifier: bool,
    /// A verifier that passes everything (implies `--verifier`; its card claims `--accuracy`
    /// as its quality at `verify`): for tests and the demo of learned verifier reliability.
    #[arg(long, conflicts_with = "openai")]
    pub rubber_stamp: bool,
    /// Seed for the right/wrong draws (reproducible runs); default random.
    #[arg(long, conflicts_with = "openai")]
    pub seed: Option<u64>,
}

/// Binds, prints `listening on URL` (the readiness line), serves until Ctrl-C.
pub async fn run(args: DelegateArgs) -> anyhow::Result<()> {
    check_rate("--fail-rate", args.fail_rate)?;
    if let Some(accuracy) = args.accuracy {
        check_rate("--accuracy", accuracy)?;
    }
    let Some(card) = &args.card else {
        return run_openai(args).await;
    };
    let card = load_card(card)?;
    let mut opts = SimOptions::new(card);
    match args.latency_ms {
        Some(ms) => opts.latency = Duration::from_millis(ms),
        None => opts.card_latency = true,
    }
    opts.jitter = Duration::from_millis(args.jitter_ms);
    opts.fail_rate = args.fail_rate;
    for mode in &args.fail_mode {
        let parsed = PayloadMode::parse(mode.trim())
            .with_context(|| format!("--fail-mode: unknown payload mode `{mode}`"))?;
        opts.fail_modes.push(parsed);
    }
    opts.accuracy = args.accuracy;
    opts.verifier = args.verifier;
    opts.rubber_stamp = args.rubber_stamp;
    opts.seed = args.seed;
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let handle = spawn(listener, opts).await?;
    ready(&handle.url())?;
    tracing::info!(delegate = %handle.state().card().delegate_id, url = %handle.url(), "simulated delegate up");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    handle.shutdown().await;
    Ok(())
}

/// `--openai`: a simulated OpenAI-compatible server; the readiness line names its `/v1` base URL.
async fn run_openai(args: DelegateArgs) -> anyhow::Result<()> {
    let rate_limit_rate = args.rate_limit_rate.unwrap_or(0.0);
    check_rate("--rate-limit-rate", rate_limit_rate)?;
    let mut opts = OpenAiOptions::new("sim-gpt");
    if !args.models.is_empty() {
        opts.models = args.models;
    }
    opts.latency = Duration::from_millis(args.latency_ms.unwrap_or(0));
    opts.fail_rate = args.fail_rate;
    opts.rate_limit_rate = rate_limit_rate;
    opts.retry_after_secs = args.retry_after.unwrap_or(opts.retry_after_secs);
    opts.context_window = args.context_window;
    if let Some(var) = &args.api_key_env {
        let key =
            std::env::var(var).with_context(|| format!("--api-key-env: ${var} is not set"))?;
        anyhow::ensure!(!key.is_empty(), "--api-key-env: ${var} is empty");
        opts.api_key = Some(Secret::new(key));
    }
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let handle = openai::spawn(listener, opts).await?;
    ready(&handle.url())?;
    tracing::info!(url = %handle.url(), "simulated OpenAI server up");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    handle.shutdown().await;
    Ok(())
}

fn check_rate(flag: &str, rate: f64) -> anyhow::Result<()> {
    anyhow::ensure!(
        (0.0..=1.0).contains(&rate),
        "{flag} must be between 0 and 1, got {rate}"
    );
    Ok(())
}

/// Prints the readiness line `listening on URL`.
fn ready(url: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {url}")?;
    out.flush()?;
    Ok(())
}
