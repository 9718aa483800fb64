//! `ldp-gateway demo`: a fleet of simulated delegates and a gateway on loopback, sample
//! traffic under every shipped policy and under blind routing, a cost/latency summary, a quiz
//! in which verification catches a delegate whose card lies about its quality, then the
//! gateway keeps serving until Ctrl-C.
//!
//! Everything runs offline on free ports (unless pinned by flags), with its files (policies,
//! provenance) in a fresh temporary directory removed at exit, so two demos, or a demo and a
//! test, never collide. The first line printed is `LDP endpoint: http://…`, as soon as the
//! gateway answers, so scripts can connect while the sample traffic runs.

mod fleet;
mod ingress;
mod quiz;
mod report;
mod traffic;

use super::serve::Stop;
use anyhow::Context as _;
use fleet::Member;
use ldp_gateway::config::Config;
use ldp_gateway::routing::TierPrices;
use ldp_gateway::server::Gateway;
use ldp_gateway::upstream::UpstreamClient;
use report::{LatencyRow, PolicyReport, TokenRow};
use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use traffic::{Direct, Outcome, Target, Via};

/// `ldp-gateway demo` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Address of the gateway's LDP listener (default: a free loopback port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub ldp_listen: SocketAddr,
    /// Address of the admin listener: /metrics, /admin/* (default: a free loopback port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin_listen: SocketAddr,
    /// Sample tasks per policy (the same list for every policy and for blind routing).
    #[arg(long, default_value_t = 50)]
    pub tasks: usize,
    /// Tasks in flight per policy.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// Quiz tasks (with known answers) under the unverified and then the verified policy, in
    /// batches of 20 (0: no quiz).
    #[arg(long, default_value_t = 200)]
    pub quiz_tasks: usize,
    /// Exit after printing the summary instead of serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
}

/// The demo's gateway config (see the file: ports and paths are replaced at run time).
const DEMO_CONFIG: &str = include_str!("../../config/demo.toml");

/// The shipped policies, in the order their tables are printed.
const POLICIES: [(&str, &str); 6] = [
    ("balanced", include_str!("../../policies/balanced.toml")),
    ("cheapest", include_str!("../../policies/cheapest.toml")),
    (
        "best-quality",
        include_str!("../../policies/best-quality.toml"),
    ),
    (
        "low-latency",
        include_str!("../../policies/low-latency.toml"),
    ),
    ("eu-only", include_str!("../../policies/eu-only.toml")),
    (
        "internal-only",
        include_str!("../../policies/internal-only.toml"),
    ),
];

/// The policy whose table shows the lying delegate being caught.
const LATENCY_POLICY: &str = "low-latency";

/// How long the fleet may take to come up.
const HEALTHY_WITHIN: Duration = Duration::from_secs(15);

/// A fresh directory under the system temp dir, removed on drop.
struct WorkDir(PathBuf);

impl WorkDir {
    fn create() -> anyhow::Result<WorkDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path =
            std::env::temp_dir().join(format!("ldp-gateway-demo-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "could not remove the demo's temporary directory");
        }
    }
}

/// The gateway's log in the demo's directory (unless `RUST_LOG` is set).
const LOG_FILE: &str = "gateway.log";

/// Writes `text` to stdout and flushes, so a reader sees each line at once.
fn say(text: impl AsRef<str>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_ref().as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// `ldp-gateway demo`.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    // First: a Ctrl-C or SIGTERM at any later moment (even just after "demo traffic done" is
    // printed) is caught and kept for the wait that ends the demo.
    let mut stop = Stop::listen();
    let work = WorkDir::create()?;
    // The report alone on the terminal: the gateway's logs go to a file, unless RUST_LOG says.
    let log_file = ldp_gateway::telemetry::log_file_unless_rust_log(
        &work.path().join(LOG_FILE),
        std::env::var_os("RUST_LOG").as_deref(),
    );
    match &log_file {
        Some(file) => ldp_gateway::telemetry::init_to_file(file)
            .with_context(|| format!("creating {}", file.display()))?,
        None => ldp_gateway::telemetry::init(),
    }
    write_policies(work.path())?;
    let mut config = demo_config(&args, work.path())?;
    let fleet = fleet::start(&config.delegates).await?;
    let outcome = match point_at(&mut config, &fleet) {
        Ok(()) => with_gateway(&args, config, work.path(), &fleet, &mut stop).await,
        Err(e) => Err(e),
    };
    fleet::stop(fleet).await;
    outcome
}

/// Writes the shipped policies and the demo's own to `work`/policies.
fn write_policies(work: &Path) -> anyhow::Result<()> {
    let policy_dir = work.join("policies");
    std::fs::create_dir_all(&policy_dir)?;
    for (name, text) in POLICIES.iter().chain(quiz::POLICIES.iter()) {
        let file = policy_dir.join(format!("{name}.toml"));
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    }
    let (path, text) = quiz::REFERENCE;
    let file = policy_dir.join(path);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    Ok(())
}

/// The embedded demo config with this run's listen addresses and paths.
fn demo_config(args: &DemoArgs, work: &Path) -> anyhow::Result<Config> {
    use figment::providers::{Format, Serialized, Toml};
    let mut config: Config = figment::Figment::from(Serialized::defaults(Config::default()))
        .merge(Toml::string(DEMO_CONFIG))
        .extract()
        .context("config/demo.toml")?;
    config.server.listen = args.ldp_listen;
    config.admin.listen = args.admin_listen;
    config.policies.dir = work.join("policies");
    config.provenance.store = format!("sqlite://{}", work.join("provenance.db").display());
    Ok(config)
}

/// Points every delegate of `config` at the fleet member of its name (an OpenAI-compatible
/// one's URL ends in `/v1`, as its entry's does).
fn point_at(config: &mut Config, fleet: &[Member]) -> anyhow::Result<()> {
    for d in &mut config.delegates {
        let name = d.name.as_deref().unwrap_or_default();
        let member = fleet.iter().find(|m| m.name == name).with_context(|| {
            format!("config/demo.toml names delegate '{name}', which the demo fleet does not have")
        })?;
        d.url = member.url();
    }
    Ok(())
}

/// Starts the gateway, runs the demo, and shuts the gateway down whatever happened.
async fn with_gateway(
    args: &DemoArgs,
    config: Config,
    work: &Path,
    fleet: &[Member],
    stop: &mut Stop,
) -> anyhow::Result<()> {
    let token_env = config.admin.token_env.clone();
    let tiers = config.routing.tier_prices;
    let gateway = Gateway::start(config)
        .await
        .context("starting the gateway")?;
    let outcome = demo(args, &gateway, work, fleet, &tiers, &token_env, stop).await;
    gateway.shutdown().await;
    outcome
}

async fn demo(
    args: &DemoArgs,
    gateway: &Gateway,
    work: &Path,
    fleet: &[Member],
    tiers: &TierPrices,
    token_env: &str,
    stop: &mut Stop,
) -> anyhow::Result<()> {
    let ldp = gateway.ldp_url();
    let admin = gateway.admin_url();
    if !gateway.wait_healthy(fleet.len(), HEALTHY_WITHIN).await {
        anyhow::bail!(
            "only {} of {} simulated delegates became healthy",
            gateway.registry().healthy_count(),
            fleet.len()
        );
    }
    say(format!("LDP endpoint: {ldp}"))?;
    say(format!("admin:        {admin}"))?;
    say(format!(
        "data:         {} (removed at exit)",
        work.display()
    ))?;
    let log_file = work.join(LOG_FILE);
    if log_file.exists() {
        say(format!("logs:         {}", log_file.display()))?;
    }
    say("")?;
    say(fleet_table(fleet, tiers))?;

    let started = Instant::now();
    let tasks = Arc::new(traffic::tasks(args.tasks));
    say(format!(
        "driving {} tasks per policy ({}) through the gateway, and the same {} straight to the \
         top-quality delegate of each skill (blind routing), {} in flight each…",
        tasks.len(),
        traffic::SKILLS.join(", "),
        tasks.len(),
        args.concurrency,
    ))?;
    if args.quiz_tasks > 0 {
        say(format!(
            "and, meanwhile, {} quiz tasks with known answers under the policy {}, then the same \
             under {}, in batches of {}…",
            args.quiz_tasks,
            quiz::UNVERIFIED,
            quiz::VERIFIED,
            quiz::BATCH
        ))?;
    }
    let traffic = async {
        let quiz = async {
            if args.quiz_tasks == 0 {
                return None;
            }
            let concurrency = usize::from(args.concurrency);
            Some(quiz::run(gateway, args.quiz_tasks, concurrency).await)
        };
        let (results, quiz) = tokio::join!(
            drive_all(gateway, fleet, &tasks, usize::from(args.concurrency)),
            quiz
        );
        results.map(|r| (r, quiz))
    };
    let (results, quiz) = tokio::select! {
        results = traffic => results?,
        () = stop.wait() => {
            say("interrupted; shutting down")?;
            return Ok(());
        }
    };
    let elapsed = started.elapsed();
    say("")?;

    let (blind, _) = results.get("blind").context("blind routing did not run")?;
    let policies = gateway.proxy().policies();
    for (name, _) in POLICIES {
        let Some((outcomes, took)) = results.get(name) else {
            continue;
        };
        let report = PolicyReport::new(name, &tasks, outcomes, blind);
        let title = match policies.get(name) {
            Some(p) => format!(
                "policy {name} — {}\n  weights: quality {}, cost {}, latency {}; {} tasks in {:.1} s",
                p.description.trim(),
                p.weights.quality,
                p.weights.cost,
                p.weights.latency,
                outcomes.len(),
                took.as_secs_f64()
            ),
            None => format!("policy {name}"),
        };
        say(report.render(&title))?;
    }

    say(
        "declared vs observed latency (the gateway's EWMA replaces a card's claim once measured):",
    )?;
    say(report::render_latency(&latency_rows(gateway, fleet)))?;
    if let Some((outcomes, _)) = results.get(LATENCY_POLICY) {
        say(liar_story(&tasks, outcomes))?;
    }
    if let Some((unverified, verified)) = &quiz {
        say(quiz_section(
            gateway, unverified, verified, &admin, token_env,
        ))?;
    }

    say(
        "OpenAI-compatible delegates, over every policy's traffic through the gateway (cost = \
         usage × the declared price per million tokens, as the ledger records it):",
    )?;
    say(report::render_tokens(&token_rows(fleet, &results)))?;

    say(format!(
        "OpenAI ingress: POST {ldp}/v1/chat/completions, as the openai SDK sends it \
         (`model` = skill or skill@policy; the ledger row found by x-ldp-task-id):"
    ))?;
    say(ingress::render(
        &ingress::run(&ldp, &gateway.ledger()).await,
    ))?;

    say(urls(&ldp, &admin, token_env))?;
    let next = if args.exit {
        "exiting (--exit)"
    } else {
        "serving until Ctrl-C"
    };
    say(format!(
        "demo traffic done in {:.1} s; {next}",
        elapsed.as_secs_f64()
    ))?;
    if !args.exit {
        stop.wait().await;
        say("shutting down")?;
    }
    Ok(())
}

/// One line per delegate: who it is, what it speaks, where it is, what it offers at what
/// price (per call for LDP delegates, per million input/output tokens for OpenAI ones).
fn fleet_table(fleet: &[Member], tiers: &TierPrices) -> String {
    let openai = fleet.iter().filter(|m| m.token_prices().is_some()).count();
    let mut out = format!(
        "fleet: {} simulated delegates, {} LDP and {openai} OpenAI-compatible (each answers \
         after its declared p50, except {}; {} claims a quality it does not have)\n",
        fleet.len(),
        fleet.len() - openai,
        fleet::LIAR,
        fleet::QUIZ_LIAR
    );
    let row = |name: &str,
               kind: &str,
               family: &str,
               place: &str,
               domain: &str,
               price: &str,
               skills: &str| {
        format!(
            "  {name:<22} {kind:<6} {family:<8} {place:<13} {domain:<18} {price:<22} {skills}\n"
        )
    };
    out.push_str(&row(
        "delegate",
        "kind",
        "family",
        "jurisdiction",
        "trust domain",
        "USD",
        "skills",
    ));
    for m in fleet {
        let c = &m.card;
        let skills: Vec<&str> = c.capabilities.iter().map(|c| c.name.as_str()).collect();
        let price = match (m.token_prices(), m.price_range(tiers)) {
            (Some(p), _) if p.is_free() => "free (per token)".to_owned(),
            (Some(p), _) => format!("{}/{} per Mtok", p.input, p.output),
            (None, Some((lo, hi))) if lo == hi => format!("{lo} per call"),
            (None, Some((lo, hi))) => format!("{lo}–{hi} per call"),
            (None, None) => "-".into(),
        };
        out.push_str(&row(
            &m.name,
            m.kind(),
            &c.model_family,
            c.jurisdiction.as_deref().unwrap_or("-"),
            &c.trust_domain.name,
            &price,
            &skills.join(", "),
        ));
    }
    out
}

/// Runs every policy and blind routing at once; per target name, the outcomes in task order
/// and how long it took.
async fn drive_all(
    gateway: &Gateway,
    fleet: &[Member],
    tasks: &Arc<Vec<traffic::Task>>,
    concurrency: usize,
) -> anyhow::Result<HashMap<String, (Vec<Outcome>, Duration)>> {
    let client = UpstreamClient::new(
        "ldp:client:demo",
        Duration::from_secs(2),
        Duration::from_secs(10),
    );
    let card = Arc::new(gateway.proxy().identity_card(Some(gateway.ldp_url())));
    let mut targets: Vec<(String, Target)> = POLICIES
        .iter()
        .map(|(name, _)| {
            let target = Target::Gateway {
                url: gateway.ldp_url(),
                card: card.clone(),
                policy: (*name).to_owned(),
            };
            ((*name).to_owned(), target)
        })
        .collect();
    let mut blind = HashMap::new();
    for skill in traffic::SKILLS {
        if let Some(m) = fleet::top_quality(fleet, skill) {
            let via = match &m.sim {
                fleet::Sim::Ldp(_) => Via::Ldp(Box::new(m.card.clone())),
                fleet::Sim::OpenAi { backend, .. } => Via::OpenAi(backend.clone()),
            };
            let direct = Direct {
                name: m.name.clone(),
                url: m.url(),
                via,
            };
            blind.insert(skill, direct);
        }
    }
    targets.push(("blind".to_owned(), Target::Blind(Arc::new(blind))));

    let mut runs = tokio::task::JoinSet::new();
    for (name, target) in targets {
        let (client, tasks) = (client.clone(), tasks.clone());
        runs.spawn(async move {
            let started = Instant::now();
            let outcomes = traffic::drive(&client, &target, &tasks, concurrency).await;
            (name, outcomes, started.elapsed())
        });
    }
    let mut results = HashMap::new();
    while let Some(run) = runs.join_next().await {
        let (name, outcomes, took) = run.context("a traffic run stopped")?;
        results.insert(name, (outcomes, took));
    }
    Ok(results)
}

/// Declared p50 range and observed EWMA per delegate, in fleet order.
fn latency_rows(gateway: &Gateway, fleet: &[Member]) -> Vec<LatencyRow> {
    let registry = gateway.registry();
    fleet
        .iter()
        .map(|m| {
            let d = registry.get(&m.name);
            LatencyRow {
                delegate: m.name.clone(),
                declared_ms: m.declared_p50_range(),
                observed_ms: d.as_ref().and_then(|d| d.observed_latency_ms()),
                samples: d.as_ref().map_or(0, |d| d.samples()),
            }
        })
        .collect()
}

/// Per OpenAI-backed member, what it served under every policy (blind routing left out).
fn token_rows(
    fleet: &[Member],
    results: &HashMap<String, (Vec<Outcome>, Duration)>,
) -> Vec<TokenRow> {
    let served: Vec<&Outcome> = POLICIES
        .iter()
        .filter_map(|(name, _)| results.get(*name))
        .flat_map(|(outcomes, _)| outcomes)
        .collect();
    fleet
        .iter()
        .filter_map(|m| {
            let p = m.token_prices()?;
            Some(TokenRow::of(
                &m.name,
                &m.card.model_version,
                (p.input, p.output),
                &served,
            ))
        })
        .collect()
}

/// How the lying delegate fared under the latency policy: before its first answer came back
/// (routing had only its card to go by) and after (the gateway had measured it).
fn liar_story(tasks: &[traffic::Task], outcomes: &[Outcome]) -> String {
    let skills = ["reasoning", "code-review"];
    let liar = fleet::LIAR;
    let head = format!(
        "{LATENCY_POLICY}: {liar} declares {} ms but answers in about {} ms.",
        fleet::LIAR_DECLARED_MS,
        fleet::LIAR_ACTUAL.as_millis()
    );
    match report::before_and_after_first_answer(outcomes, tasks, &skills, liar) {
        Some(((b, bn), (a, an))) => format!(
            "{head} Until its first answer came back it got {b} of {bn} reasoning/code-review \
             tasks (routing had only its card to go by); once the gateway had measured it, {a} \
             of {an}.\n"
        ),
        None => format!("{head} It served none of the reasoning/code-review tasks.\n"),
    }
}

/// The quiz's story: who claims what, the batches side by side, what it means, and every quiz
/// delegate's quality now.
fn quiz_section(
    gateway: &Gateway,
    unverified: &quiz::Phase,
    verified: &quiz::Phase,
    admin: &str,
    token_env: &str,
) -> String {
    use std::fmt::Write as _;
    let policies = gateway.proxy().policies();
    let liar = fleet::QUIZ
        .iter()
        .find(|q| q.name == fleet::QUIZ_LIAR)
        .copied()
        .unwrap_or(fleet::QUIZ[0]);
    let floor = policies
        .get(quiz::VERIFIED)
        .and_then(|p| p.require.min_quality)
        .unwrap_or(0.0);
    let reliability_floor = policies
        .get(quiz::VERIFIED)
        .and_then(|p| p.verify.as_ref())
        .map_or(0.0, |v| v.min_reliability);
    let mut out = format!(
        "quiz: a delegate whose card claims a quality it does not have, next to verification. \
         Every `{}` task carries its expected answer, which only the simulated delegates read \
         (the gateway never does); the demo marks each answer right or wrong.\n",
        fleet::QUIZ_SKILL
    );
    for q in fleet::QUIZ {
        let role = if q.rubber_stamp {
            "verifier (stamp)"
        } else if q.verifier {
            "verifier"
        } else if q.name == liar.name {
            "producer (liar)"
        } else {
            "producer"
        };
        let _ = writeln!(
            out,
            "  {:<22} {:<16} declares {:.2}, {} USD a call; right {:.0}% of the time",
            q.name,
            role,
            q.declared,
            q.price_usd,
            100.0 * q.accuracy
        );
    }
    for phase in [unverified, verified] {
        let description = policies
            .get(phase.policy)
            .map_or_else(String::new, |p| format!(": {}", p.description.trim()));
        let _ = writeln!(
            out,
            "policy {}{description} — {} tasks in {:.1} s",
            phase.policy,
            phase.batches.iter().map(|b| b.tasks).sum::<usize>(),
            phase.took.as_secs_f64()
        );
    }
    out.push_str(
        "  (per batch: the liar's share of the answers; its quality as routing blends it, with \
         the weight of the votes on it; right answers; verified answers; tasks without an \
         answer; what the ledger charged, voted-down results and verifiers included)\n",
    );
    out.push_str(&report::render_quiz(&unverified.batches, &verified.batches));
    out.push_str(&report::quiz_story(
        liar.name,
        liar.declared,
        floor,
        &unverified.batches,
        &verified.batches,
    ));
    let _ = write!(
        out,
        "\nquality at the quiz now (accuracy is the demo's secret; the gateway sees the declared \
         quality and the votes, and routes by the blend; a verifier's blend at `verify` is its \
         reliability, learnt from calibration rounds and agreement: the weight of its vote):\n{}\
         \x20 explain: curl{} '{admin}/admin/route?skill={}&policy={}&format=text'\n",
        report::render_quality(&quiz::quality_rows(gateway), floor, reliability_floor),
        auth_header(token_env),
        fleet::QUIZ_SKILL,
        quiz::VERIFIED,
    );
    out
}

/// ` -H "Authorization: Bearer $VAR"` when the admin token variable is set.
fn auth_header(token_env: &str) -> String {
    if std::env::var(token_env).is_ok_and(|t| !t.is_empty()) {
        format!(" -H \"Authorization: Bearer ${token_env}\"")
    } else {
        String::new()
    }
}

/// Where to look next.
fn urls(ldp: &str, admin: &str, token_env: &str) -> String {
    let auth = auth_header(token_env);
    format!(
        "the gateway keeps serving:\n\
         \x20 LDP endpoint   {ldp}  (POST {ldp}/ldp/messages, identity at {ldp}/.well-known/ldp-identity)\n\
         \x20 OpenAI SDK     OpenAI(base_url=\"{ldp}/v1\", api_key=\"-\"), model=\"chat\" or \"chat@cheapest\"\n\
         \x20 metrics        curl {admin}/metrics\n\
         \x20 delegates      curl{auth} {admin}/admin/delegates\n\
         \x20 policies       curl{auth} {admin}/admin/policies\n\
         \x20 explain        curl{auth} '{admin}/admin/route?skill=summarize&policy=cheapest&format=text'\n\
         \x20 quality        curl{auth} '{admin}/admin/route?skill=quiz&policy=verified'  (figures: quality, declared_quality, observed_quality)\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_config_names_exactly_the_fleet() {
        let cards = fleet::cards().unwrap();
        let config: Config = {
            use figment::providers::{Format, Serialized, Toml};
            figment::Figment::from(Serialized::defaults(Config::default()))
                .merge(Toml::string(DEMO_CONFIG))
                .extract()
                .unwrap()
        };
        assert!(config.problems("demo.toml").is_empty());
        let (openai, ldp): (Vec<_>, Vec<_>) = config
            .delegates
            .iter()
            .partition(|d| d.kind == ldp_gateway::config::DelegateKind::OpenAi);
        let mut in_config: Vec<String> = ldp.iter().map(|d| d.name.clone().unwrap()).collect();
        let mut in_fleet: Vec<String> = cards.iter().map(|(n, _)| (*n).to_owned()).collect();
        in_config.sort();
        in_fleet.sort();
        assert_eq!(in_config, in_fleet);
        let ports: Vec<&str> = config.delegates.iter().map(|d| d.url.as_str()).collect();
        assert_eq!(ports[0], "http://127.0.0.1:9101");
        assert_eq!(ports[7], "http://127.0.0.1:9108");
        // Two OpenAI-compatible delegates, one priced per token and one free, of other
        // families than the LDP fleet's, offering the skill only they serve.
        assert_eq!(openai.len(), 2);
        assert_eq!(ports[8], "http://127.0.0.1:9109/v1");
        let declared: Vec<_> = openai.iter().map(|d| d.card.clone().unwrap()).collect();
        assert!(declared
            .iter()
            .all(|c| c.skills.iter().any(|s| s == "chat")));
        assert!(declared
            .iter()
            .any(|c| c.price_per_mtok_input > Some(0.0) && c.price_per_mtok_output > Some(0.0)));
        assert!(declared
            .iter()
            .any(|c| c.price_per_mtok_input == Some(0.0) && c.price_per_mtok_output == Some(0.0)));
        for c in &declared {
            let family = c.model_family.as_deref().unwrap();
            assert!(
                cards.iter().all(|(_, card)| card.model_family != family),
                "{family}"
            );
        }
        assert!(cards
            .iter()
            .all(|(_, c)| c.capabilities.iter().all(|s| s.name != "chat")));
    }

    #[tokio::test]
    async fn the_fleet_serves_every_delegate_of_the_config_at_its_url() {
        let args = DemoArgs {
            ldp_listen: "127.0.0.1:0".parse().unwrap(),
            admin_listen: "127.0.0.1:0".parse().unwrap(),
            tasks: 1,
            concurrency: 1,
            quiz_tasks: 0,
            exit: true,
        };
        let work = WorkDir::create().unwrap();
        let mut config = demo_config(&args, work.path()).unwrap();
        let fleet = fleet::start(&config.delegates).await.unwrap();
        point_at(&mut config, &fleet).unwrap();
        assert_eq!(fleet.len(), config.delegates.len());
        for d in &config.delegates {
            let m = fleet
                .iter()
                .find(|m| Some(&m.name) == d.name.as_ref())
                .unwrap();
            assert_eq!(d.url, m.url());
            let openai = d.kind == ldp_gateway::config::DelegateKind::OpenAi;
            assert_eq!(m.kind() == "openai", openai, "{}", m.name);
            assert_eq!(d.url.ends_with("/v1"), openai, "{}", d.url);
            if openai {
                // The card the gateway will build: its model as version, per-token prices.
                assert_eq!(Some(&m.card.model_version), d.model.as_ref());
                assert!(m.token_prices().is_some());
                assert_eq!(m.card.capabilities[0].name, "chat");
            }
        }
        assert!(point_at(&mut config.clone(), &fleet[..1]).is_err());
        fleet::stop(fleet).await;
    }

    /// The quiz against the real fleet and gateway, shortened: unverified, the liar gets
    /// every task but the explored ones and keeps its claim; verified, samples are voted on
    /// and the votes reach its quality; the rubber stamp's calibration costs it its weight.
    #[tokio::test]
    async fn the_quiz_learns_only_when_verified() {
        let args = DemoArgs {
            ldp_listen: "127.0.0.1:0".parse().unwrap(),
            admin_listen: "127.0.0.1:0".parse().unwrap(),
            tasks: 1,
            concurrency: 4,
            quiz_tasks: 60,
            exit: true,
        };
        let work = WorkDir::create().unwrap();
        write_policies(work.path()).unwrap();
        let mut config = demo_config(&args, work.path()).unwrap();
        let fleet = fleet::start(&config.delegates).await.unwrap();
        point_at(&mut config, &fleet).unwrap();
        let gateway = Gateway::start(config).await.unwrap();
        assert!(gateway.wait_healthy(fleet.len(), HEALTHY_WITHIN).await);
        let (unverified, verified) = quiz::run(&gateway, args.quiz_tasks, 4).await;
        let u = report::QuizBatch::total(&unverified.batches);
        let v = report::QuizBatch::total(&verified.batches);
        assert_eq!(unverified.batches.len(), 3);
        assert_eq!((u.tasks, u.failed, u.checked), (60, 0, 0), "{u:?}");
        // `[routing] explore` (0.05) may send a few to the unmeasured others.
        assert!(u.liar >= 45, "{u:?}");
        assert!(unverified
            .batches
            .iter()
            .all(|b| b.liar_quality == Some(0.95) && b.liar_evidence == 0.0));
        assert!(u.cost_usd > 0.0, "the ledger's rows were read: {u:?}");
        // One task in five is verified (60 tasks: none verified has odds of about 1e-6).
        assert_eq!(v.tasks, 60);
        assert!(v.checked + v.failed > 0, "{v:?}");
        assert!(v.cost_usd > u.cost_usd, "{v:?} {u:?}");
        let rows = quiz::quality_rows(&gateway);
        assert!(
            rows.iter().any(|r| r.observed.is_some()),
            "votes were learnt: {rows:?}"
        );
        let stamp = rows
            .iter()
            .find(|r| r.delegate == fleet::QUIZ_STAMP)
            .unwrap();
        assert!(
            stamp.blended.is_some_and(|r| r < 0.6),
            "calibration at start found the stamp out: {stamp:?}"
        );
        let text = quiz_section(&gateway, &unverified, &verified, "http://admin", "X");
        assert!(text.contains("policy verified: "), "{text}");
        assert!(text.contains("below min_reliability 0.6"), "{text}");
        gateway.shutdown().await;
        fleet::stop(fleet).await;
    }

    #[test]
    fn every_shipped_policy_is_embedded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/policies");
        let mut shipped: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                (p.extension()? == "toml")
                    .then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
            })
            .collect();
        shipped.sort();
        let mut embedded: Vec<String> = POLICIES.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, shipped);
    }

    #[test]
    fn work_dir_is_unique_and_removed() {
        let a = WorkDir::create().unwrap();
        let b = WorkDir::create().unwrap();
        assert_ne!(a.path(), b.path());
        let path = a.path().to_owned();
        std::fs::write(path.join("x"), "y").unwrap();
        drop(a);
        assert!(!path.exists());
    }
}
