//! Verified tasks (a policy's `[verify]`; LADP §5 chain of verification, §9 weighted voting,
//! §13 retry policy): the producer's result is judged by independent verifier delegates
//! before it is answered. Each verifier is sent an LDP task of the verify skill whose input
//! is `{"input": <the task's input>, "output": <the result>, "skill": "<the task's skill>"}`
//! and whose output is `{"passed": bool, "confidence": 0..1, "reason": "…"}`. Votes are
//! weighted by each verifier's learned reliability (a verifier under `min_reliability` is
//! not chosen); the result passes when the weighted yes reaches `threshold` of the total
//! weight (a task's own quorum may raise the threshold, never lower it) and some verifier
//! said yes. A result voted down is routed again, for that task only, to a producer not yet
//! voted down, for at most `max_rounds` rounds; then `VERIFICATION_FAILED`. Every vote is
//! evidence of the producer's quality (`registry::quality`), a round counting as one
//! observation (each vote its share of the round's weight), and goes into the ledger row;
//! with two votes or more, each verifier's agreement with the outcome is evidence of its
//! reliability (against the policy's threshold, never a task's own quorum). A task not
//! sampled runs unverified unless its actual producer is a trial or not yet measured (under
//! [`MEASURE_EVIDENCE`] observations) or evidence excludes every producer (then the
//! best-evidenced one serves on probation, verified).

use super::task::{Answer, TaskCtx, TaskIn, TaskRun};
use super::{Attempts, Routing};
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    provenance::EvidenceRef, Json, LdpError, LineageEntry, Provenance, TaskId, VerificationStatus,
};
use crate::policy::{votes_pass, Verify};
use crate::provenance::Vote;
use crate::registry::Delegate;
use crate::routing::Need;
use crate::session::Binding;
use crate::telemetry::otel::{Attr, Kind, Trace};
use std::sync::Arc;
use tokio::time::Instant;

/// How one verification round ended.
enum Round {
    /// The weighted yes reached the threshold.
    Passed { yes: f64, total: f64 },
    /// It did not.
    Failed { yes: f64, total: f64 },
    /// Nobody voted: why.
    NoVote(LdpError),
}

/// What one round of votes is about.
struct Ballot<'a> {
    verify: &'a Verify,
    round: u32,
    /// The delegate whose result is judged.
    producer: &'a Arc<Delegate>,
    /// Its result.
    output: &'a Json,
    /// The whole task's deadline.
    deadline: Instant,
    /// What the task has cost so far, this result included (USD).
    spent: f64,
}

/// How a passing round went, for the provenance.
#[derive(Clone, Copy)]
struct Tally {
    round: u32,
    yes: f64,
    total: f64,
}

/// One verifier's answer, read.
pub(crate) struct Verdict {
    pub(crate) passed: bool,
    confidence: Option<f64>,
    reason: Option<String>,
}

super::stage!(
    /// Verification: the result judged by independent verifiers, entered only under a
    /// policy's `[verify]`.
    Verification
);

impl Verification<'_> {
    /// The attempts stage, which runs the task (and each verifier's task).
    fn attempts(&self) -> Attempts<'_> {
        Attempts(self.0)
    }

    /// The routing stage, which picks each verifier.
    fn routing(&self) -> Routing<'_> {
        Routing(self.0)
    }

    /// Runs the task under `verify` (the task sampled; else as the policy says), the whole
    /// run (every round, every verifier) within `deadline`. A verified task streams nothing
    /// to its client: a result may yet be voted down.
    pub(crate) async fn run(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        verify: &Verify,
        deadline: Instant,
    ) -> Answer {
        let policy = t.policy.clone();
        // Not sampled (sampling on): the task still runs quiet, since its producer may turn
        // out to be a trial or not yet measured, which is verified whatever `sample` says
        // (measured before it is trusted); decided on the actual pick, after its attempt.
        let not_sampled = !sampled(verify.sample);
        if not_sampled && verify.sample <= 0.0 {
            match self.attempts().run(t, run, &[], deadline).await {
                // Evidence may exclude every producer: the best-evidenced one then serves,
                // verified (routing picks it for a verified task only).
                Answer::Failed(e)
                    if e.code == GatewayCode::NoEligibleDelegate.as_str() && !t.cancelled() => {}
                answer => return answer,
            }
        }
        let measuring = not_sampled && verify.sample > 0.0;
        // The task's own quorum (an LADP `task-init`'s) may raise the policy's threshold,
        // never lower it.
        let own;
        let verify = match t.task.quorum {
            Some(quorum) => {
                own = Verify {
                    threshold: verify.threshold_for(Some(quorum)),
                    ..verify.clone()
                };
                &own
            }
            None => verify,
        };
        // Quiet and verified; a vote-down's re-run is bound for its task only.
        let (first, again) = (t.checked(false), t.checked(true));
        // The voted-down producers, by registry name (excluded from the next rounds) and as
        // the client is told of them.
        let mut voted_down: Vec<String> = Vec::new();
        let mut told: Vec<String> = Vec::new();
        for round in 1..=verify.max_rounds {
            let t = if round == 1 { &first } else { &again };
            // Cancelled (TASK_CANCEL, the client left): no round starts after it.
            if t.cancelled() {
                return Answer::Failed(super::task::cancelled());
            }
            // Each round may try the policy's `max_attempts` producers.
            run.delegates = 0;
            run.attempts_before_round = run.attempts;
            let (output, mut provenance) =
                match self.attempts().run(t, run, &voted_down, deadline).await {
                    Answer::Result { output, provenance } => (output, provenance),
                    // Every other producer is voted down or ineligible.
                    Answer::Failed(e)
                        if !voted_down.is_empty()
                            && e.code == GatewayCode::NoEligibleDelegate.as_str() =>
                    {
                        return Answer::Failed(exhausted(&told, &e.message))
                    }
                    failed => return failed,
                };
            let Some(producer) = run.binding.as_ref().map(|b| b.delegate.clone()) else {
                // Never answered unverified: a result always comes from a binding.
                let why = "a result without its producer cannot be verified";
                return Answer::Failed(LdpError::gateway(GatewayCode::Internal, why));
            };
            // Not sampled: the result is verified only when its producer is a trial or
            // not yet measured.
            let measure = measuring && round == 1 && self.to_measure(t, run, &producer);
            if measuring && round == 1 && !measure {
                return Answer::Result { output, provenance };
            }
            let first_vote = run.votes.len();
            if t.task.keep_rounds {
                run.rounds.push((producer.client_name(), output.clone()));
            }
            let cost = provenance
                .cost_usd
                .or_else(|| self.declared_cost(&producer, t.task.skill))
                .unwrap_or(0.0);
            if t.cancelled() {
                // The result came as the task was cancelled: paid for, never judged.
                self.extra_cost(t, run, &producer, t.task.skill, cost);
                return Answer::Failed(super::task::cancelled());
            }
            let ballot = Ballot {
                verify,
                round,
                producer: &producer,
                output: &output,
                deadline,
                spent: run.extra_cost_usd + cost,
            };
            let outcome = self.vote(t, &ballot, run).await;
            let result = match &outcome {
                Round::Passed { .. } => "passed",
                Round::Failed { .. } => "failed",
                Round::NoVote(_) => "no_verifier",
            };
            self.metrics
                .verifications
                .with_label_values(&[policy.name.0.as_str(), result])
                .inc();
            match outcome {
                Round::Passed { yes, total } => {
                    let votes = (&run.votes[first_vote..], &run.voters[first_vote..]);
                    let tally = Tally { round, yes, total };
                    self.peer_verified(t, &mut provenance, votes, &tally, verify);
                    return Answer::Result { output, provenance };
                }
                Round::Failed { yes, total } => {
                    // The result is not answered, but it was paid for.
                    self.extra_cost(t, run, &producer, t.task.skill, cost);
                    let note = format!(
                        "round {round}: {} voted down (weighted yes {yes:.2} of {total:.2})",
                        producer.client_name()
                    );
                    tracing::info!(delegate = %producer.name, round, yes, total, "result voted down");
                    t.tell(self.id(), None, format_args!("{note}; routing again"));
                    run.notes.push(note);
                    voted_down.push(producer.name.clone());
                    told.push(producer.client_name());
                    self.drop_binding(t, &producer).await;
                }
                // Verified only to measure a producer that is no trial: with nobody to
                // vote, delivered unverified, as a task not sampled is.
                Round::NoVote(e)
                    if measure
                        && run.route.as_ref().is_none_or(|r| r.trial.is_none())
                        && !t.cancelled() =>
                {
                    tracing::debug!(delegate = %producer.name, error = %e.message,
                        "no verifier to measure the producer: answered unverified");
                    return Answer::Result { output, provenance };
                }
                Round::NoVote(e) => {
                    self.extra_cost(t, run, &producer, t.task.skill, cost);
                    return Answer::Failed(e);
                }
            }
        }
        Answer::Failed(exhausted(&told, "the policy's max_rounds is reached"))
    }

    /// One round: the verifiers chosen (by the policy's routing, among delegates offering
    /// the verify skill, never the producer nor, when `independent`, its model family), each
    /// sent the verification task at once, their votes weighed. Every vote is recorded in
    /// `run` and learnt as evidence of the producer's quality.
    async fn vote(&self, t: &TaskCtx<'_>, b: &Ballot<'_>, run: &mut TaskRun) -> Round {
        let name = || format!("verify {}", t.task.skill).into();
        let span = t.trace.child(name, Kind::Internal, || {
            vec![
                Attr::new("ldp.policy", t.policy.name.0.clone()),
                Attr::new("ldp.verify.round", i64::from(b.round)),
                Attr::new("ldp.verify.producer", b.producer.name.clone()),
                Attr::new("ldp.verify.skill", b.verify.skill.clone()),
            ]
        });
        let round = self.vote_in(t, b, run, &span).await;
        let (result, yes, total) = match &round {
            Round::Passed { yes, total } => ("passed", *yes, *total),
            Round::Failed { yes, total } => ("failed", *yes, *total),
            Round::NoVote(_) => ("no_verifier", 0.0, 0.0),
        };
        span.set(|| {
            vec![
                Attr::new("ldp.verify.result", result),
                Attr::new("ldp.verify.yes", yes),
                Attr::new("ldp.verify.total", total),
            ]
        });
        if let Round::NoVote(e) = &round {
            span.fail(&e.code);
        }
        span.end();
        round
    }

    /// [`Proxy::vote`] under its round's `span`.
    async fn vote_in(
        &self,
        t: &TaskCtx<'_>,
        b: &Ballot<'_>,
        run: &mut TaskRun,
        span: &Trace,
    ) -> Round {
        let (verify, producer, deadline) = (b.verify, b.producer, b.deadline);
        let skill = verify.skill.as_str();
        let mut exclude = self.not_independent(verify, producer);
        // The contract's budget, less the results so far and each verifier chosen.
        let contract_budget = t.need().contract_max_cost_usd;
        let mut spent = b.spent;
        // Verifiers are chosen on the shared evidence only: no tenant's own ratings pick who
        // judges (a vote is shared evidence of the producer).
        let base = Need {
            skill,
            rater: None,
            probation: false,
            min_reliability: Some(verify.min_reliability),
            ..t.need()
        };
        // The verification task: the original input and the result, as JSON text.
        let input = match verification_input(t.task.input, b.output, t.task.skill) {
            Ok(i) => i,
            Err(e) => {
                let why = format!("the result cannot be sent for verification: {e}");
                return Round::NoVote(LdpError::gateway(GatewayCode::BadRequest, why));
            }
        };
        let mut ballots: Vec<(Binding, f64, TaskId)> = Vec::new();
        let mut why_none: Option<LdpError> = None;
        for _ in 0..verify.verifiers {
            if t.cancelled() {
                return Round::NoVote(super::task::cancelled());
            }
            let task_id = TaskId::from(format!(
                "{}~verify-{}",
                t.task.task_id,
                crate::ldp::new_id()
            ));
            let need = Need {
                exclude: &exclude,
                contract_max_cost_usd: contract_budget.map(|m| (m - spent).max(0.0)),
                ..base
            };
            let picked = match self.routing().decide(&t.policy, &need) {
                Ok(p) => p,
                Err(e) => {
                    why_none.get_or_insert(e);
                    break;
                }
            };
            let picked_name = picked.delegate.name.clone();
            let sub = sub_task(t, &task_id, skill, &input, span.clone());
            let mut sub_run = TaskRun::default();
            // Binding may open an upstream session: within the task's deadline too.
            let bound = tokio::time::timeout_at(
                deadline,
                self.bind_verifier(&sub, &need, &mut sub_run, picked),
            )
            .await
            .unwrap_or_else(|_| {
                let why = "the task's deadline passed while verifiers were chosen";
                Err(LdpError::gateway(GatewayCode::UpstreamFailed, why))
            });
            exclude.push(picked_name);
            match bound {
                // The claim may have swapped in another delegate (the one picked was at its
                // rate limit): never two ballots for one verifier.
                Ok(binding)
                    if ballots
                        .iter()
                        .any(|(b, _, _)| Arc::ptr_eq(&b.delegate, &binding.delegate)) => {}
                Ok(binding) => {
                    exclude.push(binding.delegate.name.clone());
                    spent += self.declared_cost(&binding.delegate, skill).unwrap_or(0.0);
                    let weight = self.vote_weight(&binding.delegate, skill);
                    ballots.push((binding, weight, task_id));
                }
                Err(e) => {
                    why_none = Some(e);
                }
            }
        }
        if ballots.is_empty() {
            let error = match why_none {
                // Verifiers exist but none could be bound: their failure, as it is.
                Some(e) if e.code != GatewayCode::NoEligibleDelegate.as_str() => e,
                other => LdpError::gateway(
                    GatewayCode::NoEligibleDelegate,
                    format!(
                        "no independent verifier (skill '{skill}') could be had: {}",
                        other.map(|e| e.message).unwrap_or_default()
                    ),
                ),
            };
            return Round::NoVote(error);
        }
        if t.cancelled() {
            return Round::NoVote(super::task::cancelled());
        }
        // Each cast is an attempt: listed in the task (a cancel sends it TASK_CANCEL) and
        // dropped at the cancel.
        // Each vote a span under the round's, its verifier's attempt under it.
        let spans: Vec<Trace> = ballots
            .iter()
            .map(|(binding, weight, _)| {
                let name = || format!("vote {}", binding.delegate.name).into();
                span.child(name, Kind::Internal, || {
                    vec![
                        Attr::new("ldp.verifier", binding.delegate.name.clone()),
                        Attr::new("ldp.vote.weight", *weight),
                    ]
                })
            })
            .collect();
        let casts = ballots
            .iter()
            .zip(&spans)
            .map(|((binding, _, task_id), vote)| {
                let sub = sub_task(t, task_id, skill, &input, vote.clone());
                let binding = binding.clone();
                async move {
                    let mut sub_run = TaskRun::default();
                    match self
                        .attempts()
                        .attempt(&sub, &mut sub_run, binding, deadline)
                        .await
                    {
                        super::attempts::Attempt::Done(a) => a,
                        super::attempts::Attempt::Failed(f) => Answer::Failed(f.error),
                    }
                }
            });
        let asked = Instant::now();
        let answers = futures_util::future::join_all(casts).await;
        // The verifiers ran side by side: the round's upstream time is the wall time.
        run.upstream += asked.elapsed();
        let (mut yes, mut total) = (0.0, 0.0);
        let first_vote = run.votes.len();
        for (((binding, weight, _), answer), vote) in ballots.iter().zip(answers).zip(&spans) {
            let verifier = &binding.delegate;
            let verdict = match answer {
                Answer::Result { output, provenance } => {
                    let cost = provenance
                        .cost_usd
                        .or_else(|| self.declared_cost(verifier, skill))
                        .unwrap_or(0.0);
                    self.extra_cost(t, run, verifier, skill, cost);
                    read_verdict(&output)
                }
                Answer::Failed(e) => {
                    run.notes.push(format!(
                        "verifier {} failed: {}",
                        verifier.client_name(),
                        e.code
                    ));
                    None
                }
            };
            let Some(v) = verdict else {
                vote.fail("no_vote");
                vote.end();
                continue;
            };
            vote.set(|| {
                let mut a = vec![Attr::new("ldp.vote.passed", v.passed)];
                if let Some(c) = v.confidence {
                    a.push(Attr::new("ldp.vote.confidence", c));
                }
                a
            });
            vote.end();
            total += weight;
            if v.passed {
                yes += weight;
            }
            run.votes.push(Vote {
                round: b.round,
                producer: producer.name.clone(),
                skill: t.task.skill.to_owned(),
                verifier: verifier.name.clone(),
                passed: v.passed,
                confidence: v.confidence,
                weight: *weight,
            });
            if let Some(reason) = &v.reason {
                tracing::debug!(verifier = %verifier.name, passed = v.passed, reason, "vote");
            }
            let reason = v.reason.map(|r| super::task::cut_detail(&r).0.to_owned());
            run.reasons.push(reason);
            run.voters.push(verifier.client_name());
        }
        // The round is one observation of the producer: each vote counts for its share of
        // the round's weight (two verifiers agreeing are not two independent facts).
        let now = crate::registry::quality::now_ms();
        for v in &run.votes[first_vote..] {
            let score = if v.passed { 1.0 } else { 0.0 };
            self.registry
                .observe(&producer.name, t.task.skill, score, v.weight / total, now);
        }
        if t.cancelled() {
            // The votes that came are kept and learnt; the round decides nothing.
            return Round::NoVote(super::task::cancelled());
        }
        if total <= 0.0 {
            let error = LdpError::gateway(
                GatewayCode::UpstreamFailed,
                format!("no verifier (skill '{skill}') gave a usable vote"),
            );
            return Round::NoVote(error);
        }
        // A round without a yes never passes, whatever the threshold.
        let passed = votes_pass(yes, total, verify.threshold);
        // Reliability is shared evidence: learnt against the policy's own threshold, never
        // a task's own quorum (a tenant's quorum must not move it).
        let threshold = t
            .policy
            .verify
            .as_ref()
            .map_or(verify.threshold, |v| v.threshold);
        let agreed_on = votes_pass(yes, total, threshold);
        self.learn_agreement(&run.votes[first_vote..], skill, agreed_on, now);
        if passed {
            Round::Passed { yes, total }
        } else {
            Round::Failed { yes, total }
        }
    }

    /// With two votes or more, each verifier's agreement with the round's outcome is
    /// evidence of its judgement ([`AGREEMENT_WEIGHT`] each: the outcome may be wrong).
    fn learn_agreement(&self, votes: &[Vote], verify_skill: &str, passed: bool, now: i64) {
        if votes.len() < 2 {
            return;
        }
        for v in votes {
            let agreed = if v.passed == passed { 1.0 } else { 0.0 };
            self.registry.observe_judgement(
                &v.verifier,
                verify_skill,
                agreed,
                AGREEMENT_WEIGHT,
                now,
            );
        }
    }

    /// Whether a result not sampled is verified all the same: its producer was picked as a
    /// trial (`[routing] explore`, probation) or has under [`MEASURE_EVIDENCE`] observations
    /// (measured before it is trusted).
    fn to_measure(&self, t: &TaskCtx<'_>, run: &TaskRun, producer: &Delegate) -> bool {
        run.route.as_ref().is_some_and(|r| r.trial.is_some())
            || self
                .registry
                .quality_of(&producer.name, t.task.skill)
                .and_then(|q| q.observed)
                .is_none_or(|o| o.count < MEASURE_EVIDENCE)
    }

    /// Drops the session's binding to a voted-down producer: the session's next task is
    /// decided afresh (affinity must not keep it, nor the producer a re-run moved to). A
    /// stateless task's binding is the tenant's shared upstream session with that delegate:
    /// kept. A session's is unbound but not closed: its other tasks in flight may use it
    /// (the upstream session ends at its TTL).
    async fn drop_binding(&self, t: &TaskCtx<'_>, producer: &Arc<Delegate>) {
        use crate::state::SessionStore as _;
        if t.stateless() {
            return;
        }
        let key = t.binding_key(&producer.name);
        if t.binds.unbind_delegate(&key, producer).is_some() {
            self.sessions.unshare_binding(t.binds, &key).await;
        }
    }

    /// The delegates that may not judge `producer`'s result: itself, and when `independent`
    /// every delegate of its model family.
    fn not_independent(&self, verify: &Verify, producer: &Delegate) -> Vec<String> {
        let mut out = vec![producer.name.clone()];
        if !verify.independent {
            return out;
        }
        // A card that names no family shares it with nobody.
        let Some(family) = producer
            .card()
            .map(|c| c.model_family.clone())
            .filter(|f| !f.is_empty())
        else {
            return out;
        };
        let index = self.registry.index();
        for o in index.offers(&verify.skill) {
            if o.card.model_family.eq_ignore_ascii_case(&family) && o.delegate.name != producer.name
            {
                out.push(o.delegate.name.clone());
            }
        }
        out
    }

    /// A vote's weight: the verifier's reliability, its quality at the verify skill as
    /// routing sees it (the card's claim as a prior by claim type, and what calibration,
    /// agreement and trusted ratings taught), else the routing's score for an unknown value.
    fn vote_weight(&self, verifier: &Delegate, skill: &str) -> f64 {
        self.registry
            .quality_of(&verifier.name, skill)
            .and_then(|q| q.blended)
            .unwrap_or(self.cfg.routing.missing_score)
            .max(0.01)
    }

    /// Binds a chosen verifier (its own rate limit, an upstream session kept per (skill,
    /// delegate) in the client's session).
    async fn bind_verifier(
        &self,
        sub: &TaskCtx<'_>,
        need: &Need<'_>,
        run: &mut TaskRun,
        picked: super::routing::Chosen,
    ) -> Result<Binding, LdpError> {
        match self.routing().rebind(sub, need, run, picked).await {
            Ok(b) => Ok(b),
            Err(super::routing::NoBinding::None(e)) => Err(e),
            Err(super::routing::NoBinding::Open { delegate, error }) => {
                self.attempts()
                    .judge(&delegate, crate::upstream::Health::of_error(&error, None));
                Err(crate::upstream::Failure::upstream(&delegate.client_name(), &error).error)
            }
        }
    }

    /// Counts `cost` (a verifier's, or a voted-down result's) under its delegate in the
    /// metrics and into the task's total.
    fn extra_cost(&self, t: &TaskCtx<'_>, run: &mut TaskRun, d: &Delegate, skill: &str, cost: f64) {
        if !(cost.is_finite() && cost > 0.0) {
            return;
        }
        run.extra_cost_usd += cost;
        self.metrics
            .cost_usd
            .with_label_values(&[
                t.tenant.name.as_str(),
                skill,
                d.name.as_str(),
                t.policy.name.0.as_str(),
            ])
            .inc_by(cost);
        self.metrics.spend_total.inc_by(cost);
    }

    /// Marks a result that passed: `peer_verified`, the passing round's votes (and their
    /// verifiers as the client is told of them) as evidence, and a lineage entry for the
    /// verification step (newest first).
    fn peer_verified(
        &self,
        t: &TaskCtx<'_>,
        p: &mut Provenance,
        (votes, voters): (&[Vote], &[String]),
        tally: &Tally,
        verify: &Verify,
    ) {
        let Tally { round, yes, total } = *tally;
        p.verification_status = VerificationStatus::PeerVerified;
        p.normalize();
        for (v, voter) in votes.iter().zip(voters) {
            let source = self
                .registry
                .get(&v.verifier)
                .and_then(|d| d.card())
                .map_or_else(|| voter.clone(), |c| c.delegate_id.clone());
            p.evidence.push(EvidenceRef {
                source,
                kind: "peer_vote".into(),
                uri: None,
                summary: Some(format!("{} judged by {voter}", v.skill)),
                decision: Some(if v.passed { "passed" } else { "failed" }.into()),
                weight: Some(v.weight),
                confidence: v.confidence,
            });
        }
        let verifiers: Vec<&str> = voters.iter().map(String::as_str).collect();
        p.lineage.insert(
            0,
            LineageEntry {
                delegate_id: self.id().to_owned(),
                model_version: self.version.clone(),
                step: "verify".into(),
                timestamp: Some(crate::ldp::now_rfc3339()),
                verification_status: VerificationStatus::PeerVerified,
                policy: Some(t.policy.name.0.clone()),
                routed_to: Some(verifiers.join(", ")),
                attempts: Some(round),
                note: Some(format!(
                    "weighted yes {yes:.2} of {total:.2} (threshold {}) in round {round}",
                    verify.threshold
                )),
            },
        );
    }
}

/// Observations of a producer's quality under which its results are verified whatever
/// `sample` says.
const MEASURE_EVIDENCE: f64 = 5.0;

/// How much one verifier's agreement with a round's outcome counts (a calibration item
/// counts 1): half, since the outcome it is compared with may itself be wrong.
const AGREEMENT_WEIGHT: f64 = 0.5;

/// Whether this task is verified: `sample` of them are (all at 1, none at 0).
fn sampled(sample: f64) -> bool {
    sample >= 1.0 || (sample > 0.0 && fastrand::f64() < sample)
}

/// `VERIFICATION_FAILED`, naming the rounds' producers.
fn exhausted(voted_down: &[String], why: &str) -> LdpError {
    LdpError::gateway(
        GatewayCode::VerificationFailed,
        format!(
            "the result was voted down in {} round(s) (producers: {}); {why}",
            voted_down.len(),
            voted_down.join(", ")
        ),
    )
}

/// The task a verifier is sent, in the client's session, envelope and policy.
fn sub_task<'a>(
    t: &TaskCtx<'a>,
    task_id: &'a TaskId,
    skill: &'a str,
    input: &'a Json,
    trace: Trace,
) -> TaskCtx<'a> {
    TaskCtx {
        env: t.env,
        task: TaskIn {
            task_id,
            ingress: t.task.ingress,
            retried_if_session_lost: false,
            skill,
            input,
            contract: None,
            chat: None,
            verifying: true,
            quorum: None,
            keep_rounds: false,
            ledger_input: None,
            checked: false,
            rerouted: false,
            lender: t.task.lender,
        },
        session: t.session,
        binds: t.binds,
        tenant: t.tenant,
        policy: t.policy.clone(),
        hops: t.hops,
        progress: super::task::Progress::Quiet,
        started: Instant::now(),
        started_at: t.started_at.clone(),
        running: t.running,
        trace,
    }
}

/// `{"input": …, "output": …, "skill": …}` from the texts as they came (no re-serialising).
pub(crate) fn verification_input(
    input: &Json,
    output: &Json,
    skill: &str,
) -> Result<Json, serde_json::Error> {
    let skill = serde_json::to_string(skill)?;
    Json::from_text(format!(
        "{{\"input\":{},\"output\":{},\"skill\":{skill}}}",
        input.get(),
        output.get()
    ))
}

/// A verifier's output read as a vote: `passed` (a boolean) is required; `confidence` (0..1)
/// and `reason` (text) are kept when present and readable, else left out: a confidence of
/// `"high"`, `7` or `1e999` (beyond f64) costs the vote its confidence, never the vote. The
/// verdict may also come as text holding that JSON
/// (a model's answer, as an OpenAI-backed or text-mode verifier gives it; a Markdown code
/// fence around it is allowed). Anything else is no vote.
pub(crate) fn read_verdict(output: &Json) -> Option<Verdict> {
    if let Some(text) = output.as_string() {
        let body = text
            .trim()
            .trim_start_matches("```json")
            .trim_start_matches("```")
            .trim_end_matches("```")
            .trim();
        return read_verdict(
            &Json::from_text(body.to_owned())
                .ok()
                .filter(|j| j.as_string().is_none())?,
        );
    }
    // The optional fields are taken as raw JSON and read one by one: a field of the wrong
    // type (or a number serde cannot hold) would otherwise fail the whole verdict.
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        passed: bool,
        #[serde(default, borrow)]
        confidence: Option<&'a serde_json::value::RawValue>,
        #[serde(default, borrow)]
        reason: Option<&'a serde_json::value::RawValue>,
    }
    let raw: Raw<'_> = serde_json::from_str(output.get()).ok()?;
    Some(Verdict {
        passed: raw.passed,
        confidence: raw
            .confidence
            .and_then(|c| serde_json::from_str::<f64>(c.get()).ok())
            .filter(|c| (0.0..=1.0).contains(c)),
        reason: raw
            .reason
            .and_then(|r| serde_json::from_str::<String>(r.get()).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Json {
        Json::from_text(text.to_owned()).unwrap()
    }

    #[test]
    fn verdicts_are_read_or_ignored() {
        let v = read_verdict(&json(r#"{"passed":true,"confidence":0.8,"reason":"ok"}"#)).unwrap();
        assert!(v.passed && v.confidence == Some(0.8));
        let v = read_verdict(&json(r#"{"passed":false,"confidence":7}"#)).unwrap();
        assert!(!v.passed && v.confidence.is_none());
        // A confidence (or reason) that does not read drops itself, never the vote.
        for c in [r#""high""#, "1e999", "-0.5", "null", "[1]", r#"{"p":1}"#] {
            let text = format!(r#"{{"passed":true,"confidence":{c},"reason":7}}"#);
            let v = read_verdict(&json(&text)).unwrap_or_else(|| panic!("{c}: no vote"));
            assert!(
                v.passed && v.confidence.is_none() && v.reason.is_none(),
                "{c}"
            );
        }
        assert!(read_verdict(&json(r#"{"passed":"yes"}"#)).is_none());
        assert!(read_verdict(&json(r#""passed""#)).is_none());
        // A model's answer: the verdict as text, fenced or not.
        let text = Json::from("```json\n{\"passed\": true, \"confidence\": 0.7}\n```");
        assert!(read_verdict(&text).is_some_and(|v| v.passed && v.confidence == Some(0.7)));
        assert!(read_verdict(&Json::from("{\"passed\": false}")).is_some_and(|v| !v.passed));
        assert!(read_verdict(&Json::from("looks right to me")).is_none());
    }

    #[test]
    fn the_verification_input_keeps_both_texts() {
        let i = verification_input(&json(r#"{"expected": 4}"#), &json(r#"{"answer":4}"#), "qa")
            .unwrap();
        let v = i.to_value().unwrap();
        assert_eq!(v["input"]["expected"], 4);
        assert_eq!(v["output"]["answer"], 4);
        assert_eq!(v["skill"], "qa");
        assert!(sampled(1.0) && !sampled(0.0));
    }
}
