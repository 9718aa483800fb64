//! `ldp-gateway route`: explain a routing decision from the config's delegates (their cards
//! fetched once), its policies and the quality learnt in its ledger, without starting a
//! gateway.

use ldp_gateway::config::Config;
use ldp_gateway::registry::{self, ExplainQuery, Registry};
use ldp_gateway::server::ServerError;
use ldp_gateway::upstream::{CardLimits, UpstreamClient};
use std::path::PathBuf;

/// Flags of `ldp-gateway route`.
#[derive(clap::Args)]
pub struct RouteArgs {
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
}

/// Loads the config and policies, fetches every card once, prints the explanation.
pub async fn run(args: RouteArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let policies = ldp_gateway::policy::load_dir(&config.policies.dir, &config.policies.default)
        .map_err(ServerError::Policies)?;
    let registry = Registry::from_config(
        &config.delegates,
        config.outlier,
        config.security.expose_delegate_addresses,
    )?;
    // The client the gateway fetches cards with: same identity, deadlines and card limits.
    let mut client = UpstreamClient::new(
        config.identity.delegate_id.clone(),
        config.upstream.connect_timeout,
        config.upstream.handshake_timeout,
    );
    client.set_card_limits(CardLimits {
        max_bytes: config.discovery.max_card_bytes,
        max_capabilities: config.discovery.max_capabilities,
        concurrency: config.discovery.concurrency,
    });
    registry
        .poll_all(&client, config.discovery.fetch_timeout, true)
        .await;
    // Without the ledger the explanation still stands, on the cards' claims alone.
    if let Err(e) = learn_from_ledger(&registry, &config) {
        eprintln!("note: learned quality not read from the ledger ({e}); declared quality only");
    }
    let x = registry::explain(
        &registry,
        &policies,
        &config.routing,
        &config.identity.trust_domain.name,
        &ExplainQuery {
            skill: &args.skill,
            policy: args.policy.as_deref(),
            tenant: args
                .tenant
                .as_deref()
                .unwrap_or(ldp_gateway::tenant::ANONYMOUS),
            client_domain: args.trust_domain.as_deref(),
        },
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&x)?);
    } else {
        print!("{}", x.to_table());
    }
    Ok(())
}

/// Learned quality as the gateway would have it: rebuilt from the ledger's votes and ratings
/// (nothing when no ledger exists yet).
fn learn_from_ledger(registry: &Registry, config: &Config) -> anyhow::Result<()> {
    let Some(mut ledger) = super::provenance::open_for_reading(&config.provenance.store)? else {
        return Ok(());
    };
    let q = &config.quality;
    let since = q.since_ms(chrono::Utc::now().timestamp_millis());
    registry.set_quality_half_life(q.half_life);
    registry.set_trusted_raters(ldp_gateway::config::trusted_raters(&config.tenants));
    registry.rebuild_quality(&ledger.evidence(since, q.max_evidence)?);
    Ok(())
}
