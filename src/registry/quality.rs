//! Learned quality: per delegate and skill, what verifier votes and client ratings say of the
//! answers it delivered, as a Beta posterior whose evidence halves in weight every
//! `[quality] half_life` (so a delegate that was bad can recover: its old evidence fades and
//! its declared quality counts again). Routing blends it with the card's claim
//! ([`crate::routing::blend`]).
//!
//! Reads are lock-free (`ArcSwapOption`): a decision reads every offer's estimate. Writes are
//! rare (a vote, a rating) and replace the small value whole.

use crate::routing::Observed;
use arc_swap::ArcSwapOption;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default `[quality] half_life`: one hour.
pub const DEFAULT_HALF_LIFE_MS: u64 = 3_600_000;

/// Skills a delegate keeps estimates for; evidence for more is dropped (a card's
/// capabilities are capped well below this, and evidence only names skills it served).
const MAX_SKILLS: usize = 1024;

/// Whether an observation can be learnt: a score in 0..=1 and a finite positive weight.
pub fn usable(score: f64, weight: f64) -> bool {
    (0.0..=1.0).contains(&score) && weight.is_finite() && weight > 0.0
}

/// Decayed evidence: weighted good and bad, as of `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beta {
    /// Σ weight × score.
    pub good: f64,
    /// Σ weight × (1 − score).
    pub bad: f64,
    /// When it was last updated, Unix ms.
    pub at_ms: i64,
}

impl Beta {
    /// This evidence aged to `now_ms` (never grown by a clock that went back). `exact`:
    /// always decay; else a read under a thousandth of a half-life after the last write skips
    /// the power (the weight has moved by under 0.07%; routing reads every offer's estimate
    /// per decision, and the power is most of its cost). Writes are exact: a skipped decay
    /// would be lost when `at_ms` moves on.
    fn aged(self, now_ms: i64, half_life_ms: u64, exact: bool) -> Beta {
        let dt = (now_ms - self.at_ms).max(0) as f64;
        let hl = half_life_ms as f64;
        let factor = if half_life_ms == 0 || (!exact && dt * 1000.0 < hl) {
            1.0
        } else {
            (-dt / hl).exp2()
        };
        Beta {
            good: self.good * factor,
            bad: self.bad * factor,
            at_ms: now_ms.max(self.at_ms),
        }
    }

    /// Adds one observation (score 0..1, weight > 0) at `at_ms`.
    pub fn observe(self, score: f64, weight: f64, at_ms: i64, half_life_ms: u64) -> Beta {
        let b = self.aged(at_ms, half_life_ms, true);
        Beta {
            good: b.good + weight * score,
            bad: b.bad + weight * (1.0 - score),
            at_ms: b.at_ms,
        }
    }

    /// Empty evidence at `at_ms`.
    pub fn empty(at_ms: i64) -> Beta {
        Beta {
            good: 0.0,
            bad: 0.0,
            at_ms,
        }
    }
}

/// One delegate's estimate at one skill.
#[derive(Debug)]
pub struct Estimate {
    beta: ArcSwapOption<Beta>,
    half_life_ms: Arc<AtomicU64>,
}

impl Estimate {
    /// Adds an observation; a score or weight out of range (or not finite) is ignored.
    pub fn observe(&self, score: f64, weight: f64, at_ms: i64) {
        if !usable(score, weight) {
            return;
        }
        let hl = self.half_life_ms.load(Ordering::Relaxed);
        self.beta.rcu(|old| {
            let b = old.as_deref().copied().unwrap_or(Beta::empty(at_ms));
            Some(Arc::new(b.observe(score, weight, at_ms, hl)))
        });
    }

    /// What has been observed, aged to `now_ms`; none before the first observation.
    pub fn observed(&self, now_ms: i64) -> Option<Observed> {
        let b = *self.beta.load().as_deref()?;
        let b = b.aged(now_ms, self.half_life_ms.load(Ordering::Relaxed), false);
        let count = b.good + b.bad;
        (count > 1e-9).then(|| Observed {
            mean: b.good / count,
            count,
        })
    }

    /// What has been observed, aged to now (the clock is read only when there is evidence).
    pub fn observed_now(&self) -> Option<Observed> {
        if self.beta.load().is_none() {
            return None;
        }
        self.observed(now_ms())
    }

    /// Replaces the evidence (a rebuild from the ledger).
    pub fn set(&self, beta: Option<Beta>) {
        self.beta.store(beta.map(Arc::new));
    }
}

/// A delegate's estimates, per skill.
#[derive(Debug)]
pub struct Learned {
    skills: DashMap<String, Arc<Estimate>>,
    half_life_ms: Arc<AtomicU64>,
}

impl Default for Learned {
    fn default() -> Self {
        Learned {
            skills: DashMap::new(),
            half_life_ms: Arc::new(AtomicU64::new(DEFAULT_HALF_LIFE_MS)),
        }
    }
}

impl Learned {
    /// The estimate for `skill`, created empty when first asked; none when the delegate
    /// already keeps [`MAX_SKILLS`] others.
    pub fn estimate(&self, skill: &str) -> Option<Arc<Estimate>> {
        if let Some(e) = self.skills.get(skill) {
            return Some(e.clone());
        }
        if self.skills.len() >= MAX_SKILLS {
            return None;
        }
        let e = self
            .skills
            .entry(skill.to_owned())
            .or_insert_with(|| {
                Arc::new(Estimate {
                    beta: ArcSwapOption::empty(),
                    half_life_ms: self.half_life_ms.clone(),
                })
            })
            .clone();
        Some(e)
    }

    /// Sets how fast evidence fades (every estimate shares it).
    pub fn set_half_life_ms(&self, ms: u64) {
        self.half_life_ms.store(ms, Ordering::Relaxed);
    }

    /// Replaces every estimate by `rebuilt` (skills absent from it lose their evidence).
    pub fn replace(&self, rebuilt: &std::collections::HashMap<&str, Beta>) {
        for e in self.skills.iter() {
            e.value().set(rebuilt.get(e.key().as_str()).copied());
        }
        for (skill, beta) in rebuilt {
            if let Some(e) = self.estimate(skill) {
                e.set(Some(*beta));
            }
        }
    }
}

impl super::Registry {
    /// Rebuilds every delegate's learned quality from the ledger's evidence (votes and
    /// ratings of the last eight half-lives, at most `max_evidence` of each): at start, so
    /// estimates survive a restart, and in cluster mode at each refresh, so every replica
    /// learns from every other's. A failed read keeps what is known (and says so).
    pub async fn restore_quality(
        &self,
        ledger: &crate::provenance::LedgerHandle,
        cfg: &crate::config::QualityConfig,
    ) {
        match ledger
            .evidence(cfg.since_ms(now_ms()), cfg.max_evidence)
            .await
        {
            Ok(evidence) => {
                self.rebuild_quality(&evidence);
                tracing::debug!(
                    pieces = evidence.len(),
                    "learned quality rebuilt from the ledger"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "learned quality not rebuilt from the ledger");
            }
        }
    }

    /// Cluster mode: rebuilds learned quality from the shared ledger every `cfg.refresh`
    /// until `shutdown` fires.
    pub fn spawn_quality_refresh(
        self: std::sync::Arc<Self>,
        ledger: crate::provenance::LedgerHandle,
        cfg: crate::config::QualityConfig,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(cfg.refresh) => {}
                    _ = shutdown.changed() => return,
                }
                self.restore_quality(&ledger, &cfg).await;
            }
        })
    }
}

/// Unix ms now (evidence is stamped and aged in wall-clock time: it is stored in the ledger
/// and rebuilt after a restart).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_a_weighted_mean_that_fades() {
        let l = Learned::default();
        l.set_half_life_ms(1000);
        let e = l.estimate("qa").unwrap();
        assert_eq!(e.observed(0), None);
        e.observe(1.0, 1.0, 0);
        e.observe(0.0, 3.0, 0);
        let o = e.observed(0).unwrap();
        assert!((o.mean - 0.25).abs() < 1e-9 && (o.count - 4.0).abs() < 1e-9);
        let later = e.observed(1000).unwrap();
        assert!((later.mean - 0.25).abs() < 1e-9, "fading keeps the mean");
        assert!((later.count - 2.0).abs() < 1e-9, "and halves the count");
        // An old observation counts for less than a new one.
        e.observe(1.0, 1.0, 3000);
        assert!(e.observed(3000).unwrap().mean > 0.6);
        // Out-of-range input is ignored.
        e.observe(2.0, 1.0, 3000);
        e.observe(0.5, f64::NAN, 3000);
        assert!((e.observed(3000).unwrap().count - 1.5).abs() < 1e-9);
    }

    #[test]
    fn steady_evidence_still_fades() {
        // One observation a second for eight half-lives of an hour: the count settles near
        // 1 / (1 − 2^(−1/3600)) ≈ 5,194, far below the 28,800 observations made.
        let e = Learned::default().estimate("qa").unwrap();
        for s in 0..28_800i64 {
            e.observe(1.0, 1.0, s * 1000);
        }
        let n = e.observed(28_799_000).unwrap().count;
        assert!((5_000.0..5_300.0).contains(&n), "{n}");
    }

    #[test]
    fn replace_clears_skills_without_evidence() {
        let l = Learned::default();
        l.estimate("a").unwrap().observe(1.0, 1.0, 0);
        let mut rebuilt = std::collections::HashMap::new();
        rebuilt.insert(
            "b",
            Beta {
                good: 1.0,
                bad: 1.0,
                at_ms: 0,
            },
        );
        l.replace(&rebuilt);
        let seen = |s: &str| l.estimate(s).unwrap().observed(0);
        assert_eq!(seen("a"), None);
        assert_eq!(seen("b").map(|o| o.count), Some(2.0));
    }
}
