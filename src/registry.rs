//! The delegates the gateway knows: their cards, fetched and re-fetched, and their health.

use crate::config::{normalize_url, DelegateConfig};
use crate::ldp::IdentityCard;
use crate::upstream::UpstreamClient;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One registered delegate.
#[derive(Debug)]
pub struct Delegate {
    /// Registry name (config `name`, else the URL); the label used in metrics and the ledger.
    pub name: String,
    /// Base URL every call goes to.
    pub base_url: String,
    /// Relative share among near-equals.
    pub weight: f64,
    /// Operator labels.
    pub labels: BTreeMap<String, String>,
    card: ArcSwapOption<IdentityCard>,
    healthy: AtomicBool,
    last_error: ArcSwapOption<String>,
}

impl Delegate {
    /// A delegate with no card yet (so not healthy).
    pub fn from_config(cfg: &DelegateConfig) -> Result<Delegate, String> {
        let base_url = normalize_url(&cfg.url)?;
        Ok(Delegate {
            name: cfg.name.clone().unwrap_or_else(|| cfg.url.clone()),
            base_url,
            weight: cfg.weight.unwrap_or(1.0),
            labels: cfg.labels.clone(),
            card: ArcSwapOption::empty(),
            healthy: AtomicBool::new(false),
            last_error: ArcSwapOption::empty(),
        })
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

    /// Records a successful fetch; logs card changes that matter for routing.
    pub fn record_card(&self, card: IdentityCard) {
        if let Some(old) = self.card.load_full() {
            if old.model_version != card.model_version
                || old.weights_fingerprint != card.weights_fingerprint
                || old.capabilities.len() != card.capabilities.len()
            {
                tracing::info!(delegate = %self.name, model_version = %card.model_version, "delegate card changed");
            }
        }
        self.card.store(Some(Arc::new(card)));
        self.last_error.store(None);
        if !self.healthy.swap(true, Ordering::AcqRel) {
            tracing::info!(delegate = %self.name, "delegate up");
        }
    }

    /// Records a failed fetch: the delegate stops receiving new tasks.
    pub fn record_failure(&self, error: String) {
        if self.healthy.swap(false, Ordering::AcqRel) {
            tracing::warn!(delegate = %self.name, error = %error, "delegate down");
        }
        self.last_error.store(Some(Arc::new(error)));
    }
}

/// All delegates, swapped as a whole so readers never lock.
pub struct Registry {
    delegates: ArcSwap<Vec<Arc<Delegate>>>,
}

impl Registry {
    /// A registry of the configured delegates (cards not fetched yet).
    pub fn from_config(cfgs: &[DelegateConfig]) -> Result<Registry, String> {
        let list = cfgs
            .iter()
            .map(|c| Delegate::from_config(c).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Registry {
            delegates: ArcSwap::from_pointee(list),
        })
    }

    /// The current list.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Delegate>>> {
        self.delegates.load_full()
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

    /// Fetches every card once, concurrently.
    pub async fn poll_all(&self, client: &UpstreamClient, timeout: Duration) {
        let list = self.snapshot();
        let fetches = list.iter().map(|d| async move {
            match client.fetch_card(&d.base_url, timeout).await {
                Ok(card) => d.record_card(card),
                Err(e) => d.record_failure(e.to_string()),
            }
        });
        futures_util::future::join_all(fetches).await;
    }

    /// Re-fetches every card each `interval` (±10% jitter) until `shutdown` fires.
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
                let wait = interval.mul_f64(jitter);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => return,
                }
                self.poll_all(&client, timeout).await;
            }
        })
    }
}
