//! The command line: one subcommand per file of `cli/`, each glue between flags and the
//! library. Only the binary sees this module, so `clap` and `anyhow` stay out of the library.

mod call;
mod delegate;
mod demo;
mod provenance;
mod route;
mod serve;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// `ldp-gateway`.
#[derive(Parser)]
#[command(
    name = "ldp-gateway",
    version,
    about = "One LDP endpoint in front of many LLM delegates"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// Config file (TOML); environment `LDP_GATEWAY_…` (`__` nests) overrides it.
        #[arg(long, default_value = "config/gateway.toml")]
        config: PathBuf,
    },
    /// Start simulated delegates and a gateway on loopback, drive sample traffic, keep serving.
    Demo(demo::DemoArgs),
    /// Run one simulated LDP delegate, or (`--openai`) a simulated OpenAI-compatible server.
    Delegate(delegate::DelegateArgs),
    /// Explain the routing decision for a skill from the config and the delegates' live cards.
    Route(route::RouteArgs),
    /// Print provenance rows from the ledger database.
    Provenance(provenance::ProvenanceArgs),
    /// Run one task against an LDP endpoint (a delegate or a gateway) and print its output,
    /// provenance and timing; or, with `--discover`, its card.
    #[command(after_help = call::AFTER_HELP)]
    Call(call::CallArgs),
    /// Print the SHA-256 of an API key for `[[tenants]] api_key_sha256` (the key is read from
    /// standard input, or generated when `--generate` is given).
    HashKey {
        /// Generate a new random key, print it and its hash.
        #[arg(long)]
        generate: bool,
    },
    /// Validate a config file and its policy directory; exit 1 on any problem.
    Check {
        /// Config file (TOML).
        #[arg(long, default_value = "config/gateway.toml")]
        config: PathBuf,
    },
}

impl Cli {
    /// Whether the subcommand sets up its own logging (the demo: into its data directory).
    pub fn logs_itself(&self) -> bool {
        matches!(self.command, Command::Demo(_))
    }

    /// Runs the subcommand; the exit code is `call`'s (every other subcommand succeeds or
    /// fails with an error). `serve` runs on a current-thread runtime, the first of the
    /// gateway's serving threads (one per core, `server::conn::spawn_threads`); the others on
    /// a multi-threaded one.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let runtime = match self.command {
            Command::Serve { .. } => tokio::runtime::Builder::new_current_thread(),
            _ => tokio::runtime::Builder::new_multi_thread(),
        }
        .enable_all()
        .build()?;
        let done = match self.command {
            Command::Call(args) => return runtime.block_on(call::run(args)),
            Command::Serve { config } => runtime.block_on(serve::run(&config)),
            Command::Demo(args) => runtime.block_on(demo::run(args)),
            Command::Delegate(args) => runtime.block_on(delegate::run(args)),
            Command::Route(args) => runtime.block_on(route::run(args)),
            Command::Provenance(args) => provenance::run(args),
            Command::HashKey { generate } => hash_key(generate),
            Command::Check { config } => check(&config),
        };
        done.map(|()| ExitCode::SUCCESS)
    }
}

/// `ldp-gateway hash-key`.
fn hash_key(generate: bool) -> anyhow::Result<()> {
    if generate {
        let key = format!(
            "ldpk-{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        println!("key:    {key}");
        println!("sha256: {}", ldp_gateway::secret::hash_key(&key));
    } else {
        let mut key = String::new();
        std::io::stdin().read_line(&mut key)?;
        if key.trim().is_empty() {
            anyhow::bail!("no key on standard input (or use --generate)");
        }
        println!("{}", ldp_gateway::secret::hash_key(&key));
    }
    Ok(())
}

/// `ldp-gateway check`: every problem on its own line, exit 1 if there is any.
fn check(config: &std::path::Path) -> anyhow::Result<()> {
    let problems = ldp_gateway::config::check_file(config);
    for p in &problems {
        println!("{p}");
    }
    if problems.is_empty() {
        println!("{}: ok", config.display());
        Ok(())
    } else {
        std::process::exit(1)
    }
}
