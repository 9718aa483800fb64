//! The demo's summary: per policy, each delegate's share, cost and latency, the same traffic
//! under blind routing, and the savings; the quiz's batches under the unverified and the
//! verified policy, and each quiz delegate's declared, observed and blended quality. Pure:
//! outcomes (and ledger rows) in, text out.

use super::traffic::{Outcome, Task};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Nearest-rank percentile (`q` in 0..=1) of `values`; 0 when empty.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Aggregates of a set of served tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Line {
    /// Tasks served.
    pub tasks: usize,
    /// Sum of `cost_usd`.
    pub cost_usd: f64,
    /// Sum of `tokens_used`.
    pub tokens: u64,
    /// Round-trip latencies, ms.
    pub latencies_ms: Vec<f64>,
    /// Skills among them.
    pub skills: BTreeSet<&'static str>,
    /// Delegates among them.
    pub delegates: BTreeSet<String>,
}

impl Line {
    fn add(&mut self, task: &Task, delegate: &str, cost_usd: f64, tokens: u64, latency_ms: f64) {
        self.tasks += 1;
        self.cost_usd += cost_usd;
        self.tokens += tokens;
        self.latencies_ms.push(latency_ms);
        self.skills.insert(task.skill);
        self.delegates.insert(delegate.to_owned());
    }

    /// Median latency, ms.
    pub fn p50(&self) -> f64 {
        percentile(&self.latencies_ms, 0.5)
    }

    /// 95th percentile latency, ms.
    pub fn p95(&self) -> f64 {
        percentile(&self.latencies_ms, 0.95)
    }
}

/// One policy's traffic, summarised.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyReport {
    /// The policy.
    pub policy: String,
    /// Per delegate, by name.
    pub delegates: BTreeMap<String, Line>,
    /// Everything the policy served.
    pub total: Line,
    /// Unroutable tasks per skill, with the gateway's first reason.
    pub unroutable: BTreeMap<&'static str, (usize, String)>,
    /// Other failures: count and the first reason.
    pub failed: (usize, Option<String>),
    /// Blind routing over the tasks this policy served.
    pub blind: Line,
    /// Tasks the policy served that blind routing failed.
    pub blind_failed: usize,
}

impl PolicyReport {
    /// Summarises `outcomes` (one per task) against `blind` (the same tasks, blind routing).
    pub fn new(policy: &str, tasks: &[Task], outcomes: &[Outcome], blind: &[Outcome]) -> Self {
        let mut r = PolicyReport {
            policy: policy.to_owned(),
            ..PolicyReport::default()
        };
        for (i, (task, outcome)) in tasks.iter().zip(outcomes).enumerate() {
            match outcome {
                Outcome::Served {
                    delegate,
                    cost_usd,
                    tokens,
                    latency_ms,
                    ..
                } => {
                    r.delegates.entry(delegate.clone()).or_default().add(
                        task,
                        delegate,
                        *cost_usd,
                        *tokens,
                        *latency_ms,
                    );
                    r.total.add(task, delegate, *cost_usd, *tokens, *latency_ms);
                    match blind.get(i) {
                        Some(Outcome::Served {
                            delegate,
                            cost_usd,
                            tokens,
                            latency_ms,
                            ..
                        }) => r.blind.add(task, delegate, *cost_usd, *tokens, *latency_ms),
                        _ => r.blind_failed += 1,
                    }
                }
                Outcome::Unroutable(reason) => {
                    r.unroutable
                        .entry(task.skill)
                        .or_insert_with(|| (0, reason.clone()))
                        .0 += 1;
                }
                Outcome::Failed(reason) => {
                    r.failed.0 += 1;
                    r.failed.1.get_or_insert_with(|| reason.clone());
                }
            }
        }
        r
    }

    /// Blind cost minus policy cost, USD, over the same served tasks.
    pub fn savings_usd(&self) -> f64 {
        self.blind.cost_usd - self.total.cost_usd
    }

    /// Savings as a percentage of the blind cost (0 when blind cost nothing).
    pub fn savings_pct(&self) -> f64 {
        if self.blind.cost_usd > 0.0 {
            100.0 * self.savings_usd() / self.blind.cost_usd
        } else {
            0.0
        }
    }

    /// The fixed-width table, headed by `title`.
    pub fn render(&self, title: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{title}");
        let _ = writeln!(
            out,
            "  {:<22} {:>7} {:>6} {:>7} {:>11} {:>8} {:>8}  skills",
            "delegate", "share", "tasks", "tokens", "cost USD", "p50 ms", "p95 ms"
        );
        let served = self.total.tasks.max(1) as f64;
        let mut rows: Vec<(&String, &Line)> = self.delegates.iter().collect();
        rows.sort_by(|a, b| b.1.tasks.cmp(&a.1.tasks).then(a.0.cmp(b.0)));
        for (name, line) in rows {
            let _ = writeln!(
                out,
                "  {:<22} {:>6.1}% {:>6} {:>7} {:>11.6} {:>8.0} {:>8.0}  {}",
                name,
                100.0 * line.tasks as f64 / served,
                line.tasks,
                line.tokens,
                line.cost_usd,
                line.p50(),
                line.p95(),
                join(line.skills.iter().copied()),
            );
        }
        let _ = writeln!(
            out,
            "  {:<22} {:>7} {:>6} {:>7} {:>11.6} {:>8.0} {:>8.0}",
            "total",
            if self.total.tasks > 0 { "100.0%" } else { "-" },
            self.total.tasks,
            self.total.tokens,
            self.total.cost_usd,
            self.total.p50(),
            self.total.p95(),
        );
        for (skill, (n, reason)) in &self.unroutable {
            let _ = writeln!(
                out,
                "  {:<22} {:>7} {:>6}  NO_ELIGIBLE_DELEGATE for {skill}: {reason}",
                "unroutable", "", n,
            );
        }
        if self.failed.0 > 0 {
            let _ = writeln!(
                out,
                "  {:<22} {:>7} {:>6}  first: {}",
                "failed",
                "",
                self.failed.0,
                self.failed.1.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(
            out,
            "  {:<22} {:>7} {:>6} {:>7} {:>11.6} {:>8.0} {:>8.0}  {}",
            "blind (top quality)",
            "",
            self.blind.tasks,
            self.blind.tokens,
            self.blind.cost_usd,
            self.blind.p50(),
            self.blind.p95(),
            join(self.blind.delegates.iter().map(String::as_str)),
        );
        let _ = writeln!(
            out,
            "  {:<22} {:>7} {:>6} {:>7} {:>11.6} {:>8} {:>8}  {:.1}% of the blind cost saved; p50 {}, p95 {}",
            "savings",
            "",
            "",
            "",
            self.savings_usd(),
            "",
            "",
            self.savings_pct(),
            faster(self.blind.p50() - self.total.p50()),
            faster(self.blind.p95() - self.total.p95()),
        );
        out
    }
}

/// `612 ms faster` / `51 ms slower` / `the same`, for a blind-minus-policy difference.
fn faster(ms: f64) -> String {
    if ms.round() == 0.0 {
        "the same".into()
    } else if ms > 0.0 {
        format!("{ms:.0} ms faster")
    } else {
        format!("{:.0} ms slower", -ms)
    }
}

fn join<'a>(items: impl Iterator<Item = impl Into<std::borrow::Cow<'a, str>>>) -> String {
    items
        .map(Into::into)
        .collect::<Vec<std::borrow::Cow<'a, str>>>()
        .join(", ")
}

/// One delegate's declared and observed latency, for the "observed wins" table.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyRow {
    /// Registry name.
    pub delegate: String,
    /// Declared p50 range over its skills, ms.
    pub declared_ms: Option<(u64, u64)>,
    /// The gateway's latency EWMA, ms.
    pub observed_ms: Option<f64>,
    /// Samples behind the EWMA.
    pub samples: u64,
}

/// The declared-versus-observed table; rows whose observed latency is more than 3× the
/// slowest declared figure are flagged.
pub fn render_latency(rows: &[LatencyRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<22} {:>14} {:>12} {:>8}",
        "delegate", "declared p50", "observed", "samples"
    );
    for r in rows {
        let declared = match r.declared_ms {
            Some((lo, hi)) if lo == hi => format!("{lo} ms"),
            Some((lo, hi)) => format!("{lo}–{hi} ms"),
            None => "-".into(),
        };
        let observed = r
            .observed_ms
            .map_or_else(|| "-".into(), |o| format!("{o:.0} ms"));
        let lie = matches!((r.declared_ms, r.observed_ms), (Some((_, hi)), Some(o)) if o > 3.0 * hi as f64);
        let _ = writeln!(
            out,
            "  {:<22} {:>14} {:>12} {:>8}{}",
            r.delegate,
            declared,
            observed,
            r.samples,
            if lie {
                "  ← slower than it declares"
            } else {
                ""
            }
        );
    }
    out
}

/// An OpenAI-compatible delegate's token spend over some traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    /// Registry name.
    pub delegate: String,
    /// The upstream model.
    pub model: String,
    /// Declared USD per million input and output tokens.
    pub prices: (f64, f64),
    /// Tasks it served.
    pub tasks: usize,
    /// Tokens they used (prompt and completion).
    pub tokens: u64,
    /// What they cost: usage × the declared prices.
    pub cost_usd: f64,
}

impl TokenRow {
    /// A row for `delegate` with what it served among `outcomes`.
    pub fn of(delegate: &str, model: &str, prices: (f64, f64), outcomes: &[&Outcome]) -> Self {
        let mut row = TokenRow {
            delegate: delegate.to_owned(),
            model: model.to_owned(),
            prices,
            tasks: 0,
            tokens: 0,
            cost_usd: 0.0,
        };
        for o in outcomes {
            if let Outcome::Served {
                delegate: d,
                cost_usd,
                tokens,
                ..
            } = o
            {
                if d == delegate {
                    row.tasks += 1;
                    row.tokens += tokens;
                    row.cost_usd += cost_usd;
                }
            }
        }
        row
    }
}

/// The token-priced delegates' table: declared prices, tasks, tokens, USD.
pub fn render_tokens(rows: &[TokenRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<22} {:<14} {:>17} {:>6} {:>8} {:>11} {:>16}",
        "delegate", "model", "USD/Mtok in/out", "tasks", "tokens", "cost USD", "USD per 1k tasks"
    );
    for r in rows {
        let per_1k = if r.tasks > 0 {
            format!("{:.4}", 1000.0 * r.cost_usd / r.tasks as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "  {:<22} {:<14} {:>17} {:>6} {:>8} {:>11.6} {:>16}",
            r.delegate,
            r.model,
            format!("{}/{}", r.prices.0, r.prices.1),
            r.tasks,
            r.tokens,
            r.cost_usd,
            per_1k,
        );
    }
    out
}

/// Tasks of `skills` served to `delegate`, split at the moment its first answer came back
/// (before it, routing only had its card to go by): `((to it, of), (to it, of))` for tasks
/// sent before and after. `None` if it served none of them.
pub fn before_and_after_first_answer(
    outcomes: &[Outcome],
    tasks: &[Task],
    skills: &[&str],
    delegate: &str,
) -> Option<((usize, usize), (usize, usize))> {
    let served: Vec<(&str, Instant, f64)> = tasks
        .iter()
        .zip(outcomes)
        .filter(|(t, _)| skills.contains(&t.skill))
        .filter_map(|(_, o)| match o {
            Outcome::Served {
                delegate,
                latency_ms,
                sent,
                ..
            } => Some((delegate.as_str(), *sent, *latency_ms)),
            _ => None,
        })
        .collect();
    let first_answer = served
        .iter()
        .filter(|(d, ..)| *d == delegate)
        .map(|(_, sent, ms)| *sent + Duration::from_secs_f64(ms / 1000.0))
        .min()?;
    let (mut before, mut after) = ((0, 0), (0, 0));
    for (d, sent, _) in served {
        let slot = if sent < first_answer {
            &mut before
        } else {
            &mut after
        };
        slot.1 += 1;
        if d == delegate {
            slot.0 += 1;
        }
    }
    Some((before, after))
}

/// One batch of quiz tasks under one policy, summarised.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuizBatch {
    /// Position of its first task in the quiz (0-based).
    pub first: usize,
    /// Tasks sent.
    pub tasks: usize,
    /// Answers the liar delivered.
    pub liar: usize,
    /// Answers that were right.
    pub right: usize,
    /// Tasks that got no answer (`VERIFICATION_FAILED`, `NO_ELIGIBLE_DELEGATE`, …).
    pub failed: usize,
    /// Their error codes.
    pub failures: BTreeSet<String>,
    /// Answers that passed verification (`peer_verified`), by the ledger.
    pub checked: usize,
    /// What the ledger charged: every result (voted-down ones too) and every verifier.
    pub cost_usd: f64,
    /// The liar's quality at the quiz skill after the batch, as routing blends it.
    pub liar_quality: Option<f64>,
    /// The (decayed) weight of the votes on the liar so far.
    pub liar_evidence: f64,
    /// What `min_quality` compares: the liar's blend plus one standard deviation (none: the
    /// blend itself).
    pub liar_plausible: Option<f64>,
}

impl QuizBatch {
    /// Summarises a batch from its first task's position, its `outcomes` (one per task), the
    /// ledger's rows for its tasks as `(cost_usd, peer_verified)`, and the liar's quality and
    /// evidence afterwards.
    pub fn new(
        first: usize,
        outcomes: &[Outcome],
        rows: impl IntoIterator<Item = (f64, bool)>,
        liar: &str,
        liar_quality: Option<f64>,
        liar_evidence: f64,
    ) -> Self {
        let mut b = QuizBatch {
            first,
            tasks: outcomes.len(),
            liar_quality,
            liar_evidence,
            ..QuizBatch::default()
        };
        for o in outcomes {
            match o {
                Outcome::Served {
                    delegate, right, ..
                } => {
                    b.liar += usize::from(delegate == liar);
                    b.right += usize::from(*right == Some(true));
                }
                Outcome::Unroutable(_) => {
                    b.failed += 1;
                    b.failures.insert("NO_ELIGIBLE_DELEGATE".into());
                }
                Outcome::Failed(reason) => {
                    b.failed += 1;
                    let code = reason.split(':').next().unwrap_or_default();
                    b.failures.insert(code.to_owned());
                }
            }
        }
        for (cost_usd, peer_verified) in rows {
            b.cost_usd += cost_usd;
            b.checked += usize::from(peer_verified);
        }
        b
    }

    /// These batches as one: sums, and the last batch's quality.
    pub fn total(batches: &[QuizBatch]) -> QuizBatch {
        let mut t = QuizBatch::default();
        for b in batches {
            t.tasks += b.tasks;
            t.liar += b.liar;
            t.right += b.right;
            t.failed += b.failed;
            t.failures.extend(b.failures.iter().cloned());
            t.checked += b.checked;
            t.cost_usd += b.cost_usd;
            t.liar_quality = b.liar_quality;
            t.liar_evidence = b.liar_evidence;
        }
        t
    }

    fn pct(&self, n: usize) -> String {
        if self.tasks == 0 {
            "-".into()
        } else {
            format!("{:.0}%", 100.0 * n as f64 / self.tasks as f64)
        }
    }

    fn quality(&self) -> String {
        match (self.liar_quality, self.liar_evidence) {
            (None, _) => "-".into(),
            (Some(q), e) if e <= 0.0 => format!("{q:.2}"),
            (Some(q), e) => format!("{q:.2} ({e:.1})"),
        }
    }
}

/// The quiz table: per batch of tasks, side by side, the unverified and the verified
/// policy's liar share (of the answers), the liar's blended quality (with the weight of the
/// votes on it), right answers, tasks verified, tasks without an answer and cost; then totals.
pub fn render_quiz(unverified: &[QuizBatch], verified: &[QuizBatch]) -> String {
    let mut out = String::new();
    // Each policy's columns under a rule naming it.
    let rule = |title: &str, width: usize| {
        let head = format!("── {title} ");
        let rest = width.saturating_sub(head.chars().count());
        format!("{head}{}", "─".repeat(rest))
    };
    let _ = writeln!(
        out,
        "  {:<9}  {}  {}",
        "",
        rule("unverified", 41),
        rule("verified", 58)
    );
    let _ = writeln!(
        out,
        "  {:<9}  {:>10} {:>12} {:>6} {:>10}  {:>10} {:>12} {:>8} {:>6} {:>7} {:>10}",
        "tasks",
        "liar share",
        "liar quality",
        "right",
        "cost USD",
        "liar share",
        "liar quality",
        "verified",
        "right",
        "failed",
        "cost USD"
    );
    let line = |out: &mut String, label: &str, u: &QuizBatch, v: &QuizBatch| {
        let _ = writeln!(
            out,
            "  {:<9}  {:>10} {:>12} {:>6} {:>10.4}  {:>10} {:>12} {:>8} {:>6} {:>7} {:>10.4}",
            label,
            u.pct(u.liar),
            u.quality(),
            u.pct(u.right),
            u.cost_usd,
            v.pct(v.liar),
            v.quality(),
            v.checked,
            v.pct(v.right),
            v.failed,
            v.cost_usd,
        );
    };
    let blank = QuizBatch::default();
    for i in 0..unverified.len().max(verified.len()) {
        let u = unverified.get(i).unwrap_or(&blank);
        let v = verified.get(i).unwrap_or(&blank);
        let first = if u.tasks > 0 { u } else { v };
        let label = format!("{}–{}", first.first + 1, first.first + first.tasks);
        line(&mut out, &label, u, v);
    }
    let (u, v) = (QuizBatch::total(unverified), QuizBatch::total(verified));
    line(&mut out, "all", &u, &v);
    out
}

/// The quiz in a few sentences: where the liar's traffic went, what was delivered, at what
/// cost, under each policy.
pub fn quiz_story(
    liar: &str,
    declared: f64,
    floor: f64,
    unverified: &[QuizBatch],
    verified: &[QuizBatch],
) -> String {
    let (u, v) = (QuizBatch::total(unverified), QuizBatch::total(verified));
    let mut out = format!(
        "unverified: nothing contradicts {liar}'s card, so the cheapest delegate above the \
         floor gets everything: {} of {} answers, {} of them right.\n",
        u.liar,
        u.tasks,
        u.pct(u.right)
    );
    // The first batch after which the liar was under the policy's floor, as `min_quality`
    // judges it (its blend with the benefit of the evidence's doubt).
    let fell = verified.iter().find(|b| {
        b.liar_plausible
            .or(b.liar_quality)
            .is_some_and(|q| q < floor)
    });
    match (fell, v.liar_quality) {
        (Some(b), Some(q)) => {
            let _ = write!(
                out,
                "verified: the votes on a sample of its answers took its quality from \
                 {declared} to {q:.2}; by task {} even its most favourable reading was under the \
                 floor of {floor}, so routing stopped choosing it; it answered {} of {} tasks and \
                 the honest producers the rest: {} right",
                b.first + b.tasks,
                v.liar,
                v.tasks,
                v.pct(v.right),
            );
        }
        _ => {
            let _ = write!(
                out,
                "verified: its quality did not fall under the floor of {floor}; it answered {} \
                 of {} tasks, {} right",
                v.liar,
                v.tasks,
                v.pct(v.right)
            );
        }
    }
    if v.failed > 0 {
        let codes: Vec<&str> = v.failures.iter().map(String::as_str).collect();
        let _ = write!(
            out,
            " ({} without an answer: {})",
            v.failed,
            codes.join(", ")
        );
    }
    if u.cost_usd > 0.0 {
        let _ = write!(
            out,
            ", for {:.1}× the cost (dearer producers, and the verifiers).",
            v.cost_usd / u.cost_usd
        );
    } else {
        out.push('.');
    }
    out.push('\n');
    out
}

/// One quiz delegate's quality at its skill after the quiz, as routing sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct QualityRow {
    /// Registry name.
    pub delegate: String,
    /// Its skill (`quiz` or `verify`).
    pub skill: String,
    /// What its card declares.
    pub declared: Option<f64>,
    /// The probability the demo gave it of being right (the gateway does not know it).
    pub accuracy: f64,
    /// What the votes say: weighted mean and weight.
    pub observed: Option<(f64, f64)>,
    /// The blend routing uses.
    pub blended: Option<f64>,
    /// What `min_quality` compares (none: the blend).
    pub plausible: Option<f64>,
}

/// The declared-versus-observed quality table; rows `min_quality` (`floor`) excludes (their
/// blend plus one standard deviation below it) are flagged.
pub fn render_quality(rows: &[QualityRow], floor: f64, reliability_floor: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<22} {:<7} {:>8} {:>8} {:>18} {:>8}",
        "delegate", "skill", "accuracy", "declared", "observed (votes)", "blended"
    );
    let num = |q: Option<f64>| q.map_or_else(|| "-".into(), |q| format!("{q:.2}"));
    for r in rows {
        let observed = r
            .observed
            .map_or_else(|| "-".into(), |(m, n)| format!("{m:.2} ({n:.1})"));
        // A verifier's blend is its reliability, compared as it is with `min_reliability`.
        let verifier = r.skill == super::fleet::VERIFY_SKILL;
        let below = if verifier {
            r.blended.is_some_and(|b| b < reliability_floor)
        } else {
            r.plausible.or(r.blended).is_some_and(|b| b < floor)
        };
        let _ = writeln!(
            out,
            "  {:<22} {:<7} {:>8} {:>8} {:>18} {:>8}{}",
            r.delegate,
            r.skill,
            format!("{:.2}", r.accuracy),
            num(r.declared),
            observed,
            num(r.blended),
            if below && verifier {
                format!("  ← below min_reliability {reliability_floor}: not chosen to vote")
            } else if below {
                format!("  ← below min_quality {floor}: not routed to")
            } else {
                String::new()
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::demo::traffic::tasks;

    fn served(d: &str, cost: f64, ms: f64) -> Outcome {
        Outcome::Served {
            delegate: d.into(),
            cost_usd: cost,
            tokens: 10,
            latency_ms: ms,
            sent: Instant::now(),
            right: None,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 10.0);
        assert_eq!(percentile(&v, 0.95), 19.0);
        assert_eq!(percentile(&[7.0], 0.95), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn blind_is_compared_on_the_tasks_the_policy_served() {
        let t = tasks(4);
        let policy = [
            served("cheap", 0.001, 100.0),
            served("cheap", 0.001, 300.0),
            Outcome::Unroutable("no".into()),
            Outcome::Failed("UPSTREAM_FAILED: x".into()),
        ];
        let blind = [
            served("top", 0.010, 900.0),
            served("top", 0.030, 1400.0),
            served("top", 0.004, 450.0),
            served("top", 0.020, 1200.0),
        ];
        let r = PolicyReport::new("cheapest", &t, &policy, &blind);
        assert_eq!(r.total.tasks, 2);
        assert_eq!(r.blind.tasks, 2, "unroutable and failed tasks are left out");
        assert!((r.blind.cost_usd - 0.040).abs() < 1e-12);
        assert!((r.savings_usd() - 0.038).abs() < 1e-12);
        assert!((r.savings_pct() - 95.0).abs() < 1e-9);
        assert_eq!(r.unroutable.get("translate"), Some(&(1, "no".to_owned())));
        assert_eq!(r.failed.0, 1);
        let table = r.render("cheapest");
        assert!(
            table.contains("NO_ELIGIBLE_DELEGATE for translate: no"),
            "{table}"
        );
        assert!(
            table.contains("95.0% of the blind cost saved; p50 800 ms faster, p95 1100 ms faster"),
            "{table}"
        );
        let row = table.lines().find(|l| l.contains("cheap ")).unwrap();
        assert!(row.contains("100.0%"), "{row}");
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2..4], ["2", "20"], "tasks and tokens: {row}");
    }

    #[test]
    fn token_rows_sum_what_the_delegate_served() {
        let mut a = served("mini", 0.0003, 600.0);
        if let Outcome::Served { tokens, .. } = &mut a {
            *tokens = 120;
        }
        let b = served("mini", 0.0001, 600.0);
        let other = served("local", 0.0, 250.0);
        let failed = Outcome::Failed("x".into());
        let row = TokenRow::of(
            "mini",
            "gpt-4o-mini",
            (0.15, 0.6),
            &[&a, &b, &other, &failed],
        );
        assert_eq!((row.tasks, row.tokens), (2, 130));
        assert!((row.cost_usd - 0.0004).abs() < 1e-12);
        let table = render_tokens(&[row, TokenRow::of("idle", "m", (0.0, 0.0), &[])]);
        let mini = table.lines().find(|l| l.contains("mini ")).unwrap();
        assert!(
            mini.contains("0.15/0.6") && mini.contains("0.000400"),
            "{table}"
        );
        assert!(
            mini.trim_end().ends_with("0.2000"),
            "USD per 1k tasks: {table}"
        );
        let idle = table.lines().find(|l| l.contains("idle")).unwrap();
        assert!(idle.trim_end().ends_with('-'), "{table}");
    }

    #[test]
    fn traffic_is_split_at_the_first_answer() {
        let t = tasks(10);
        let t0 = Instant::now();
        let at = |d: &str, sent_ms: u64, ms: f64| Outcome::Served {
            delegate: d.into(),
            cost_usd: 0.0,
            tokens: 0,
            latency_ms: ms,
            sent: t0 + Duration::from_millis(sent_ms),
            right: None,
        };
        // reasoning and code-review are tasks 1, 3, 6, 8; the liar's first answer is at 1800.
        let o = [
            at("fast", 0, 40.0),
            at("liar", 0, 1800.0),
            at("fast", 10, 40.0),
            at("liar", 10, 1800.0),
            at("fast", 20, 40.0),
            at("fast", 20, 40.0),
            at("honest", 1900, 1000.0),
            at("fast", 30, 40.0),
            at("liar", 1700, 1800.0),
            at("fast", 30, 40.0),
        ];
        let split = before_and_after_first_answer(&o, &t, &["reasoning", "code-review"], "liar");
        assert_eq!(split, Some(((3, 3), (0, 1))));
        let none = before_and_after_first_answer(&o, &t, &["summarize"], "liar");
        assert_eq!(none, None);
    }

    fn quiz(d: &str, right: Option<bool>) -> Outcome {
        match served(d, 0.001, 50.0) {
            Outcome::Served {
                delegate,
                cost_usd,
                tokens,
                latency_ms,
                sent,
                ..
            } => Outcome::Served {
                delegate,
                cost_usd,
                tokens,
                latency_ms,
                sent,
                right,
            },
            other => other,
        }
    }

    #[test]
    fn a_quiz_batch_counts_the_liar_right_answers_failures_and_the_ledger() {
        let outcomes = [
            quiz("liar", Some(true)),
            quiz("liar", Some(false)),
            quiz("honest", Some(true)),
            Outcome::Failed("VERIFICATION_FAILED: x".into()),
        ];
        let rows = [
            (0.001, false),
            (0.0023, true),
            (0.004, false),
            (0.0061, false),
        ];
        let b = QuizBatch::new(20, &outcomes, rows, "liar", Some(0.66), 3.8);
        assert_eq!(
            (b.first, b.tasks, b.liar, b.right, b.failed),
            (20, 4, 2, 2, 1)
        );
        assert_eq!(
            b.failures.iter().collect::<Vec<_>>(),
            ["VERIFICATION_FAILED"]
        );
        assert_eq!(b.checked, 1);
        assert!((b.cost_usd - 0.0134).abs() < 1e-12);
        let blind = QuizBatch::new(
            0,
            &outcomes[..2],
            [(0.001, false), (0.001, false)],
            "liar",
            Some(0.95),
            0.0,
        );
        let table = render_quiz(
            &[blind.clone(), blind],
            &[
                QuizBatch {
                    first: 0,
                    ..b.clone()
                },
                b,
            ],
        );
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 5, "{table}");
        let first: Vec<&str> = rows[2].split_whitespace().collect();
        assert_eq!(
            first[..5],
            ["1–2", "100%", "0.95", "50%", "0.0020"],
            "{table}"
        );
        assert_eq!(
            first[5..],
            ["50%", "0.66", "(3.8)", "1", "50%", "1", "0.0134"],
            "{table}"
        );
        let all: Vec<&str> = rows[4].split_whitespace().collect();
        assert_eq!(all[0], "all");
        assert_eq!(
            all[5..],
            ["50%", "0.66", "(3.8)", "2", "50%", "2", "0.0268"],
            "{table}"
        );
    }

    #[test]
    fn the_quiz_story_says_when_the_liar_fell_and_what_it_cost() {
        let batch = |first, liar, right, q, cost| QuizBatch {
            first,
            tasks: 20,
            liar,
            right,
            liar_quality: Some(q),
            liar_evidence: 1.0,
            cost_usd: cost,
            ..QuizBatch::default()
        };
        let unverified = [batch(0, 20, 10, 0.95, 0.02), batch(20, 20, 10, 0.95, 0.02)];
        let mut verified = [batch(0, 12, 14, 0.97, 0.05), batch(20, 0, 20, 0.49, 0.11)];
        verified[1].failed = 1;
        verified[1].failures.insert("VERIFICATION_FAILED".into());
        let story = quiz_story("liar", 0.95, 0.8, &unverified, &verified);
        assert!(
            story.contains("40 of 40 answers, 50% of them right"),
            "{story}"
        );
        assert!(
            story.contains("from 0.95 to 0.49; by task 40 even its most favourable reading"),
            "{story}"
        );
        assert!(story.contains("it answered 12 of 40 tasks"), "{story}");
        assert!(
            story.contains(
                "85% right (1 without an answer: VERIFICATION_FAILED), for 4.0× the cost"
            ),
            "{story}"
        );
        let kept = quiz_story("liar", 0.95, 0.8, &unverified, &unverified);
        assert!(kept.contains("did not fall under the floor"), "{kept}");
    }

    #[test]
    fn quality_under_the_floor_is_flagged() {
        let row = |d: &str, observed, blended| QualityRow {
            delegate: d.into(),
            skill: "quiz".into(),
            declared: Some(0.95),
            accuracy: 0.5,
            observed,
            blended,
            plausible: None,
        };
        let t = render_quality(
            &[
                row("liar", Some((0.2, 3.8)), Some(0.49)),
                row("fresh", None, Some(0.95)),
            ],
            0.8,
            0.6,
        );
        let flagged: Vec<&str> = t.lines().filter(|l| l.contains('←')).collect();
        assert_eq!(flagged.len(), 1, "{t}");
        assert!(
            flagged[0].contains("liar") && flagged[0].contains("0.20 (3.8)"),
            "{t}"
        );
    }

    #[test]
    fn a_lie_is_flagged() {
        let rows = [
            LatencyRow {
                delegate: "honest".into(),
                declared_ms: Some((300, 350)),
                observed_ms: Some(330.0),
                samples: 9,
            },
            LatencyRow {
                delegate: "liar".into(),
                declared_ms: Some((120, 120)),
                observed_ms: Some(1800.0),
                samples: 3,
            },
        ];
        let t = render_latency(&rows);
        let flagged: Vec<&str> = t.lines().filter(|l| l.contains('←')).collect();
        assert_eq!(flagged.len(), 1, "{t}");
        assert!(flagged[0].contains("liar"), "{t}");
        assert!(t.contains("300–350 ms"), "{t}");
    }
}
