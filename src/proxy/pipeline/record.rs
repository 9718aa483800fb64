//! The pipeline's last stage: a finished task's ledger row and metrics, then its answer (a
//! result only once its provenance is committed), kept for status queries.

use super::task::{Answer, TaskCtx, TaskRun};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError};
use crate::provenance::{digest, redact_preview, JsonText, LedgerRow, Outcome};
use crate::routing::Exclusions;
use crate::state::StatusStore;
use std::sync::Arc;
use std::time::Duration;

super::stage!(
    /// Record: the ledger row, the metrics, the answer.
    Record
);

impl Record<'_> {
    /// Records the task's ledger row and metrics, then answers (a result only once its
    /// provenance is committed), keeping the answer for status queries.
    pub(crate) async fn finish(
        &self,
        t: TaskCtx<'_>,
        run: &TaskRun,
        answer: Answer,
    ) -> Arc<Envelope> {
        let row = self.ledger_row(&t, run, &answer);
        self.count(&row, t.started.elapsed(), run.upstream, run.extra_cost_usd);
        let recorded = self.ledger.record(row).await;
        let reply = Arc::new(self.answer(&t, answer, recorded));
        let (tenant, from) = (&t.tenant.name, &t.env.from);
        self.statuses
            .done(tenant, from, t.task.task_id, Arc::clone(&reply))
            .await;
        reply
    }

    /// The envelope that answers the task.
    fn answer(
        &self,
        t: &TaskCtx<'_>,
        answer: Answer,
        recorded: Result<(), crate::provenance::LedgerError>,
    ) -> Envelope {
        let (env, task_id) = (t.env, t.task.task_id);
        match (answer, recorded) {
            (Answer::Result { output, provenance }, Ok(())) => env.reply(
                self.id(),
                Body::TaskResult {
                    task_id: task_id.clone(),
                    output,
                    provenance: Some(provenance),
                },
                env.payload_mode,
            ),
            (Answer::Result { .. }, Err(e)) => {
                if once_a_second() {
                    tracing::error!(error = %e, "provenance not recorded; result withheld");
                }
                let error = LdpError::gateway(GatewayCode::Internal, e.client_message());
                self.task_failed(env, task_id, error)
            }
            (Answer::Failed(error), recorded) => {
                if let Err(e) = recorded {
                    if once_a_second() {
                        tracing::error!(error = %e, "provenance of a failure not recorded");
                    }
                }
                self.task_failed(env, task_id, error)
            }
        }
    }

    /// The ledger row for a finished task.
    pub(crate) fn ledger_row(&self, t: &TaskCtx<'_>, run: &TaskRun, answer: &Answer) -> LedgerRow {
        let (session, policy, task) = (t.session, &t.policy, &t.task);
        let now = chrono::Utc::now();
        let delegate = run.binding.as_ref().map(|b| &b.delegate);
        let card = delegate.and_then(|d| d.card());
        // A token-priced delegate's cost is usage × its declared prices: nothing to compare.
        let per_call = delegate.is_some_and(|d| d.upstream.priced_per_call());
        let declared = card.as_ref().filter(|_| per_call).and_then(|c| {
            let h = c.effective_hints(task.skill)?;
            h.cost_per_call_usd
                .or_else(|| h.cost_tier.map(|t| self.cfg.routing.tier_prices.of(t)))
        });
        let (outcome, error, provenance, output) = match answer {
            Answer::Result { output, provenance } => {
                (Outcome::Result, None, Some(provenance), Some(output))
            }
            Answer::Failed(e) => (Outcome::Failed, Some(e), None, None),
        };
        let reported = provenance.and_then(|p| p.cost_usd);
        let routing = JsonText::of(&RoutingSummary {
            policy: &policy.name.0,
            reused_binding: run.route.is_none() && run.binding.is_some(),
            band: run.route.as_ref().map(|r| r.band),
            excluded: run.route.as_ref().map(|r| Excluded(&r.excluded)),
            trial: run.route.as_ref().and_then(|r| r.trial),
            notes: &run.notes,
            upstream_errors: &run.upstream_errors,
        });
        let payload = self.cfg.provenance.store_payloads.then(|| {
            JsonText::of(&serde_json::json!({
                "input": preview(task.ledger_input.unwrap_or(task.input)),
                "output": output.map(preview),
            }))
        });
        LedgerRow {
            task_id: task.task_id.to_string(),
            ingress: task.ingress,
            session_id: session.id.to_string(),
            upstream_session_id: run
                .binding
                .as_ref()
                .map(|b| b.upstream.session_id.to_string()),
            tenant: session.tenant.clone(),
            skill: task.skill.to_owned(),
            policy: Some(policy.name.0.clone()),
            delegate: delegate.map(|d| d.name.clone()),
            delegate_id: card.as_ref().map(|c| c.delegate_id.clone()),
            model_version: provenance
                .map(|p| p.model_version.clone())
                .or_else(|| card.as_ref().map(|c| c.model_version.clone())),
            outcome,
            error_code: error.map(|e| e.code.clone()),
            error_message: error.map(|e| e.message.clone()),
            score: run.route.as_ref().map(|r| r.score),
            candidates: run.route.as_ref().map(|r| r.eligible as u32),
            attempts: run.attempts,
            fallbacks: run.fallbacks.iter().map(|s| (*s).to_owned()).collect(),
            payload_mode: run.mode.map(|m| m.as_str().to_owned()),
            latency_ms: t.started.elapsed().as_secs_f64() * 1000.0,
            upstream_ms: run.upstream.as_secs_f64() * 1000.0,
            cost_usd: total_cost(
                match outcome {
                    Outcome::Result => reported.or(declared),
                    // An answer cut short was charged what it used.
                    Outcome::Failed => run.unfinished.map(|u| u.cost_usd),
                },
                run.extra_cost_usd,
            ),
            reported_cost_usd: reported,
            declared_cost_usd: declared,
            tokens: provenance
                .and_then(|p| p.tokens_used)
                .or(run.unfinished.map(|u| u.tokens)),
            confidence: provenance.and_then(|p| p.confidence),
            verification_status: provenance.map(|p| p.verification_status.as_str().to_owned()),
            started_at: t.started_at.clone(),
            finished_at: now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            finished_ms: now.timestamp_millis(),
            output_sha256: output.map(digest),
            lineage: provenance
                .map(|p| JsonText::of(&p.lineage))
                .unwrap_or_default(),
            routing,
            payload,
            votes: run.votes.clone(),
            trace_id: t.trace.trace_id(),
            usage: run.usage.map(|u| crate::provenance::TokenCounts {
                input: u.input_tokens,
                output: u.output_tokens,
                cache_read: u.cache_read_tokens,
                cache_write: u.cache_write_tokens,
            }),
        }
    }

    /// Exports one outcome to the metrics. Every label comes from a bounded set: tenants
    /// and policies from config, delegates from the registry, and the skill only if a
    /// delegate offers it (client text otherwise: `unknown`).
    /// `extra_cost` is the part of the row's cost already counted under other delegates
    /// (verifiers, voted-down results).
    pub(crate) fn count(
        &self,
        row: &LedgerRow,
        total: Duration,
        upstream: Duration,
        extra_cost: f64,
    ) {
        let m = &self.metrics;
        let delegate = row.delegate.as_deref().unwrap_or("none");
        // A routed task's skill was on its delegate's card; only unrouted ones need a look.
        let known = row.delegate.is_some() || !self.registry.index().offers(&row.skill).is_empty();
        let skill = if known { row.skill.as_str() } else { "unknown" };
        m.tasks
            .with_label_values(&[
                row.tenant.as_str(),
                skill,
                delegate,
                row.outcome.as_str(),
                row.ingress.as_str(),
            ])
            .inc();
        m.task_duration
            .with_label_values(&[skill, delegate])
            .observe(total.as_secs_f64());
        m.overhead
            .observe(total.saturating_sub(upstream).as_secs_f64());
        for reason in &row.fallbacks {
            m.fallbacks.with_label_values(&[reason.as_str()]).inc();
        }
        if let Some(cost) = row.cost_usd.map(|c| c - extra_cost) {
            let policy = row.policy.as_deref().unwrap_or("none");
            m.cost_usd
                .with_label_values(&[row.tenant.as_str(), skill, delegate, policy])
                .inc_by(cost.max(0.0));
            m.spend_total.inc_by(cost.max(0.0));
        }
        if let Some(t) = row.tokens {
            let c = m.tokens.with_label_values(&[row.tenant.as_str(), delegate]);
            // Saturating: a delegate's absurd count must not wrap the counter to nothing.
            c.inc_by(t.min(u64::MAX - c.get()));
        }
        if let (Some(r), Some(d)) = (row.reported_cost_usd, row.declared_cost_usd) {
            let ratio = self.cfg.provenance.cost_discrepancy_ratio;
            let (lo, hi) = if r < d { (r, d) } else { (d, r) };
            if hi > lo * ratio && hi - lo > 1e-9 {
                m.cost_discrepancies.with_label_values(&[delegate]).inc();
            }
        }
    }
}

/// The task's cost: its answer's, plus what verification and voted-down results cost.
fn total_cost(answer: Option<f64>, extra: f64) -> Option<f64> {
    match answer {
        _ if extra <= 0.0 => answer,
        Some(c) => Some(c + extra),
        None => Some(extra),
    }
}

/// The ledger's `routing` column, serialised straight from the run (no `Value` tree).
#[derive(serde::Serialize)]
struct RoutingSummary<'a> {
    policy: &'a str,
    reused_binding: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    band: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    excluded: Option<Excluded<'a>>,
    /// The pick was a trial (`[routing] explore`): `exploring` or `probation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    trial: Option<crate::routing::Trial>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    notes: &'a [String],
    /// What each failed attempt's delegate did, whole (its address, its own message): the
    /// operator's record of what the client was told only generically.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    upstream_errors: &'a [String],
}

/// Constraints that excluded candidates, as `{constraint: count}`.
struct Excluded<'a>(&'a Exclusions);

impl serde::Serialize for Excluded<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(c, n)| (c.as_str(), n)))
    }
}

/// The redacted preview of a payload; text that is not a JSON value is not shown.
fn preview(j: &crate::ldp::Json) -> serde_json::Value {
    j.to_value().map_or_else(
        |_| serde_json::Value::String("[not readable as a JSON value]".into()),
        |v| redact_preview(&v),
    )
}

/// Whether a per-task ledger failure should be logged now: at most one line a second, since
/// a failing store (a full disk) fails every task and the writer has logged the cause.
fn once_a_second() -> bool {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = chrono::Utc::now().timestamp();
    LAST.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}
