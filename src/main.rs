//! `ldp-gateway`: parse the command line and hand over to the library.

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the request path allocates many small, short-lived
/// buffers across threads, where glibc spent ~13% of the gateway's CPU under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "ldp-gateway",
    version,
    about = "One LDP endpoint in front of many LLM delegates"
)]
struct Cli {
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
    Demo(ldp_gateway::demo::DemoArgs),
    /// Run one simulated LDP delegate.
    Delegate(ldp_gateway::sim::DelegateArgs),
    /// Explain the routing decision for a skill from the config and the delegates' live cards.
    Route {
        /// The skill.
        #[arg(long)]
        skill: String,
        /// The policy (default: what selection would choose).
        #[arg(long)]
        policy: Option<String>,
        /// The tenant (for `[match] tenants`).
        #[arg(long)]
        tenant: Option<String>,
        /// The client trust domain (default: the gateway's own).
        #[arg(long)]
        trust_domain: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Config file (TOML).
        #[arg(long, default_value = "config/gateway.toml")]
        config: PathBuf,
    },
    /// Print provenance rows from the ledger database.
    Provenance {
        /// Rows of this client task id.
        #[arg(long)]
        task: Option<String>,
        /// Rows of this client session id.
        #[arg(long)]
        session: Option<String>,
        /// Rows of this delegate (registry name).
        #[arg(long)]
        delegate: Option<String>,
        /// Rows of this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Rows since a duration ago (`1h`) or an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Most rows to print.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// `json` or `csv`.
        #[arg(long, default_value = "json")]
        format: String,
        /// The SQLite file (default: `provenance.store` of the config).
        #[arg(long)]
        db: Option<PathBuf>,
        /// Config file (TOML).
        #[arg(long, default_value = "config/gateway.toml")]
        config: PathBuf,
    },
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    ldp_gateway::telemetry::init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Serve { config } => {
            runtime.block_on(ldp_gateway::server::serve_from_file(&config))
        }
        Command::Demo(args) => runtime.block_on(ldp_gateway::demo::run(args)),
        Command::Delegate(args) => runtime.block_on(ldp_gateway::sim::run(args)),
        Command::Route {
            skill,
            policy,
            tenant,
            trust_domain,
            json,
            config,
        } => {
            let x = runtime.block_on(ldp_gateway::server::explain_from_file(
                &config,
                &skill,
                policy.as_deref(),
                tenant.as_deref(),
                trust_domain.as_deref(),
            ))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&x)?);
            } else {
                print!("{}", x.to_table());
            }
            Ok(())
        }
        Command::Provenance {
            task,
            session,
            delegate,
            tenant,
            since,
            limit,
            format,
            db,
            config,
        } => {
            let q = ldp_gateway::provenance::Query {
                session_id: session,
                task_id: task,
                delegate,
                tenant,
                since_ms: None,
                limit: Some(limit),
                offset: None,
            };
            let out = ldp_gateway::provenance::print_from_file(
                db.as_deref(),
                &config,
                q,
                since.as_deref(),
                &format,
            )?;
            print!("{out}");
            Ok(())
        }
        Command::HashKey { generate } => {
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
        Command::Check { config } => {
            let problems = ldp_gateway::config::check_file(&config);
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
    }
}
