//! `ldp-gateway delegate`: run one simulated delegate (`ldp_gateway::sim`), with `--openai` a
//! simulated OpenAI-compatible server (`ldp_gateway::sim::openai`), or with `--anthropic` a
//! simulated Anthropic Messages API server (`ldp_gateway::sim::anthropic`), until Ctrl-C or
//! SIGTERM.

use super::serve::Stop;
use anyhow::Context as _;
use ldp_gateway::ldp::PayloadMode;
use ldp_gateway::secret::Secret;
use ldp_gateway::sim::anthropic::{self, AnthropicOptions};
use ldp_gateway::sim::openai::{self, OpenAiOptions};
use ldp_gateway::sim::{load_card, spawn, SimOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;

/// Flags of `ldp-gateway delegate`.
#[derive(clap::Args, Debug, Clone)]
pub struct DelegateArgs {
    /// Identity card (JSON, RFC or reference dialect); required unless `--openai` or
    /// `--anthropic`.
    #[arg(long, required_unless_present_any = ["openai", "anthropic"], conflicts_with_all = ["openai", "anthropic"])]
    pub card: Option<PathBuf>,
    /// Serve the OpenAI chat-completions API (`/v1/models`, `/v1/chat/completions`) instead.
    #[arg(long, conflicts_with = "anthropic")]
    pub openai: bool,
    /// Serve the Anthropic Messages API (`/v1/models`, `/v1/messages`,
    /// `/v1/messages/count_tokens`) instead.
    #[arg(long)]
    pub anthropic: bool,
    /// With `--openai` or `--anthropic`: a model it serves (repeat for more; others get a 404).
    /// Default `sim-gpt`, `sim-claude`.
    #[arg(long = "model", conflicts_with = "card")]
    pub models: Vec<String>,
    /// With `--openai` or `--anthropic`: probability (0..=1) of a 429 with `Retry-After`.
    /// Default 0.
    #[arg(long, conflicts_with = "card")]
    pub rate_limit_rate: Option<f64>,
    /// With `--anthropic`: probability (0..=1) of a 529 `overloaded_error`. Default 0.
    #[arg(long, requires = "anthropic")]
    pub overload_rate: Option<f64>,
    /// With `--openai` or `--anthropic`: the 429's `Retry-After` in seconds. Default 1.
    #[arg(long, conflicts_with = "card")]
    pub retry_after: Option<u64>,
    /// With `--openai` or `--anthropic`: the environment variable holding the API key it
    /// requires.
    #[arg(long, conflicts_with = "card")]
    pub api_key_env: Option<String>,
    /// With `--openai`: prompts estimated above this many tokens get `context_length_exceeded`.
    #[arg(long, requires = "openai")]
    pub context_window: Option<u64>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Latency of every task in ms. Absent: each skill's declared p50 latency from the card
    /// (capability hint, else the card's `latency_profile`), 0 if it declares none (with
    /// `--openai` or `--anthropic`: 0).
    #[arg(long)]
    pub latency_ms: Option<u64>,
    /// Uniform jitter in ms, added to or taken from the latency.
    #[arg(long, default_value_t = 0, conflicts_with_all = ["openai", "anthropic"])]
    pub jitter_ms: u64,
    /// Probability (0..=1) that a task fails with the retryable `SIMULATED_FAILURE` (with
    /// `--openai` or `--anthropic`: that an answer is a 500).
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Payload modes whose tasks always fail validation (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["openai", "anthropic"])]
    pub fail_mode: Vec<String>,
    /// Probability (0..=1) of the right answer `{"answer": <expected>}` to a task whose input
    /// carries `expected` (else `{"answer": {"wrong": <expected>}}`), and of an honest verdict.
    #[arg(long, conflicts_with_all = ["openai", "anthropic"])]
    pub accuracy: Option<f64>,
    /// Offer the `verify` skill and judge verification tasks (correctly with probability
    /// `--accuracy`, default 1).
    #[arg(long, conflicts_with_all = ["openai", "anthropic"])]
    pub verifier: bool,
    /// A verifier that passes everything (implies `--verifier`; its card claims `--accuracy`
    /// as its quality at `verify`): for tests and the demo of learned verifier reliability.
    #[arg(long, conflicts_with_all = ["openai", "anthropic"])]
    pub rubber_stamp: bool,
    /// Seed for the right/wrong draws (reproducible runs); default random.
    #[arg(long, conflicts_with_all = ["openai", "anthropic"])]
    pub seed: Option<u64>,
}

/// Binds, prints `listening on URL` (the readiness line), serves until Ctrl-C or SIGTERM.
pub async fn run(args: DelegateArgs) -> anyhow::Result<()> {
    // Before the readiness line: a signal sent the moment it is read must find its handler.
    let mut stop = Stop::listen();
    check_rate("--fail-rate", args.fail_rate)?;
    if let Some(accuracy) = args.accuracy {
        check_rate("--accuracy", accuracy)?;
    }
    if args.anthropic {
        return run_anthropic(args, stop).await;
    }
    let Some(card) = &args.card else {
        return run_openai(args, stop).await;
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
    stop.wait().await;
    handle.shutdown().await;
    Ok(())
}

/// `--openai`: a simulated OpenAI-compatible server; the readiness line names its `/v1` base URL.
async fn run_openai(args: DelegateArgs, mut stop: Stop) -> anyhow::Result<()> {
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
    opts.api_key = api_key(args.api_key_env.as_deref())?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let handle = openai::spawn(listener, opts).await?;
    ready(&handle.url())?;
    tracing::info!(url = %handle.url(), "simulated OpenAI server up");
    stop.wait().await;
    handle.shutdown().await;
    Ok(())
}

/// `--anthropic`: a simulated Anthropic server; the readiness line names its base URL.
async fn run_anthropic(args: DelegateArgs, mut stop: Stop) -> anyhow::Result<()> {
    let mut opts = AnthropicOptions::new("sim-claude");
    if !args.models.is_empty() {
        opts.models = args.models;
    }
    opts.rate_limit_rate = args.rate_limit_rate.unwrap_or(0.0);
    check_rate("--rate-limit-rate", opts.rate_limit_rate)?;
    opts.overload_rate = args.overload_rate.unwrap_or(0.0);
    check_rate("--overload-rate", opts.overload_rate)?;
    opts.latency = Duration::from_millis(args.latency_ms.unwrap_or(0));
    opts.fail_rate = args.fail_rate;
    opts.retry_after_secs = args.retry_after.unwrap_or(opts.retry_after_secs);
    opts.api_key = api_key(args.api_key_env.as_deref())?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let handle = anthropic::spawn(listener, opts).await?;
    ready(&handle.url())?;
    tracing::info!(url = %handle.url(), "simulated Anthropic server up");
    stop.wait().await;
    handle.shutdown().await;
    Ok(())
}

/// The key named by `--api-key-env`, if given: set and not empty.
fn api_key(var: Option<&str>) -> anyhow::Result<Option<Secret>> {
    let Some(var) = var else {
        return Ok(None);
    };
    let key = std::env::var(var).with_context(|| format!("--api-key-env: ${var} is not set"))?;
    anyhow::ensure!(!key.is_empty(), "--api-key-env: ${var} is empty");
    Ok(Some(Secret::new(key)))
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
