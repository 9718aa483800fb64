//! Policies: operator rules for choosing delegates, parsed from `policies/*.toml`, compiled
//! (every problem reported at once as `file:line: key: reason`) into the types below, and
//! selected per request. Pure: no HTTP, no clock.

mod compile;
mod parse;

pub use compile::{load_dir, parse_str};

use crate::ldp::PayloadMode;
use std::path::PathBuf;
use std::sync::Arc;

/// Slowest rate accepted anywhere (policy `[limits]`, tenant and delegate limits): one
/// request per ~11.6 days. Slower ones overflow the limiter's nanosecond arithmetic.
pub const MIN_RPS: f64 = 1e-6;

/// Fastest rate accepted: one request per nanosecond, the limiter's resolution.
pub const MAX_RPS: f64 = 1e9;

/// What a rate outside [`rate_ok`] is told (followed by `, got …`).
pub const RATE_RANGE: &str = "must be between 0.000001 and 1000000000 requests per second";

/// Whether `rps` is a usable rate: the one rule config and policies share.
pub fn rate_ok(rps: f64) -> bool {
    rps.is_finite() && (MIN_RPS..=MAX_RPS).contains(&rps)
}

/// One problem in a policy file, printed as `file:line: key: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyProblem {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the problem is not tied to a line).
    pub line: usize,
    /// Dotted key.
    pub key: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.key, self.reason
        )
    }
}

/// A policy's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyName(pub String);

impl std::fmt::Display for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `*`-glob over names (`reasoning*`, `eu-*`, `*`), matched case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(pub String);

impl Glob {
    /// Whether `s` matches. `*` matches any run of characters, anywhere in the pattern.
    pub fn matches(&self, s: &str) -> bool {
        // Case-insensitive in place: no lowercase copy per call (this runs per offer per task).
        glob_match(self.0.as_bytes(), s.as_bytes())
    }
}

fn glob_match(p: &[u8], s: &[u8]) -> bool {
    // Iterative wildcard match with single backtrack point (linear for one `*` run).
    let (mut pi, mut si, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while si < s.len() {
        if pi < p.len() && p[pi] != b'*' && p[pi].eq_ignore_ascii_case(&s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            pi += 1;
            mark = si;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// `[match]`: which requests use this policy when none is named.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Match {
    /// Skill globs; empty matches every skill.
    pub skills: Vec<Glob>,
    /// Tenant names; empty matches every tenant.
    pub tenants: Vec<String>,
}

/// `[require]`: hard constraints. A delegate failing one is never chosen. Empty lists and
/// `None` bounds do not constrain.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Require {
    /// Allowed jurisdictions (globs such as `eu-*`); a delegate without one fails a non-empty list.
    pub jurisdictions: Vec<Glob>,
    /// Forbidden jurisdictions.
    pub deny_jurisdictions: Vec<Glob>,
    /// The delegate's trust domain must be one of these.
    pub trust_domains: Vec<String>,
    /// Minimum declared quality.
    pub min_quality: Option<f64>,
    /// Maximum cost per call, USD (tiers map to `[routing] tier_prices`).
    pub max_cost_usd: Option<f64>,
    /// Maximum latency, ms (observed once measured, else declared p50).
    pub max_latency_ms: Option<u64>,
    /// The delegate must support at least one of these modes.
    pub payload_modes: Vec<PayloadMode>,
    /// Minimum context window, tokens.
    pub min_context_window: Option<u64>,
    /// Allowed model families (globs).
    pub model_families: Vec<Glob>,
    /// Forbidden model families (globs).
    pub deny_model_families: Vec<Glob>,
}

/// `[weights]`: soft preferences; at least one is positive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// Weight of quality.
    pub quality: f64,
    /// Weight of (low) cost.
    pub cost: f64,
    /// Weight of (low) latency.
    pub latency: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            quality: 0.5,
            cost: 0.3,
            latency: 0.2,
        }
    }
}

/// `[limits]`: per-policy rate limit (enforced by the limits work).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Sustained requests per second.
    pub rps: f64,
    /// Burst size.
    pub burst: u32,
}

/// `[verify]`: results are judged by independent verifier delegates before they are answered
/// (LADP §5 chain of verification, §9 weighted voting, §13 retry policy).
#[derive(Debug, Clone, PartialEq)]
pub struct Verify {
    /// The skill verifier delegates offer (default `verify`).
    pub skill: String,
    /// How many independent verifiers vote on a result (1..=10, default 2).
    pub verifiers: u32,
    /// Weighted yes needed to pass, a fraction of the total weight (above 0, at most 1;
    /// default 0.75). A vote's weight is its verifier's quality.
    pub threshold: f64,
    /// Producers tried at most: a failed result is routed again to another delegate until
    /// this many rounds have run (1..=10, default 3).
    pub max_rounds: u32,
    /// The fraction of tasks verified (0..=1, default 1).
    pub sample: f64,
    /// A verifier never shares the producer's delegate or model family (default true; false
    /// still never lets a producer judge itself).
    pub independent: bool,
    /// A verifier whose learned reliability at the verify skill is below this (0..1, default
    /// [`DEFAULT_MIN_RELIABILITY`]) is not chosen; calibration rounds keep measuring it, so
    /// it can win its weight back. An unknown reliability (no claim, no evidence) passes.
    pub min_reliability: f64,
    /// `[verify.calibration]`: rounds of reference items sent to every verifier, if any.
    pub calibration: Option<Calibration>,
}

/// Default `[verify] min_reliability`: above a coin's 0.5, which a verifier that passes
/// everything scores on a calibration round (scored as balanced accuracy).
pub const DEFAULT_MIN_RELIABILITY: f64 = 0.6;

/// `[verify.calibration]` (LADP §11, §4.2.8): every `every` (and once at start) each
/// verifier of the skill is sent `items` reference items, shaped as real verification
/// tasks, and its verdicts scored against the reference's `correct`.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The reference source: JSON Lines of `{skill, input, output, correct}`, resolved
    /// against the policy file's folder.
    pub reference: PathBuf,
    /// Time between rounds (default 10 minutes).
    pub every: std::time::Duration,
    /// Reference items per verifier and round (1..=100, default 10).
    pub items: u32,
}

impl Default for Verify {
    fn default() -> Self {
        Verify {
            skill: "verify".into(),
            verifiers: 2,
            threshold: 0.75,
            max_rounds: 3,
            sample: 1.0,
            independent: true,
            min_reliability: DEFAULT_MIN_RELIABILITY,
            calibration: None,
        }
    }
}

impl Verify {
    /// The weighted yes a task's result needs: the policy's threshold, raised by the task's
    /// own quorum (an LADP `task-init`'s) and never lowered by it. The operator's threshold
    /// is the floor a client may tighten, not loosen: `(quorum 0)` must not pass a result
    /// every verifier voted down.
    pub fn threshold_for(&self, quorum: Option<f64>) -> f64 {
        match quorum {
            Some(q) if q.is_finite() => q.clamp(self.threshold, 1.0),
            Some(_) | None => self.threshold,
        }
    }
}

/// Whether a round's votes pass `threshold`: the weighted yes reaches it of the total, and
/// some weight said yes. Whatever the threshold, a round without a yes never passes.
pub fn votes_pass(yes: f64, total: f64, threshold: f64) -> bool {
    yes > 0.0 && total > 0.0 && yes >= threshold * total
}

/// A compiled policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Its name (unique in the set).
    pub name: PolicyName,
    /// What it is for.
    pub description: String,
    /// When it applies without being named.
    pub matcher: Option<Match>,
    /// Hard constraints.
    pub require: Require,
    /// Score weights.
    pub weights: Weights,
    /// Candidates within this fraction of the best score share the load (0..1).
    pub tolerance: f64,
    /// Upstream attempts per task, at least 1.
    pub max_attempts: u32,
    /// Rate limit, if any.
    pub limits: Option<Limits>,
    /// Peer verification of results, if any.
    pub verify: Option<Verify>,
    /// The file it came from.
    pub source: PathBuf,
}

/// A request named a policy the set does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy '{0}'")]
pub struct UnknownPolicy(pub String);

/// A complete, valid set of policies: what the gateway swaps in on reload.
#[derive(Debug, Clone)]
pub struct PolicySet {
    /// Policies in file-name order; `[match]` is tried in this order.
    pub policies: Vec<Arc<Policy>>,
    /// The default policy's name (guaranteed present).
    pub default: PolicyName,
}

/// How the policy for a request was chosen (shown by explain and recorded in the ledger).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    /// Named by the request (session config `policy` or header `x-ldp-policy`).
    Named,
    /// The tenant's default.
    TenantDefault,
    /// The first whose `[match]` fits.
    Matched,
    /// The configured default.
    Default,
}

impl PolicySet {
    /// The policy called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Policy>> {
        self.policies.iter().find(|p| p.name.0 == name)
    }

    /// The default policy.
    pub fn default_policy(&self) -> &Arc<Policy> {
        self.get(&self.default.0)
            .or_else(|| self.policies.first())
            .unwrap_or_else(|| unreachable_empty())
    }

    /// The policy for a request: the named one (an unknown name is an error the caller
    /// reports), else the tenant's default, else the first `[match]` that fits, else the default.
    pub fn select(
        &self,
        named: Option<&str>,
        tenant_default: Option<&str>,
        skill: &str,
        tenant: &str,
    ) -> Result<(&Arc<Policy>, Chosen), UnknownPolicy> {
        if let Some(n) = named {
            return self
                .get(n)
                .map(|p| (p, Chosen::Named))
                .ok_or_else(|| UnknownPolicy(n.to_owned()));
        }
        if let Some(p) = tenant_default.and_then(|n| self.get(n)) {
            return Ok((p, Chosen::TenantDefault));
        }
        for p in &self.policies {
            if let Some(m) = &p.matcher {
                let skill_ok = m.skills.is_empty() || m.skills.iter().any(|g| g.matches(skill));
                let tenant_ok = m.tenants.is_empty() || m.tenants.iter().any(|t| t == tenant);
                if skill_ok && tenant_ok {
                    return Ok((p, Chosen::Matched));
                }
            }
        }
        Ok((self.default_policy(), Chosen::Default))
    }

    /// A set holding only the built-in `balanced` policy (used when no policy directory exists).
    pub fn builtin() -> PolicySet {
        PolicySet {
            policies: vec![Arc::new(Policy::builtin_balanced())],
            default: PolicyName("balanced".into()),
        }
    }
}

impl Policy {
    /// Balanced weights, no constraints.
    pub fn builtin_balanced() -> Policy {
        Policy {
            name: PolicyName("balanced".into()),
            description: "built-in: balanced quality, cost and latency".into(),
            matcher: None,
            require: Require::default(),
            weights: Weights::default(),
            tolerance: 0.05,
            max_attempts: 3,
            limits: None,
            verify: None,
            source: PathBuf::from("<built-in>"),
        }
    }
}

// A PolicySet is never empty: `load_dir` refuses an empty directory and `builtin` has one.
// Keeping this out of line keeps the promise visible in one place.
#[cold]
fn unreachable_empty() -> &'static Arc<Policy> {
    static FALLBACK: std::sync::OnceLock<Arc<Policy>> = std::sync::OnceLock::new();
    FALLBACK.get_or_init(|| Arc::new(Policy::builtin_balanced()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_s_quorum_tightens_the_threshold_and_never_loosens_it() {
        let v = Verify {
            threshold: 0.6,
            ..Verify::default()
        };
        assert_eq!(v.threshold_for(None), 0.6);
        assert_eq!(v.threshold_for(Some(0.0)), 0.6);
        assert_eq!(v.threshold_for(Some(0.5)), 0.6);
        assert_eq!(v.threshold_for(Some(0.9)), 0.9);
        assert_eq!(v.threshold_for(Some(f64::NAN)), 0.6);
        assert_eq!(v.threshold_for(Some(7.0)), 1.0);
    }

    #[test]
    fn a_round_without_a_yes_never_passes() {
        assert!(!votes_pass(0.0, 1.8, 0.0));
        assert!(!votes_pass(0.0, 0.0, 0.0));
        assert!(votes_pass(0.9, 1.8, 0.5));
        assert!(!votes_pass(0.9, 1.8, 0.75));
        assert!(votes_pass(1.8, 1.8, 1.0));
    }

    #[test]
    fn globs() {
        let g = Glob("reasoning*".into());
        assert!(g.matches("reasoning"));
        assert!(g.matches("Reasoning-deep"));
        assert!(!g.matches("deep-reasoning"));
        assert!(Glob("*".into()).matches("x"));
        assert!(Glob("eu-*".into()).matches("eu-west"));
        assert!(Glob("*-west".into()).matches("eu-west"));
        assert!(!Glob("eu-west".into()).matches("eu-west-2"));
    }

    #[test]
    fn selection_order() {
        let mut a = Policy::builtin_balanced();
        a.name = PolicyName("a".into());
        a.matcher = Some(Match {
            skills: vec![Glob("sum*".into())],
            tenants: vec![],
        });
        let mut b = Policy::builtin_balanced();
        b.name = PolicyName("b".into());
        b.matcher = Some(Match {
            skills: vec![],
            tenants: vec!["acme".into()],
        });
        let set = PolicySet {
            policies: vec![
                Arc::new(a),
                Arc::new(b),
                Arc::new(Policy::builtin_balanced()),
            ],
            default: PolicyName("balanced".into()),
        };
        let name = |r: Result<(&Arc<Policy>, Chosen), UnknownPolicy>| {
            r.map(|(p, c)| (p.name.0.clone(), c))
        };
        assert_eq!(
            name(set.select(Some("b"), None, "x", "t")),
            Ok(("b".into(), Chosen::Named))
        );
        assert!(set.select(Some("zzz"), None, "x", "t").is_err());
        assert_eq!(
            name(set.select(None, Some("b"), "summarize", "t")),
            Ok(("b".into(), Chosen::TenantDefault))
        );
        assert_eq!(
            name(set.select(None, None, "summarize", "t")),
            Ok(("a".into(), Chosen::Matched))
        );
        assert_eq!(
            name(set.select(None, None, "x", "acme")),
            Ok(("b".into(), Chosen::Matched))
        );
        assert_eq!(
            name(set.select(None, None, "x", "t")),
            Ok(("balanced".into(), Chosen::Default))
        );
    }
}
