//! Calibration rounds (LADP §11, §8 `calibration-init`, §4.2.8 `calibration`): a policy's
//! `[verify.calibration]` sends every verifier of its verify skill `items` reference items at
//! start and every `every`, each shaped exactly as a real verification task (the same
//! `{"input", "output", "skill"}` input, a task id of the same form, in a session opened as
//! for a client), and scores its verdicts against the reference's `correct`.
//!
//! The score is the balanced accuracy (the mean of its accuracy on right and on wrong items,
//! when the round has both): a verifier that passes everything scores 0.5 whatever the mix.
//! Items are drawn half right, half wrong (when the reference has both). The round is
//! evidence of its reliability (the score, weighing one observation per item answered; none
//! from a round answered in one class only), and is recorded as one ledger row per verifier with no tenant (tenant `""`:
//! never charged to one; its cost counted under `ldp_gateway_cost_usd_total{tenant=""}`),
//! its `routing` column holding `{"calibration": {round, reference_source, items, answered,
//! score, evidence, reliability_before, reliability, adjustment}}` (`evidence`: the score as
//! evidence, none from a round answered in one class only). Those rows are evidence in the
//! ledger: rebuilding learned quality (at start, and on a shared ledger every `[quality]
//! refresh`) reads them back, so a restarted replica keeps what the rounds taught and, in
//! cluster mode, every replica learns the rounds any one of them ran.
//!
//! In cluster mode the cluster runs one round per window of `every` (counted from the Unix
//! epoch), not one per replica: a replica runs it only after taking the window's lease in
//! Redis (`state/lease.rs`). When Redis does not answer, no round runs (fail closed: the
//! verifiers are not called N times over) and the lease is asked for again at the next tick.
//!
//! Bounded: at most [`MAX_REFERENCE_BYTES`] of reference read per round, `items` (≤ 100) per
//! verifier, [`CALIBRATION_CONCURRENCY`] at a time; paused (429) and ejected verifiers skipped; LDP verifiers only (an OpenAI-backed or A2A verifier is not calibrated).

use super::pipeline::{read_verdict, verification_input};
use super::Proxy;
use crate::ldp::{Body, Envelope, Json, PayloadMode, SessionConfig, TaskId};
use crate::policy::{Calibration, Policy, Verify};
use crate::provenance::{JsonText, LedgerRow, Outcome};
use crate::registry::Delegate;
use crate::state::lease::{self, Lease};
use crate::state::redis::Redis;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The most of a reference file read (the rest is ignored, and said so once per round).
pub const MAX_REFERENCE_BYTES: u64 = 4 * 1024 * 1024;

/// How often the loop looks for a round that is due (and for policies reloaded).
const TICK: Duration = Duration::from_secs(1);

/// How soon a round that could not run (no reference, no verifier) is tried again.
const RETRY: Duration = Duration::from_secs(60);

/// Items sent to one verifier at once.
const CALIBRATION_CONCURRENCY: usize = 4;

/// Up to `n` items drawn at random, half of them right and half wrong when the reference has
/// both (the other class filling in where one runs short): a round of one class cannot tell
/// a judge from a rubber stamp.
fn draw<'a>(items: &'a [Item], n: usize, rng: &mut fastrand::Rng) -> Vec<&'a Item> {
    let (right, wrong): (Vec<&Item>, Vec<&Item>) = items.iter().partition(|i| i.correct);
    let n = n.min(items.len());
    let from_wrong = (n / 2).min(wrong.len()).max(n.saturating_sub(right.len()));
    let from_right = n - from_wrong;
    let mut out = rng.choose_multiple(right, from_right);
    out.extend(rng.choose_multiple(wrong, from_wrong));
    rng.shuffle(&mut out);
    out
}

/// One reference item: a task's input and an output, and whether that output is right.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Item {
    /// The skill of the judged task.
    pub skill: String,
    /// Its input.
    pub input: Json,
    /// The output to judge.
    pub output: Json,
    /// Whether the output is right.
    pub correct: bool,
}

/// Why a reference could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not an item.
    #[error("{path}:{line}: not a calibration item ({{skill, input, output, correct}}): {reason}")]
    Item {
        /// The file.
        path: String,
        /// Its 1-based line.
        line: usize,
        /// Why.
        reason: String,
    },
    /// No items at all.
    #[error("{0}: no calibration items")]
    Empty(String),
}

/// Reads a reference: JSON Lines of [`Item`] (blank lines and lines starting with `#`
/// skipped), at most [`MAX_REFERENCE_BYTES`]: a longer file is read up to its last whole
/// line within them (said once per process). Blocking: call it off the async workers.
pub fn load_reference(path: &Path) -> Result<Vec<Item>, ReferenceError> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let read = |source| ReferenceError::Read {
        path: name.clone(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read)?
        .take(MAX_REFERENCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_REFERENCE_BYTES {
        // Cut: the partial last line (and any character it cut) is dropped.
        let whole = bytes[..MAX_REFERENCE_BYTES as usize]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        bytes.truncate(whole);
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(path = %name, max_bytes = MAX_REFERENCE_BYTES,
                "calibration reference longer than the cap: the rest is ignored");
        }
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let mut items = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_text = line.trim();
        if line_text.is_empty() || line_text.starts_with('#') {
            continue;
        }
        let item = serde_json::from_str::<Item>(line_text).map_err(|e| ReferenceError::Item {
            path: name.clone(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        items.push(item);
    }
    if items.is_empty() {
        return Err(ReferenceError::Empty(name));
    }
    Ok(items)
}

/// How one verifier did in one round.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Score {
    /// Right verdicts on right items, and right items answered.
    pub right_on_right: u32,
    pub right: u32,
    /// Right verdicts on wrong items, and wrong items answered.
    pub right_on_wrong: u32,
    pub wrong: u32,
}

impl Score {
    fn add(&mut self, correct: bool, passed: bool) {
        if correct {
            self.right += 1;
            self.right_on_right += u32::from(passed);
        } else {
            self.wrong += 1;
            self.right_on_wrong += u32::from(!passed);
        }
    }

    /// The score as evidence: only from a round answered in both classes (on one class a
    /// rubber stamp may score 1).
    pub fn evidence(&self) -> Option<f64> {
        self.value().filter(|_| self.right > 0 && self.wrong > 0)
    }

    /// Items answered with a verdict.
    pub fn answered(&self) -> u32 {
        self.right + self.wrong
    }

    /// The balanced accuracy when the round had both kinds of items, else the plain
    /// accuracy; none without a verdict.
    pub fn value(&self) -> Option<f64> {
        let rate = |hit: u32, of: u32| f64::from(hit) / f64::from(of);
        match (self.right, self.wrong) {
            (0, 0) => None,
            (0, w) => Some(rate(self.right_on_wrong, w)),
            (r, 0) => Some(rate(self.right_on_right, r)),
            (r, w) => Some((rate(self.right_on_right, r) + rate(self.right_on_wrong, w)) / 2.0),
        }
    }
}

/// What one verifier's part of a round came to.
struct Outcome1 {
    score: Score,
    cost: f64,
    upstream_session: Option<String>,
    error: Option<String>,
    started_at: String,
    started: Instant,
}

/// When one schedule (verify skill, reference) last ran or tried a round.
#[derive(Debug, Default)]
struct Schedule {
    /// Rounds this replica ran.
    rounds: u64,
    /// Single node: when the last round started (or is due again, after one that could not
    /// run).
    at: Option<Instant>,
    /// Cluster mode: the window whose lease this replica last took or found taken, and, when
    /// it took it for a round that could not run, when to try that window again.
    window: Option<(i64, Option<Instant>)>,
}

/// Why a round is to run now.
enum Turn {
    /// A single node's round, due by its own schedule.
    Due,
    /// In cluster mode: this replica holds the window's lease.
    Leased(Lease),
}

impl Proxy {
    /// The calibration loop: every policy's `[verify.calibration]` (one schedule per verify
    /// skill and reference, the first policy naming it giving `every` and `items`), until
    /// `shutdown`. On a single node, a round at start and each `every`. In cluster mode, one
    /// round per window of `every` for the whole cluster: the replica that takes the
    /// window's lease in Redis runs it ([`crate::state::lease`]); when Redis does not
    /// answer, no round runs (fail closed) and the lease is asked for again at the next tick.
    pub fn spawn_calibration(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            // This replica's name in the leases it holds.
            let holder = crate::ldp::new_id();
            let mut last: HashMap<(String, PathBuf), Schedule> = HashMap::new();
            loop {
                let policies = self.policies();
                let mut seen = Vec::new();
                for p in &policies.policies {
                    let Some((verify, cal)) = p
                        .verify
                        .as_ref()
                        .and_then(|v| v.calibration.as_ref().map(|c| (v, c)))
                    else {
                        continue;
                    };
                    let key = (verify.skill.clone(), cal.reference.clone());
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key.clone());
                    let s = last.entry(key).or_default();
                    let run = match &self.redis {
                        None => self.round_due(s, cal),
                        Some(redis) => self.lease_won(redis, &holder, s, verify, cal).await,
                    };
                    let Some(turn) = run else {
                        continue;
                    };
                    let round = s.rounds + 1;
                    tokio::select! {
                        ran = self.calibrate(p, verify, cal, round) => {
                            if ran {
                                s.rounds = round;
                            } else {
                                self.round_not_run(s, cal, turn, &holder).await;
                            }
                        },
                        _ = shutdown.changed() => return,
                    }
                }
                // Schedules of policies gone are forgotten (bounded by the policy set).
                last.retain(|k, _| seen.contains(k));
                tokio::select! {
                    () = tokio::time::sleep(TICK) => {}
                    _ = shutdown.changed() => return,
                }
            }
        })
    }

    /// Single node: whether a round is due (at start, then `every` after the last one
    /// started); if so, it is marked started now.
    fn round_due(&self, s: &mut Schedule, cal: &Calibration) -> Option<Turn> {
        if s.at.is_some_and(|at| at.elapsed() < cal.every) {
            return None;
        }
        s.at = Some(Instant::now());
        Some(Turn::Due)
    }

    /// Cluster mode: whether this replica runs the round of the current window, asking Redis
    /// for its lease once per window (and again once a round it won could not run). Redis
    /// not answering runs nothing: asked again at the next tick.
    async fn lease_won(
        &self,
        redis: &Redis,
        holder: &str,
        s: &mut Schedule,
        verify: &Verify,
        cal: &Calibration,
    ) -> Option<Turn> {
        let window = lease::window(crate::registry::quality::now_ms(), cal.every);
        if let Some((w, retry)) = s.window {
            if w == window && retry.is_none_or(|at| Instant::now() < at) {
                return None;
            }
        }
        let reference = cal.reference.display().to_string();
        let lease = Lease::calibration(redis, &verify.skill, &reference, window);
        match lease.take(redis, holder, cal.every).await {
            Ok(won) => {
                s.window = Some((window, None));
                won.then_some(Turn::Leased(lease))
            }
            Err(e) => {
                tracing::debug!(skill = %verify.skill, error = %e,
                    "calibration round not run: its lease could not be asked for");
                None
            }
        }
    }

    /// A round that could not run (no reference, no verifier) is tried again in RETRY (or
    /// `every`, if sooner); in cluster mode its lease is given up, so that the window's
    /// round may still run.
    async fn round_not_run(&self, s: &mut Schedule, cal: &Calibration, turn: Turn, holder: &str) {
        let now = Instant::now();
        let again = cal.every.min(RETRY);
        match (turn, &self.redis) {
            (Turn::Leased(lease), Some(redis)) => {
                if let Some((_, retry)) = &mut s.window {
                    *retry = Some(now + again);
                }
                if let Err(e) = lease.give_up(redis, holder).await {
                    tracing::debug!(error = %e, "calibration lease not given up: it lapses");
                }
            }
            _ => s.at = Some(now.checked_sub(cal.every - again).unwrap_or(now)),
        }
    }

    /// One round for one policy: every healthy LDP verifier of its verify skill that its
    /// card-only constraints allow (calibration sends them data too), neither paused by a
    /// 429 nor ejected, is sent the same `items` reference items, drawn at random from both
    /// classes, all verifiers at once. False when the round could not run (no reference,
    /// no verifier): it is tried again soon.
    pub async fn calibrate(
        &self,
        policy: &Arc<Policy>,
        verify: &Verify,
        cal: &Calibration,
        round: u64,
    ) -> bool {
        let path = cal.reference.clone();
        let loaded = tokio::task::spawn_blocking(move || load_reference(&path)).await;
        let items = match loaded {
            Ok(Ok(items)) => items,
            Ok(Err(e)) => {
                tracing::warn!(policy = %policy.name.0, error = %e, "calibration round skipped");
                return false;
            }
            Err(e) => {
                tracing::warn!(policy = %policy.name.0, error = %e, "calibration round skipped");
                return false;
            }
        };
        let drawn = draw(&items, cal.items as usize, &mut fastrand::Rng::new());
        let index = self.registry.index();
        let (offers, statics) = index.offers_with_statics(&verify.skill, policy, &self.cfg.routing);
        let verifiers: Vec<Arc<Delegate>> = offers
            .iter()
            .zip(statics.iter())
            // Calibration talks to verifiers over LDP sessions of its own.
            .filter(|(o, st)| {
                st.passes() && o.delegate.is_healthy() && o.delegate.upstream.keeps_sessions()
            })
            .filter(|(o, _)| !o.delegate.is_paused() && !o.delegate.load().ejected)
            .map(|(o, _)| o.delegate.clone())
            .collect();
        if verifiers.is_empty() {
            tracing::debug!(policy = %policy.name.0, "no verifier to calibrate: tried again soon");
            return false;
        }
        let runs = verifiers
            .iter()
            .map(|d| self.calibrate_one(d, &verify.skill, &drawn));
        let outcomes = futures_util::future::join_all(runs).await;
        for (d, o) in verifiers.iter().zip(outcomes) {
            self.settle_calibration(policy, verify, cal, round, d, o)
                .await;
        }
        true
    }

    /// Sends one verifier the items, in one upstream session opened as for a client.
    async fn calibrate_one(&self, d: &Delegate, skill: &str, items: &[&Item]) -> Outcome1 {
        let started = Instant::now();
        let mut out = Outcome1 {
            score: Score::default(),
            cost: 0.0,
            upstream_session: None,
            error: None,
            started_at: crate::ldp::now_rfc3339(),
            started,
        };
        let Some(card) = d.card() else {
            out.error = Some("no identity card".into());
            return out;
        };
        let config = SessionConfig {
            preferred_payload_modes: Some(vec![PayloadMode::Text]),
            payload_mode: Some(PayloadMode::Text),
            ttl_secs: Some(self.cfg.sessions.default_ttl.as_secs().max(1)),
            required_trust_domain: None,
            trust_domain: Some(self.cfg.identity.trust_domain.name.clone()),
            policy: None,
        };
        let session = match self.upstream.open_session(&d.base_url, &card, config).await {
            Ok(s) => s,
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        };
        let timeout = self.cfg.upstream.task_timeout;
        let mut answers = Vec::with_capacity(items.len());
        for chunk in items.chunks(CALIBRATION_CONCURRENCY) {
            let sends = chunk.iter().map(|item| {
                let session = &session;
                async move {
                    let input = verification_input(&item.input, &item.output, &item.skill).ok()?;
                    let task_id = TaskId::from(format!(
                        "{}~verify-{}",
                        crate::ldp::new_id(),
                        crate::ldp::new_id()
                    ));
                    let env = Envelope::new(
                        session.session_id.as_str(),
                        self.id(),
                        session.delegate_id.as_str(),
                        Body::TaskSubmit {
                            task_id,
                            skill: skill.to_owned(),
                            input,
                            contract: None,
                        },
                        session.payload.mode,
                    );
                    let answer = self
                        .upstream
                        .send_hops(&d.base_url, &env, timeout, Some(1).into())
                        .await
                        .ok()?;
                    match answer.body {
                        Body::TaskResult {
                            output, provenance, ..
                        } => {
                            let cost = provenance.and_then(|p| p.cost_usd);
                            Some((read_verdict(&output).map(|v| v.passed), cost))
                        }
                        _ => None,
                    }
                }
            });
            answers.extend(futures_util::future::join_all(sends).await);
        }
        let declared = self.declared_cost(d, skill).unwrap_or(0.0);
        for (item, answer) in items.iter().zip(answers) {
            let Some((verdict, cost)) = answer else {
                continue;
            };
            let cost = cost
                .filter(|c| c.is_finite() && *c >= 0.0)
                .unwrap_or(declared);
            out.cost += cost;
            if let Some(passed) = verdict {
                out.score.add(item.correct, passed);
            }
        }
        out.upstream_session = Some(session.session_id.to_string());
        self.upstream.close_session(&d.base_url, &session).await;
        out
    }

    /// Learns one verifier's round, counts its cost and records its ledger row.
    async fn settle_calibration(
        &self,
        policy: &Policy,
        verify: &Verify,
        cal: &Calibration,
        round: u64,
        d: &Delegate,
        o: Outcome1,
    ) {
        let skill = verify.skill.as_str();
        let reliability = || {
            self.registry
                .quality_of(&d.name, skill)
                .and_then(|q| q.blended)
        };
        let before = reliability();
        let now = crate::registry::quality::now_ms();
        if let Some(score) = o.score.evidence() {
            let weight = f64::from(o.score.answered());
            self.registry
                .observe_calibration(&d.name, skill, score, weight, now);
        }
        let after = reliability();
        let adjustment = match (before, after) {
            (Some(b), Some(a)) => Some(a - b),
            _ => None,
        };
        tracing::info!(verifier = %d.name, round, score = ?o.score.value(), ?before, ?after,
            "calibration round");
        if o.cost > 0.0 {
            self.metrics
                .cost_usd
                .with_label_values(&["", skill, d.name.as_str(), policy.name.0.as_str()])
                .inc_by(o.cost);
        }
        let routing = JsonText::of(&serde_json::json!({
            "policy": policy.name.0,
            "calibration": {
                "round": round,
                "reference_source": cal.reference.display().to_string(),
                "items": cal.items,
                "answered": o.score.answered(),
                "score": o.score.value(),
                "evidence": o.score.evidence(),
                "reliability_before": before,
                "reliability": after,
                "adjustment": adjustment,
            }
        }));
        let card = d.card();
        let finished = chrono::Utc::now();
        let elapsed_ms = o.started.elapsed().as_secs_f64() * 1000.0;
        let row = LedgerRow {
            task_id: format!(
                "{}{}",
                crate::provenance::CALIBRATION_TASK_PREFIX,
                crate::ldp::new_id()
            ),
            ingress: crate::provenance::Ingress::Ldp,
            session_id: String::new(),
            upstream_session_id: o.upstream_session,
            tenant: String::new(),
            skill: skill.to_owned(),
            policy: Some(policy.name.0.clone()),
            delegate: Some(d.name.clone()),
            delegate_id: card.as_ref().map(|c| c.delegate_id.clone()),
            model_version: card.as_ref().map(|c| c.model_version.clone()),
            outcome: if o.error.is_some() {
                Outcome::Failed
            } else {
                Outcome::Result
            },
            error_code: o.error.as_ref().map(|_| "CALIBRATION_FAILED".to_owned()),
            error_message: o.error,
            score: None,
            candidates: None,
            attempts: cal.items,
            fallbacks: Vec::new(),
            payload_mode: Some(PayloadMode::Text.as_str().to_owned()),
            latency_ms: elapsed_ms,
            upstream_ms: elapsed_ms,
            cost_usd: Some(o.cost),
            reported_cost_usd: None,
            declared_cost_usd: self.declared_cost(d, skill),
            tokens: None,
            confidence: o.score.value(),
            verification_status: None,
            started_at: o.started_at,
            finished_at: finished.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            finished_ms: finished.timestamp_millis(),
            output_sha256: None,
            lineage: JsonText::of(&[] as &[u8]),
            routing,
            payload: None,
            votes: Vec::new(),
            trace_id: None,
            usage: None,
        };
        if let Err(e) = self.ledger.record(row).await {
            tracing::warn!(error = %e, "calibration row not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rubber_stamp_scores_a_coin_whatever_the_mix() {
        let mut stamp = Score::default();
        for correct in [true, true, true, false] {
            stamp.add(correct, true);
        }
        assert_eq!(stamp.value(), Some(0.5));
        let mut judge = Score::default();
        for correct in [true, false, false] {
            judge.add(correct, correct);
        }
        assert_eq!(judge.value(), Some(1.0));
        assert_eq!(Score::default().value(), None);
        // One class only: a stamp scores 1 and nothing is learnt from it.
        let mut lucky = Score::default();
        lucky.add(true, true);
        lucky.add(true, true);
        assert_eq!((lucky.value(), lucky.evidence()), (Some(1.0), None));
        assert_eq!(judge.evidence(), Some(1.0));
    }

    fn item(correct: bool) -> Item {
        Item {
            skill: "qa".into(),
            input: Json::from("q"),
            output: Json::from("a"),
            correct,
        }
    }

    #[test]
    fn draws_hold_both_classes() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut items: Vec<Item> = (0..40).map(|_| item(true)).collect();
        items.push(item(false));
        items.push(item(false));
        for _ in 0..50 {
            let d = draw(&items, 6, &mut rng);
            let wrong = d.iter().filter(|i| !i.correct).count();
            assert_eq!((d.len(), wrong), (6, 2), "both wrong ones, then right ones");
        }
        let even: Vec<Item> = (0..20).map(|k| item(k % 2 == 0)).collect();
        let d = draw(&even, 10, &mut rng);
        assert_eq!(d.iter().filter(|i| !i.correct).count(), 5);
        assert_eq!(draw(&even, 100, &mut rng).len(), 20);
        assert!(draw(&even, 0, &mut rng).is_empty());
    }

    #[test]
    fn a_reference_over_the_cap_keeps_its_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.jsonl");
        let line = "{\"skill\":\"qa\",\"input\":\"é\",\"output\":\"ü\",\"correct\":true}\n";
        let mut text = String::new();
        while (text.len() as u64) <= MAX_REFERENCE_BYTES {
            text.push_str(line);
        }
        // The cap falls inside a line, within its two-byte characters at some offset.
        std::fs::write(&big, &text).unwrap();
        let items = load_reference(&big).unwrap();
        assert_eq!(items.len() as u64, MAX_REFERENCE_BYTES / line.len() as u64);
    }

    #[test]
    fn the_shipped_reference_reads_and_bad_lines_are_named() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/calibration/qa.jsonl");
        let items = load_reference(&shipped).unwrap();
        assert!(items.len() >= 10 && items.iter().any(|i| !i.correct));
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "# comment\n\n{\"skill\":\"qa\"}\n").unwrap();
        let e = load_reference(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl:3: not a calibration item"), "{e}");
        std::fs::write(&bad, "\n").unwrap();
        assert!(load_reference(&bad)
            .unwrap_err()
            .to_string()
            .ends_with("no calibration items"));
    }
}
