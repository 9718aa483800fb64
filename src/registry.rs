//! The delegates the gateway knows: their cards (fetched, re-fetched with backoff), health,
//! observed latency, and an index of who offers which skill, so routing never scans the fleet.

use crate::config::{normalize_url, DelegateConfig, UrlError};
use crate::ldp::{CapabilityHints, IdentityCard};
use crate::policy::Policy;
use crate::provenance::EvidenceSource;
use crate::routing::{self, Load, Offer, RoutingParams, Static};
use crate::upstream::KeyError;
use crate::upstream::Upstream;
use crate::upstream::UpstreamClient;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod explain;
mod health;
pub mod quality;

pub use explain::{explain, ExplainError, ExplainQuery};
pub use health::{Availability, InFlight, Observed, OutlierConfig, Phase, Snapshot};

/// Fetches `d`'s card and records it (or the failure); whether its offers changed. A card
/// with the gateway's own delegate id is refused: routing to it would send every task back
/// to this gateway.
async fn fetch(d: &Delegate, client: &UpstreamClient, timeout: Duration) -> Fetched {
    let changed = match &d.upstream {
        // No card to fetch: the declared one, while `GET {url}/models` answers.
        Upstream::OpenAi(openai) => match openai
            .backend
            .check_models(client, &d.base_url, timeout)
            .await
        {
            Ok(()) => d.record_card((*openai.card).clone()),
            Err(e) => d.record_fetch_failure(e.to_string()),
        },
        // Likewise, while `GET {url}/v1/models` answers.
        Upstream::Anthropic(anthropic) => match anthropic
            .backend
            .check_models(client, &d.base_url, timeout)
            .await
        {
            Ok(()) => d.record_card((*anthropic.card).clone()),
            Err(e) => d.record_fetch_failure(e.to_string()),
        },
        Upstream::A2a(agent) => return fetch_a2a(d, agent, client, timeout).await,
        Upstream::Ldp(_) => match client.fetch_card(&d.base_url, timeout).await {
            Ok(card) if card.delegate_id == client.from_id() => {
                let why = RegistryError::OwnCard(d.base_url.clone());
                return Fetched {
                    changed: d.record_fetch_failure(why.to_string()),
                    own: true,
                };
            }
            Ok(card) => d.record_card(card),
            Err(e) => d.record_fetch_failure(e.to_string()),
        },
    };
    Fetched {
        changed,
        own: false,
    }
}

/// An A2A agent's poll: its Agent Card, where it says to call it, and the LDP card built
/// from it and the declared one. A card change takes effect here, at the next poll.
async fn fetch_a2a(
    d: &Delegate,
    agent: &crate::upstream::a2a::Agent,
    client: &UpstreamClient,
    timeout: Duration,
) -> Fetched {
    let failed = |why: String, own: bool| Fetched {
        changed: d.record_fetch_failure(why),
        own,
    };
    let card = match agent.fetch_card(client, &d.base_url, timeout).await {
        Ok(card) => card,
        Err(e) => return failed(e.to_string(), false),
    };
    let endpoint = match crate::upstream::a2a::Endpoint::of(&card, &d.base_url) {
        Ok(e) => e,
        Err(e) => {
            let why = format!("the Agent Card at {}: {e}", d.base_url);
            // Said once per new reason, not at every poll of a card that stays unusable.
            if d.last_error().as_deref() != Some(&why) {
                tracing::warn!(delegate = %d.name, error = %e, "the A2A agent's card is refused; the delegate is not routed to");
            }
            return failed(why, false);
        }
    };
    // Without a configured name, the card is named after the agent's own, not its URL:
    // the card's id is what clients see of it.
    let name = match d.configured_name() {
        Some(n) => n.to_owned(),
        None if card.name.trim().is_empty() => "a2a-agent".to_owned(),
        None => card.name.chars().take(MAX_CARD_NAME_CHARS).collect(),
    };
    match crate::upstream::a2a::card::build(&name, &d.base_url, &card, agent.declared.as_ref()) {
        Ok(ldp) if ldp.delegate_id == client.from_id() => {
            failed(RegistryError::OwnCard(d.base_url.clone()).to_string(), true)
        }
        Ok(ldp) => {
            agent.set_endpoint(endpoint);
            Fetched {
                changed: d.record_card(ldp),
                own: false,
            }
        }
        Err(e) => failed(format!("{}: {e}", d.base_url), false),
    }
}

/// [`fetch`], its panic caught: a bug in one delegate's poll costs that poll (the delegate
/// is marked down, the panic logged and counted in `counter`), never the poller or the
/// process.
async fn fetch_guarded(
    d: &Delegate,
    client: &UpstreamClient,
    timeout: Duration,
    counter: Option<&prometheus::IntCounter>,
) -> Fetched {
    guarded(d, fetch(d, client, timeout), counter).await
}

/// `fetching` (`d`'s poll), a panic in it caught as [`fetch_guarded`] says.
async fn guarded(
    d: &Delegate,
    fetching: impl std::future::Future<Output = Fetched>,
    counter: Option<&prometheus::IntCounter>,
) -> Fetched {
    use futures_util::FutureExt as _;
    match std::panic::AssertUnwindSafe(fetching).catch_unwind().await {
        Ok(f) => f,
        Err(payload) => {
            if let Some(c) = counter {
                c.inc();
            }
            let message = crate::telemetry::panic_message(payload.as_ref());
            tracing::error!(delegate = %d.name, panic = message, "card poll panicked (a bug); the delegate is marked down");
            Fetched {
                changed: d.record_fetch_failure("the card poll failed inside the gateway".into()),
                own: false,
            }
        }
    }
}

/// What one card fetch did.
struct Fetched {
    /// The delegate's offers changed (the index needs rebuilding).
    changed: bool,
    /// The card was the gateway's own.
    own: bool,
}

/// Most characters of an A2A agent's own name kept as its card's name.
const MAX_CARD_NAME_CHARS: usize = 128;

/// What clients are told of a delegate with neither a configured name nor a card yet.
pub const UNNAMED: &str = "ldp:delegate:unnamed";

/// Polls skipped at most while a delegate keeps failing: backoff grows as 1, 2, 4, … 32
/// intervals.
const MAX_BACKOFF_SHIFT: u32 = 5;

/// One registered delegate.
#[derive(Debug)]
pub struct Delegate {
    /// Registry name (config `name`, else the URL); the label used in metrics and the ledger.
    pub name: String,
    /// Whether `name` is a configured one (else it is the URL, which clients are not told).
    named: bool,
    /// `[security] expose_delegate_addresses`: clients are told `name` whatever it is.
    expose_address: bool,
    /// Base URL every call goes to.
    pub base_url: String,
    /// Relative share among near-equals.
    pub weight: f64,
    /// Operator labels.
    pub labels: BTreeMap<String, String>,
    card: ArcSwapOption<IdentityCard>,
    healthy: AtomicBool,
    last_error: ArcSwapOption<String>,
    failures: AtomicU32,
    skip_polls: AtomicU32,
    /// Most tasks in flight (config; else the card's `metadata.max_in_flight`).
    max_in_flight: Option<u32>,
    /// In-flight count, latency EWMA, errors, outlier state.
    pub observed: Observed,
    /// Rate limit protecting the delegate (routing skips it when reached).
    pub limit: Option<crate::limits::RateLimit>,
    outlier: OutlierConfig,
    /// What kind of upstream it is, and what that kind keeps to call it.
    pub upstream: Upstream,
    /// Until when (ms on the registry's clock) it is skipped: it answered 429.
    paused_until_ms: AtomicU64,
    /// What verifier votes and client ratings say of its answers, per skill.
    pub learned: quality::Learned,
}

/// Milliseconds since the first reading of the registry's clock (for pauses).
fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(tokio::time::Instant::now);
    start.elapsed().as_millis() as u64
}

impl Delegate {
    /// A delegate with no card yet (so not healthy), judged by `outlier`; its address told
    /// to clients only with `expose_address` ([`Delegate::client_name`]).
    pub fn from_config(
        cfg: &DelegateConfig,
        outlier: OutlierConfig,
        expose_address: bool,
    ) -> Result<Delegate, RegistryError> {
        let base_url = normalize_url(&cfg.url)?;
        let name = cfg.registry_name();
        let upstream = Upstream::from_config(cfg, &name, &base_url)?;
        Ok(Delegate {
            name,
            named: cfg.name.is_some(),
            expose_address,
            base_url,
            weight: cfg.weight.unwrap_or(1.0),
            labels: cfg.labels.clone(),
            card: ArcSwapOption::empty(),
            healthy: AtomicBool::new(false),
            last_error: ArcSwapOption::empty(),
            failures: AtomicU32::new(0),
            skip_polls: AtomicU32::new(0),
            max_in_flight: cfg.max_in_flight,
            observed: Observed::default(),
            limit: cfg.limits.as_ref().and_then(crate::limits::RateLimit::new),
            outlier,
            upstream,
            paused_until_ms: AtomicU64::new(0),
            learned: quality::Learned::default(),
        })
    }

    /// Skips the delegate for `d` (it answered 429 with that `Retry-After`).
    pub fn pause(&self, d: Duration) {
        let now = clock_ms();
        let until = now.saturating_add(d.as_millis() as u64);
        let before = self.paused_until_ms.fetch_max(until, Ordering::AcqRel);
        if before <= now {
            tracing::info!(delegate = %self.name, pause = ?d, "delegate answered 429; skipped for its Retry-After");
        }
    }

    /// Whether it is paused by a 429 now.
    pub fn is_paused(&self) -> bool {
        self.paused_for().is_some()
    }

    /// How much longer it is paused by a 429 (none when it is not).
    pub fn paused_for(&self) -> Option<Duration> {
        let until = self.paused_until_ms.load(Ordering::Acquire);
        let now = clock_ms();
        (until != 0 && now < until).then(|| Duration::from_millis(until - now))
    }

    /// How clients are told of it (provenance, progress, errors, every front end's answer):
    /// its configured `name`, else its card's `delegate_id`, never its address. With
    /// `[security] expose_delegate_addresses`, its registry name, the URL of a delegate
    /// without a configured name.
    pub fn client_name(&self) -> String {
        if self.named || self.expose_address {
            return self.name.clone();
        }
        // A declared card (an OpenAI-backed delegate's) is known before its first poll.
        let declared = || self.upstream.declared_card();
        match self.card().or_else(declared) {
            Some(card) => card.delegate_id.clone(),
            // Never routed to before its card came: only a failure before any card says it.
            None => UNNAMED.to_owned(),
        }
    }

    /// The configured name, if it has one.
    pub fn configured_name(&self) -> Option<&str> {
        self.named.then_some(self.name.as_str())
    }

    /// The last card fetched, if any.
    pub fn card(&self) -> Option<Arc<IdentityCard>> {
        self.card.load_full()
    }

    /// Whether the last card fetch succeeded.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// The last fetch error, if the delegate is down.
    pub fn last_error(&self) -> Option<Arc<String>> {
        self.last_error.load_full()
    }

    /// Observed latency EWMA in ms, once measured.
    pub fn observed_latency_ms(&self) -> Option<f64> {
        self.observed.latency_ms()
    }

    /// [`Delegate::observed_latency_ms`] with its badness for routing.
    pub fn observed_latency(&self) -> Option<crate::routing::Latency> {
        self.observed.latency()
    }

    /// How many latency samples it has.
    pub fn samples(&self) -> u64 {
        self.observed.samples()
    }

    /// Most tasks it may have in flight: config, else the card's `metadata.max_in_flight`.
    pub fn max_in_flight(&self) -> Option<u32> {
        self.max_in_flight
            .or_else(|| self.card().and_then(|c| card_max_in_flight(&c)))
    }

    /// Counts a task in flight until the guard drops.
    pub fn start_task(&self) -> InFlight<'_> {
        self.observed.start()
    }

    /// A task answered (with a result, or with a failure that is the task's own, not the
    /// delegate's): its latency counts, and it is a success for outlier detection.
    pub fn record_success(&self, took: Duration) {
        let now = tokio::time::Instant::now();
        self.observed.record_latency(took, now, &self.outlier);
        self.observed.record_success(now, &self.outlier);
    }

    /// The delegate failed a task (transport error, 5xx, timeout, malformed answer, retryable
    /// runtime failure). Returns true if that ejected it.
    pub fn record_failure(&self, took: Option<Duration>) -> bool {
        let now = tokio::time::Instant::now();
        if let Some(t) = took {
            // A timeout is a latency sample too: the slow delegate must look slow.
            self.observed.record_latency(t, now, &self.outlier);
        }
        let ejected = self.observed.record_failure(now, &self.outlier);
        if ejected {
            tracing::warn!(delegate = %self.name, "delegate ejected by outlier detection");
        }
        ejected
    }

    /// Its quality at `skill` as routing sees it now, by `card` (its current one).
    pub fn quality_at(&self, card: &IdentityCard, skill: &str) -> QualityView {
        let hints = card.effective_hints(skill);
        let declared = hints.as_ref().and_then(|h| h.quality);
        let claim = hints.as_ref().and_then(|h| h.claim_type);
        let observed = self.learned.estimate(skill).and_then(|e| e.observed_now());
        QualityView {
            declared,
            observed,
            blended: crate::routing::blend(declared, claim, observed),
            plausible: crate::routing::plausible(declared, claim, observed),
        }
    }

    /// Load and outlier state for routing, now.
    pub fn load(&self) -> Load {
        self.load_with(self.max_in_flight())
    }

    /// [`Delegate::load`] given its [`Delegate::max_in_flight`] (a [`SkillOffer`] keeps it
    /// from its card, so a decision parses no metadata).
    fn load_with(&self, max_in_flight: Option<u32>) -> Load {
        let a = self
            .observed
            .availability(tokio::time::Instant::now(), &self.outlier);
        Load {
            in_flight: self.observed.in_flight(),
            max_in_flight,
            ejected: a.ejected,
            probing: a.probing,
            weight_factor: a.weight_factor,
        }
    }

    /// Observed state for operators.
    pub fn snapshot(&self) -> Snapshot {
        self.observed
            .snapshot(tokio::time::Instant::now(), &self.outlier)
    }

    /// Records a successful fetch; returns whether the card changed in a way routing sees.
    fn record_card(&self, card: IdentityCard) -> bool {
        let changed = match self.card.load_full() {
            Some(old) if *old == card => false,
            Some(old) => {
                tracing::info!(delegate = %self.name, model_version = %card.model_version,
                    previous_version = %old.model_version,
                    skills = card.capabilities.len(), "delegate card changed");
                true
            }
            None => true,
        };
        if changed {
            self.card.store(Some(Arc::new(card)));
        }
        self.last_error.store(None);
        self.failures.store(0, Ordering::Release);
        let came_up = !self.healthy.swap(true, Ordering::AcqRel);
        if came_up {
            tracing::info!(delegate = %self.name, "delegate up");
        }
        changed || came_up
    }

    /// Records a failed fetch: the delegate stops receiving new tasks, and is polled less
    /// often while it keeps failing. Returns whether its health changed.
    fn record_fetch_failure(&self, error: String) -> bool {
        let went_down = self.healthy.swap(false, Ordering::AcqRel);
        if went_down {
            tracing::warn!(delegate = %self.name, error = %error, "delegate down");
        }
        let n = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        self.skip_polls
            .store((1u32 << n.min(MAX_BACKOFF_SHIFT)) - 1, Ordering::Release);
        self.last_error.store(Some(Arc::new(error)));
        went_down
    }

    /// Whether this poll round should fetch its card (false while backing off).
    fn due(&self) -> bool {
        let skip = self.skip_polls.load(Ordering::Acquire);
        if skip == 0 {
            return true;
        }
        self.skip_polls.store(skip - 1, Ordering::Release);
        false
    }
}

/// A card's `metadata.max_in_flight`, if it says one.
fn card_max_in_flight(card: &IdentityCard) -> Option<u32> {
    card.metadata
        .get("max_in_flight")
        .and_then(|v| v.trim().parse().ok())
}

/// A delegate offering one skill, with that skill's hints resolved from its card.
#[derive(Debug, Clone)]
pub struct SkillOffer {
    /// The delegate.
    pub delegate: Arc<Delegate>,
    /// The card the hints came from.
    pub card: Arc<IdentityCard>,
    /// The skill's effective hints.
    pub hints: CapabilityHints,
    /// The delegate's learned quality at the skill.
    pub estimate: Option<Arc<quality::Estimate>>,
    /// [`Delegate::max_in_flight`] under `card`.
    pub max_in_flight: Option<u32>,
}

impl Offer for SkillOffer {
    fn name(&self) -> &str {
        &self.delegate.name
    }
    fn card(&self) -> &IdentityCard {
        &self.card
    }
    fn hints(&self) -> &CapabilityHints {
        &self.hints
    }
    fn healthy(&self) -> bool {
        self.delegate.is_healthy()
    }
    fn observed_latency_ms(&self) -> Option<f64> {
        self.delegate.observed_latency_ms()
    }
    fn observed_latency(&self) -> Option<crate::routing::Latency> {
        self.delegate.observed_latency()
    }
    fn observed_quality(
        &self,
        now_ms: i64,
        rater: Option<&str>,
    ) -> Option<crate::routing::Observed> {
        self.estimate.as_ref()?.observed(now_ms, rater)
    }
    fn evidence(
        &self,
        now_ms: i64,
        rater: Option<&str>,
        prior: crate::routing::Prior,
    ) -> Option<crate::routing::Evidence> {
        self.estimate.as_ref()?.evidence(now_ms, rater, prior)
    }
    fn weight(&self) -> f64 {
        self.delegate.weight
    }
    fn load(&self) -> Load {
        self.delegate.load_with(self.max_in_flight)
    }
}

/// Skill → the delegates whose card offers it. Rebuilt when cards or membership change.
#[derive(Debug, Default)]
pub struct SkillIndex {
    by_skill: HashMap<String, SkillEntry>,
}

/// One skill's offers and, per policy seen, their card-only routing checks.
#[derive(Debug)]
struct SkillEntry {
    offers: Arc<[SkillOffer]>,
    statics: ArcSwap<Vec<PolicyStatics>>,
}

/// A policy and the card-only checks of a skill's offers under it.
type PolicyStatics = (Arc<Policy>, Arc<[Static]>);

/// Policies whose card-only checks are kept per skill; beyond it the oldest are dropped (a
/// reload makes new policies; the index is rebuilt at every card change anyway).
const STATICS_KEPT: usize = 32;

impl SkillIndex {
    fn build(delegates: &[Arc<Delegate>]) -> SkillIndex {
        let mut by_skill: HashMap<String, Vec<SkillOffer>> = HashMap::new();
        for d in delegates {
            let Some(card) = d.card() else { continue };
            for cap in &card.capabilities {
                let Some(hints) = card.effective_hints(&cap.name) else {
                    continue;
                };
                by_skill
                    .entry(cap.name.clone())
                    .or_default()
                    .push(SkillOffer {
                        delegate: d.clone(),
                        card: card.clone(),
                        hints,
                        estimate: d.learned.estimate(&cap.name),
                        max_in_flight: d.max_in_flight.or_else(|| card_max_in_flight(&card)),
                    });
            }
        }
        SkillIndex {
            by_skill: by_skill
                .into_iter()
                .map(|(k, v)| {
                    let entry = SkillEntry {
                        offers: v.into(),
                        statics: ArcSwap::from_pointee(Vec::new()),
                    };
                    (k, entry)
                })
                .collect(),
        }
    }

    /// The offers for `skill` (healthy or not: routing checks health).
    pub fn offers(&self, skill: &str) -> &[SkillOffer] {
        self.by_skill.get(skill).map_or(&[], |e| &e.offers)
    }

    /// The offers for `skill` with their card-only checks under `policy`
    /// ([`routing::statics`]), computed on the first decision under that policy and kept
    /// until the index is rebuilt. `params` must be the same for every call (the config's).
    pub fn offers_with_statics(
        &self,
        skill: &str,
        policy: &Arc<Policy>,
        params: &RoutingParams,
    ) -> (&[SkillOffer], Arc<[Static]>) {
        let Some(e) = self.by_skill.get(skill) else {
            return (&[], Arc::from(Vec::new()));
        };
        if let Some((_, st)) = e
            .statics
            .load()
            .iter()
            .find(|(p, _)| Arc::ptr_eq(p, policy))
        {
            return (&e.offers, st.clone());
        }
        let st: Arc<[Static]> = routing::statics(&e.offers, policy, params).into();
        e.statics.rcu(|kept| {
            let mut next: Vec<_> = kept
                .iter()
                .filter(|(p, _)| !Arc::ptr_eq(p, policy))
                .cloned()
                .collect();
            if next.len() >= STATICS_KEPT {
                next.remove(0);
            }
            next.push((policy.clone(), st.clone()));
            next
        });
        (&e.offers, st)
    }

    /// Every skill offered, sorted.
    pub fn skills(&self) -> Vec<&str> {
        let mut s: Vec<&str> = self.by_skill.keys().map(String::as_str).collect();
        s.sort_unstable();
        s
    }
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The URL is unusable.
    #[error(transparent)]
    BadUrl(#[from] UrlError),
    /// The name is taken.
    #[error("a delegate named '{0}' is already registered")]
    Duplicate(String),
    /// No such delegate.
    #[error("no delegate named '{0}'")]
    NotFound(String),
    /// The URL serves this gateway's own card.
    #[error("the card at {0} is this gateway's own: routing to it would loop")]
    OwnCard(String),
    /// An OpenAI-backed delegate cannot be set up (its API key).
    #[error(transparent)]
    Backend(#[from] KeyError),
}

/// One delegate's quality at one skill, as routing sees it now.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct QualityView {
    /// What its card declares.
    pub declared: Option<f64>,
    /// What votes and ratings say.
    pub observed: Option<crate::routing::Observed>,
    /// The blend routing uses.
    pub blended: Option<f64>,
    /// What `min_quality` is compared with: the blend plus one standard deviation.
    pub plausible: Option<f64>,
}

/// All delegates, swapped as a whole so readers never lock.
pub struct Registry {
    delegates: ArcSwap<Vec<Arc<Delegate>>>,
    index: ArcSwap<SkillIndex>,
    /// Serialises membership changes (add/remove); readers never take it.
    writer: Mutex<()>,
    outlier: OutlierConfig,
    /// `[security] expose_delegate_addresses`, for delegates registered later.
    expose_addresses: bool,
    /// `[quality] half_life` in ms, for delegates registered later.
    half_life_ms: AtomicU64,
    /// Counts card polls that panicked (`ldp_gateway_panics_total{where="card_poll"}`).
    poll_panics: std::sync::OnceLock<prometheus::IntCounter>,
    /// Tenants whose ratings are shared evidence ([`Registry::set_trusted_raters`]).
    trusted_raters: ArcSwap<std::collections::HashSet<String>>,
}

impl Registry {
    /// A registry of the configured delegates (cards not fetched yet); clients are told
    /// their addresses only with `expose_addresses` ([`Delegate::client_name`]).
    pub fn from_config(
        cfgs: &[DelegateConfig],
        outlier: OutlierConfig,
        expose_addresses: bool,
    ) -> Result<Registry, RegistryError> {
        let list = cfgs
            .iter()
            .map(|c| Delegate::from_config(c, outlier, expose_addresses).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Registry {
            delegates: ArcSwap::from_pointee(list),
            index: ArcSwap::from_pointee(SkillIndex::default()),
            writer: Mutex::new(()),
            outlier,
            expose_addresses,
            half_life_ms: AtomicU64::new(quality::DEFAULT_HALF_LIFE_MS),
            poll_panics: std::sync::OnceLock::new(),
            trusted_raters: ArcSwap::from_pointee(std::collections::HashSet::new()),
        })
    }

    /// Sets the tenants whose ratings are shared evidence (`trusted_rater`, or the built-in
    /// tenant of a gateway without `[[tenants]]`): every other tenant's ratings move its own
    /// routing only ([`quality`]).
    pub fn set_trusted_raters(&self, tenants: impl IntoIterator<Item = String>) {
        self.trusted_raters
            .store(Arc::new(tenants.into_iter().collect()));
    }

    /// Whether `tenant`'s ratings are shared evidence.
    pub fn trusted_rater(&self, tenant: &str) -> bool {
        self.trusted_raters.load().contains(tenant)
    }

    /// Counts card polls that panic in `counter` (set once, at start).
    pub fn count_poll_panics(&self, counter: prometheus::IntCounter) {
        let _ = self.poll_panics.set(counter);
    }

    /// Sets how fast learned-quality evidence fades (`[quality] half_life`), for every
    /// delegate, now and registered later.
    pub fn set_quality_half_life(&self, half_life: Duration) {
        let ms = half_life.as_millis().min(u128::from(u64::MAX)) as u64;
        self.half_life_ms.store(ms, Ordering::Relaxed);
        for d in self.delegates.load().iter() {
            d.learned.set_half_life_ms(ms);
        }
    }

    /// Adds one shared observation of `delegate`'s quality at `skill` (a vote); nothing when
    /// no such delegate is registered (any more).
    pub fn observe(&self, delegate: &str, skill: &str, score: f64, weight: f64, at_ms: i64) {
        if let Some(e) = self.get(delegate).and_then(|d| d.learned.estimate(skill)) {
            e.observe(score, weight, at_ms);
        }
    }

    /// Adds one calibration round of `verifier` at the verify skill `skill` (its score,
    /// weighing the items it answered); part of its reliability, read as its quality there,
    /// until a rebuild reads the round back from its ledger row. Nothing when it is not
    /// registered (any more).
    pub fn observe_calibration(
        &self,
        verifier: &str,
        skill: &str,
        score: f64,
        weight: f64,
        at_ms: i64,
    ) {
        if let Some(e) = self.get(verifier).and_then(|d| d.learned.estimate(skill)) {
            e.observe_calibrated(score, weight, at_ms);
        }
    }

    /// Adds one observation of `verifier`'s judgement at the verify skill `skill` (agreement
    /// with a round's outcome, a trusted rating); its reliability, read as its quality
    /// there. Nothing when it is not registered (any more).
    pub fn observe_judgement(
        &self,
        verifier: &str,
        skill: &str,
        score: f64,
        weight: f64,
        at_ms: i64,
    ) {
        if let Some(e) = self.get(verifier).and_then(|d| d.learned.estimate(skill)) {
            e.observe_judged(score, weight, at_ms);
        }
    }

    /// A rating of a verified task, as evidence of its verifiers' judgement: each vote of
    /// the delivered result (`votes`, its last round's) agreed with the rating as far as
    /// `score` says. Only a trusted rater's counts (no tenant alone moves the verifiers'
    /// weights, which every tenant's tasks share); weight 1 per rating, split between the
    /// votes as a round is.
    pub fn observe_rating_of_votes(
        &self,
        votes: &[crate::provenance::Vote],
        verify_skill: &str,
        tenant: &str,
        score: f64,
        at_ms: i64,
    ) {
        if votes.is_empty() || !self.trusted_rater(tenant) {
            return;
        }
        let share = 1.0 / votes.len() as f64;
        for v in votes {
            let agreed = if v.passed { score } else { 1.0 - score };
            self.observe_judgement(&v.verifier, verify_skill, agreed, share, at_ms);
        }
    }

    /// Adds `tenant`'s rating of `delegate` at `skill`: shared evidence when the tenant is a
    /// trusted rater, else its own (weight 1 either way).
    pub fn observe_rating(
        &self,
        delegate: &str,
        skill: &str,
        tenant: &str,
        score: f64,
        at_ms: i64,
    ) {
        let Some(e) = self.get(delegate).and_then(|d| d.learned.estimate(skill)) else {
            return;
        };
        if self.trusted_rater(tenant) {
            e.observe(score, 1.0, at_ms);
        } else {
            e.observe_own(tenant, score, 1.0, at_ms);
        }
    }

    /// Replaces every delegate's learned quality by what `evidence` (oldest first, as the
    /// ledger gives it) says, each rating shared or its tenant's own as
    /// [`Registry::observe_rating`] learns it, each calibration round a verifier's as
    /// [`Registry::observe_calibration`] learns it; evidence of delegates no longer
    /// registered is skipped.
    pub fn rebuild_quality(&self, evidence: &[crate::provenance::Evidence]) {
        let hl = self.half_life_ms.load(Ordering::Relaxed);
        let trusted = self.trusted_raters.load();
        let mut by: HashMap<&str, HashMap<&str, quality::Rebuilt>> = HashMap::new();
        for e in evidence {
            if !quality::usable(e.score, e.weight) {
                continue;
            }
            let skills = by.entry(e.delegate.as_str()).or_default();
            let r = skills.entry(e.skill.as_str()).or_default();
            let rater = match e.source {
                EvidenceSource::Calibration => {
                    let b = r.calibrated.get_or_insert(quality::Beta::empty(e.at_ms));
                    *b = b.observe(e.score, e.weight, e.at_ms, hl);
                    continue;
                }
                EvidenceSource::Vote | EvidenceSource::Feedback => e.rater.as_deref(),
            };
            let b = match rater.filter(|t| !trusted.contains(*t)) {
                Some(tenant) if r.own.len() < quality::MAX_RATERS || r.own.contains_key(tenant) => {
                    r.own
                        .entry(tenant.into())
                        .or_insert(quality::Beta::empty(e.at_ms))
                }
                Some(_) => continue,
                None => r.shared.get_or_insert(quality::Beta::empty(e.at_ms)),
            };
            *b = b.observe(e.score, e.weight, e.at_ms, hl);
        }
        let empty = HashMap::new();
        for d in self.delegates.load().iter() {
            d.learned.replace(by.get(d.name.as_str()).unwrap_or(&empty));
        }
    }

    /// Declared, observed and blended quality of `delegate` at `skill` now (none when it is
    /// not registered or has no card).
    pub fn quality_of(&self, delegate: &str, skill: &str) -> Option<QualityView> {
        let d = self.get(delegate)?;
        let card = d.card()?;
        Some(d.quality_at(&card, skill))
    }

    /// The current list.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Delegate>>> {
        self.delegates.load_full()
    }

    /// The current skill index.
    pub fn index(&self) -> Arc<SkillIndex> {
        self.index.load_full()
    }

    /// The delegate named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Delegate>> {
        self.delegates
            .load()
            .iter()
            .find(|d| d.name == name)
            .cloned()
    }

    /// How many delegates are healthy.
    pub fn healthy_count(&self) -> usize {
        self.delegates
            .load()
            .iter()
            .filter(|d| d.is_healthy())
            .count()
    }

    fn reindex(&self) {
        self.index
            .store(Arc::new(SkillIndex::build(&self.delegates.load())));
    }

    /// Adds a delegate at run time (its card is fetched by the caller or the next poll).
    pub fn add(&self, cfg: &DelegateConfig) -> Result<Arc<Delegate>, RegistryError> {
        let d = Arc::new(Delegate::from_config(
            cfg,
            self.outlier,
            self.expose_addresses,
        )?);
        d.learned
            .set_half_life_ms(self.half_life_ms.load(Ordering::Relaxed));
        let _w = self
            .writer
            .lock()
            .map_err(|_| RegistryError::NotFound(d.name.clone()))?;
        let current = self.delegates.load_full();
        if current.iter().any(|x| x.name == d.name) {
            return Err(RegistryError::Duplicate(d.name.clone()));
        }
        let mut next = (*current).clone();
        next.push(d.clone());
        self.delegates.store(Arc::new(next));
        tracing::info!(delegate = %d.name, url = %crate::secret::redact_url(&d.base_url), "delegate registered");
        Ok(d)
    }

    /// Removes a delegate: it receives no new tasks from now on.
    pub fn remove(&self, name: &str) -> Result<Arc<Delegate>, RegistryError> {
        let _w = self
            .writer
            .lock()
            .map_err(|_| RegistryError::NotFound(name.to_owned()))?;
        let current = self.delegates.load_full();
        let pos = current
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| RegistryError::NotFound(name.to_owned()))?;
        let mut next = (*current).clone();
        let removed = next.remove(pos);
        removed.healthy.store(false, Ordering::Release);
        self.delegates.store(Arc::new(next));
        self.reindex();
        tracing::info!(delegate = %name, "delegate removed");
        Ok(removed)
    }

    /// Fetches one delegate's card now; [`RegistryError::OwnCard`] if it is the gateway's
    /// own (the delegate stays registered and down; the caller decides).
    pub async fn poll_one(
        &self,
        d: &Delegate,
        client: &UpstreamClient,
        timeout: Duration,
    ) -> Result<(), RegistryError> {
        let f = fetch_guarded(d, client, timeout, self.poll_panics.get()).await;
        if f.changed {
            self.reindex();
        }
        if f.own {
            return Err(RegistryError::OwnCard(d.base_url.clone()));
        }
        Ok(())
    }

    /// Fetches every due card once (`force` ignores backoff); the client runs at most its
    /// card concurrency of them at a time. A fetch that panics marks its delegate down and
    /// leaves the others alone.
    pub async fn poll_all(&self, client: &UpstreamClient, timeout: Duration, force: bool) {
        let list = self.snapshot();
        let counter = self.poll_panics.get();
        let fetches = list
            .iter()
            .filter(|d| force || d.due())
            .map(|d| fetch_guarded(d, client, timeout, counter));
        let fetched = futures_util::future::join_all(fetches).await;
        if fetched.iter().any(|f| f.changed) {
            self.reindex();
        }
    }

    /// Re-fetches every card each `interval` (±10% jitter) until `shutdown` fires; failing
    /// delegates back off (1, 2, 4 … 32 intervals).
    pub fn spawn_poller(
        self: Arc<Self>,
        client: UpstreamClient,
        interval: Duration,
        timeout: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let jitter = 0.9 + fastrand::f64() * 0.2;
                tokio::select! {
                    _ = tokio::time::sleep(interval.mul_f64(jitter)) => {}
                    _ = shutdown.changed() => return,
                }
                self.poll_all(&client, timeout, false).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delegate(name: &str, jurisdiction: &str) -> Arc<Delegate> {
        let cfg: DelegateConfig = serde_json::from_value(serde_json::json!({
            "url": format!("http://127.0.0.1:9/{name}"), "name": name
        }))
        .unwrap();
        let d = Delegate::from_config(&cfg, OutlierConfig::default(), false).unwrap();
        let card: IdentityCard = serde_json::from_value(serde_json::json!({
            "delegate_id": format!("ldp:delegate:{name}"), "name": name, "model_family": "sim",
            "model_version": "1", "trust_domain": "default", "jurisdiction": jurisdiction,
            "capabilities": [{"name": "echo", "quality": {"quality_score": 0.9}}],
            "supported_payload_modes": ["text"]
        }))
        .unwrap();
        d.record_card(card);
        Arc::new(d)
    }

    #[test]
    fn clients_are_told_a_name_or_a_card_id_and_an_address_only_when_the_operator_says() {
        let named = delegate("a", "eu-west");
        assert_eq!(named.client_name(), "a");
        let unnamed = |expose: bool| {
            let cfg = DelegateConfig::new("http://127.0.0.1:9/x");
            let d = Delegate::from_config(&cfg, OutlierConfig::default(), expose).unwrap();
            assert_eq!(
                d.client_name(),
                if expose {
                    "http://127.0.0.1:9/x"
                } else {
                    UNNAMED
                }
            );
            d.record_card(named.card().unwrap().as_ref().clone());
            d.client_name()
        };
        assert_eq!(unnamed(false), "ldp:delegate:a");
        assert_eq!(unnamed(true), "http://127.0.0.1:9/x");
        // An OpenAI-backed delegate without a name: its declared card is named after its
        // model, not its URL.
        let cfg: DelegateConfig = serde_json::from_value(serde_json::json!({
            "url": "http://127.0.0.1:9/v1", "kind": "openai", "model": "mini",
            "card": {"skills": ["chat"]}
        }))
        .unwrap();
        let d = Delegate::from_config(&cfg, OutlierConfig::default(), false).unwrap();
        assert_eq!(d.client_name(), "ldp:delegate:mini");
        assert_eq!(
            d.name, "http://127.0.0.1:9/v1",
            "the registry name stays the URL"
        );
    }

    async fn a_poll_with_a_bug() -> Fetched {
        panic!("a bug in one delegate's poll")
    }

    #[tokio::test]
    async fn a_card_poll_that_panics_marks_its_delegate_down_and_is_counted() {
        let d = delegate("a", "eu-west");
        assert!(d.is_healthy());
        let counter = prometheus::IntCounter::new("panics", "panics").unwrap();
        let f = guarded(&d, a_poll_with_a_bug(), Some(&counter)).await;
        assert!(f.changed && !f.own, "its health changed");
        assert!(!d.is_healthy());
        assert_eq!(
            d.last_error().as_deref().map(String::as_str),
            Some("the card poll failed inside the gateway")
        );
        assert_eq!(counter.get(), 1);
        // The poll after it runs as usual.
        let ok = guarded(
            &d,
            async {
                Fetched {
                    changed: false,
                    own: false,
                }
            },
            Some(&counter),
        )
        .await;
        assert!(!ok.changed);
        assert_eq!(counter.get(), 1);
    }

    #[test]
    fn card_only_checks_are_kept_per_policy() {
        let index = SkillIndex::build(&[delegate("eu", "eu-west"), delegate("us", "us-east")]);
        let params = RoutingParams::default();
        let any = Arc::new(Policy::builtin_balanced());
        let mut eu = Policy::builtin_balanced();
        eu.require.jurisdictions = vec![crate::policy::Glob("eu-*".into())];
        let eu = Arc::new(eu);
        let (offers, first) = index.offers_with_statics("echo", &eu, &params);
        assert_eq!(offers.len(), 2);
        let (_, again) = index.offers_with_statics("echo", &eu, &params);
        assert!(Arc::ptr_eq(&first, &again), "computed once per policy");
        let (_, other) = index.offers_with_statics("echo", &any, &params);
        assert!(!Arc::ptr_eq(&first, &other));
        // The kept checks are the ones a fresh evaluation gives.
        assert_eq!(*first, *routing::statics(offers, &eu, &params));
        let need = routing::Need {
            skill: "echo",
            client_domain: "default",
            ..Default::default()
        };
        let mut rng = fastrand::Rng::with_seed(1);
        let pick = routing::decide_with(offers, &first, &eu, &need, &params, &mut rng).unwrap();
        assert_eq!(offers[pick.index].delegate.name, "eu");
        assert!(index.offers_with_statics("nope", &eu, &params).0.is_empty());
    }
}
