//! What the gateway observes of one delegate: tasks in flight, a peak-sensitive latency EWMA
//! that decays with time, errors over a rolling window, the last success, and outlier
//! ejection (growing backoff, then a probe, then a short slow start).

use crate::routing::Latency;
use serde::Serialize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub use crate::config::OutlierConfig;

const BUCKETS: usize = 10;

/// Where a delegate stands.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Serving normally.
    Active,
    /// Cut out until the time given.
    Ejected,
    /// Back for one trial task.
    Probing,
    /// Back, with a share ramping up.
    SlowStart,
}

#[derive(Debug)]
struct State {
    ewma_ms: Option<f64>,
    /// `ewma_ms` with its badness on routing's scale (its logarithm taken here, once per
    /// sample, not per decision).
    ewma: Option<Latency>,
    last_sample: Option<Instant>,
    samples: u64,
    /// `(ok, err)` per bucket of `window / BUCKETS`, ring indexed by bucket number.
    buckets: [(u32, u32, u64); BUCKETS],
    consecutive: u32,
    last_success: Option<chrono::DateTime<chrono::Utc>>,
    phase: Phase,
    until: Option<Instant>,
    since: Option<Instant>,
    ejections: u32,
    epoch: Instant,
}

/// Observed behaviour of one delegate. Cheap: one short mutex per task, never across await.
#[derive(Debug)]
pub struct Observed {
    in_flight: AtomicU32,
    state: Mutex<State>,
}

/// How routing may use the delegate right now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Availability {
    /// Cut out (subject to the panic threshold).
    pub ejected: bool,
    /// Back for a single trial task: at most one in flight.
    pub probing: bool,
    /// Share multiplier (slow start ramps it from 0.1 to 1).
    pub weight_factor: f64,
}

/// A read-only view for the admin API and metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Tasks in flight.
    pub in_flight: u32,
    /// Latency EWMA, ms.
    pub latency_ewma_ms: Option<f64>,
    /// Latency samples taken.
    pub samples: u64,
    /// Errors ÷ requests over the rolling window (none without requests).
    pub error_rate: Option<f64>,
    /// Requests in the rolling window.
    pub window_requests: u32,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Last success, RFC 3339.
    pub last_success: Option<String>,
    /// Phase.
    pub phase: Phase,
    /// Milliseconds left in the ejection.
    pub ejected_for_ms: Option<u64>,
    /// How many times it was ejected in this streak.
    pub ejections: u32,
}

/// Decrements the in-flight count when the task ends, however it ends.
#[derive(Debug)]
pub struct InFlight<'a>(&'a AtomicU32);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Default for Observed {
    fn default() -> Self {
        Observed {
            in_flight: AtomicU32::new(0),
            state: Mutex::new(State {
                ewma_ms: None,
                ewma: None,
                last_sample: None,
                samples: 0,
                buckets: [(0, 0, 0); BUCKETS],
                consecutive: 0,
                last_success: None,
                phase: Phase::Active,
                until: None,
                since: None,
                ejections: 0,
                epoch: Instant::now(),
            }),
        }
    }
}

impl State {
    fn bucket(&mut self, now: Instant, cfg: &OutlierConfig) -> &mut (u32, u32, u64) {
        let width = (cfg.window.as_millis() as u64 / BUCKETS as u64).max(1);
        let n = now.saturating_duration_since(self.epoch).as_millis() as u64 / width;
        let slot = &mut self.buckets[(n % BUCKETS as u64) as usize];
        if slot.2 != n {
            *slot = (0, 0, n);
        }
        slot
    }

    fn window(&self, now: Instant, cfg: &OutlierConfig) -> (u32, u32) {
        let width = (cfg.window.as_millis() as u64 / BUCKETS as u64).max(1);
        let n = now.saturating_duration_since(self.epoch).as_millis() as u64 / width;
        self.buckets
            .iter()
            .filter(|b| n.saturating_sub(b.2) < BUCKETS as u64 && b.2 <= n)
            .fold((0, 0), |(ok, err), b| (ok + b.0, err + b.1))
    }

    fn eject(&mut self, now: Instant, cfg: &OutlierConfig) {
        let factor = 1u32 << self.ejections.min(16);
        let period = cfg
            .base_ejection
            .saturating_mul(factor)
            .min(cfg.max_ejection);
        self.ejections = self.ejections.saturating_add(1);
        self.phase = Phase::Ejected;
        self.until = Some(now + period);
        self.since = None;
    }

    /// Moves time-driven phases forward.
    fn advance(&mut self, now: Instant, cfg: &OutlierConfig) {
        match self.phase {
            Phase::Ejected if self.until.is_some_and(|u| now >= u) => {
                self.phase = Phase::Probing;
                self.until = None;
            }
            Phase::SlowStart
                if self
                    .since
                    .is_some_and(|s| now.saturating_duration_since(s) >= cfg.slow_start) =>
            {
                self.phase = Phase::Active;
                self.since = None;
                self.ejections = 0;
            }
            _ => {}
        }
    }
}

impl Observed {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere mid-update of plain numbers.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a task as in flight until the guard drops.
    pub fn start(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(&self.in_flight)
    }

    /// Tasks in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Folds a latency sample into the EWMA: a slower sample is taken at once (peak), a faster
    /// one is blended in with a weight that grows with the time since the last sample.
    pub fn record_latency(&self, took: Duration, now: Instant, cfg: &OutlierConfig) {
        let ms = took.as_secs_f64() * 1000.0;
        let mut s = self.lock();
        s.ewma_ms = Some(match (s.ewma_ms, s.last_sample) {
            (Some(prev), Some(last)) if ms < prev => {
                let dt = now.saturating_duration_since(last).as_secs_f64();
                let tau = cfg.latency_decay.as_secs_f64().max(1e-3);
                let w = (-dt / tau).exp();
                prev * w + ms * (1.0 - w)
            }
            _ => ms,
        });
        s.ewma = s.ewma_ms.map(Latency::new);
        s.last_sample = Some(now);
        s.samples += 1;
    }

    /// A successful task.
    pub fn record_success(&self, now: Instant, cfg: &OutlierConfig) {
        let mut s = self.lock();
        s.bucket(now, cfg).0 += 1;
        s.consecutive = 0;
        s.last_success = Some(chrono::Utc::now());
        s.advance(now, cfg);
        if s.phase == Phase::Probing {
            s.phase = Phase::SlowStart;
            s.since = Some(now);
            s.buckets = [(0, 0, 0); BUCKETS];
        }
    }

    /// A failed task; returns true if this failure ejected the delegate.
    pub fn record_failure(&self, now: Instant, cfg: &OutlierConfig) -> bool {
        let mut s = self.lock();
        s.bucket(now, cfg).1 += 1;
        s.consecutive = s.consecutive.saturating_add(1);
        s.advance(now, cfg);
        match s.phase {
            Phase::Ejected => false,
            Phase::Probing => {
                s.eject(now, cfg);
                true
            }
            Phase::Active | Phase::SlowStart => {
                let (ok, err) = s.window(now, cfg);
                let total = ok + err;
                let rate_trips = total >= cfg.min_requests
                    && f64::from(err) >= cfg.error_rate * f64::from(total);
                if s.consecutive >= cfg.consecutive_failures || rate_trips {
                    s.eject(now, cfg);
                    true
                } else {
                    false
                }
            }
        }
    }

    /// How routing may use it at `now`.
    pub fn availability(&self, now: Instant, cfg: &OutlierConfig) -> Availability {
        let mut s = self.lock();
        s.advance(now, cfg);
        match s.phase {
            Phase::Active => Availability {
                ejected: false,
                probing: false,
                weight_factor: 1.0,
            },
            Phase::Ejected => Availability {
                ejected: true,
                probing: false,
                weight_factor: 1.0,
            },
            Phase::Probing => Availability {
                ejected: false,
                probing: true,
                weight_factor: 1.0,
            },
            Phase::SlowStart => {
                let ramp = s
                    .since
                    .map(|t| {
                        now.saturating_duration_since(t).as_secs_f64()
                            / cfg.slow_start.as_secs_f64().max(1e-3)
                    })
                    .unwrap_or(1.0);
                Availability {
                    ejected: false,
                    probing: false,
                    weight_factor: (0.1 + 0.9 * ramp).clamp(0.1, 1.0),
                }
            }
        }
    }

    /// The latency EWMA, ms, once measured.
    pub fn latency_ms(&self) -> Option<f64> {
        self.lock().ewma_ms
    }

    /// The latency EWMA with its badness for routing, once measured.
    pub fn latency(&self) -> Option<Latency> {
        self.lock().ewma
    }

    /// Latency samples taken.
    pub fn samples(&self) -> u64 {
        self.lock().samples
    }

    /// A view for operators.
    pub fn snapshot(&self, now: Instant, cfg: &OutlierConfig) -> Snapshot {
        let mut s = self.lock();
        s.advance(now, cfg);
        let (ok, err) = s.window(now, cfg);
        let total = ok + err;
        Snapshot {
            in_flight: self.in_flight(),
            latency_ewma_ms: s.ewma_ms,
            samples: s.samples,
            error_rate: (total > 0).then(|| f64::from(err) / f64::from(total)),
            window_requests: total,
            consecutive_failures: s.consecutive,
            last_success: s.last_success.map(|t| t.to_rfc3339()),
            phase: s.phase,
            ejected_for_ms: s
                .until
                .map(|u| u.saturating_duration_since(now).as_millis() as u64),
            ejections: s.ejections,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> OutlierConfig {
        OutlierConfig::default()
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_failures_eject_with_growing_backoff_then_probe_and_slow_start() {
        let o = Observed::default();
        let c = cfg();
        for i in 1..c.consecutive_failures {
            assert!(
                !o.record_failure(Instant::now(), &c),
                "failure {i} does not eject"
            );
        }
        assert!(o.record_failure(Instant::now(), &c));
        assert!(o.availability(Instant::now(), &c).ejected);
        tokio::time::advance(c.base_ejection - Duration::from_millis(1)).await;
        assert!(
            o.availability(Instant::now(), &c).ejected,
            "still ejected just before the period ends"
        );
        tokio::time::advance(Duration::from_millis(2)).await;
        let a = o.availability(Instant::now(), &c);
        assert!(!a.ejected && a.probing, "{a:?}");
        // The probe fails: ejected again for twice as long.
        assert!(o.record_failure(Instant::now(), &c));
        tokio::time::advance(c.base_ejection * 2 - Duration::from_millis(1)).await;
        assert!(o.availability(Instant::now(), &c).ejected);
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(o.availability(Instant::now(), &c).probing);
        // The probe succeeds: slow start ramps the share up.
        o.record_success(Instant::now(), &c);
        let a = o.availability(Instant::now(), &c);
        assert!(!a.ejected && !a.probing);
        assert!((a.weight_factor - 0.1).abs() < 1e-9, "{a:?}");
        tokio::time::advance(c.slow_start / 2).await;
        let half = o.availability(Instant::now(), &c).weight_factor;
        assert!((half - 0.55).abs() < 1e-6, "{half}");
        tokio::time::advance(c.slow_start).await;
        assert_eq!(o.availability(Instant::now(), &c).weight_factor, 1.0);
        assert_eq!(
            o.snapshot(Instant::now(), &c).ejections,
            0,
            "a full recovery resets the backoff"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn error_rate_ejects_only_with_enough_requests() {
        let o = Observed::default();
        let c = OutlierConfig {
            consecutive_failures: 100,
            ..cfg()
        };
        for _ in 0..4 {
            o.record_success(Instant::now(), &c);
            assert!(!o.record_failure(Instant::now(), &c));
        }
        o.record_success(Instant::now(), &c);
        // 10 requests, 5 failures: the 50% threshold trips on the 5th failure.
        assert!(o.record_failure(Instant::now(), &c));
        // Old errors age out of the window.
        let o = Observed::default();
        for _ in 0..4 {
            o.record_failure(Instant::now(), &c);
        }
        tokio::time::advance(c.window * 2).await;
        for _ in 0..6 {
            o.record_success(Instant::now(), &c);
        }
        assert!(!o.record_failure(Instant::now(), &c));
        assert_eq!(o.snapshot(Instant::now(), &c).window_requests, 7);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_ewma_takes_peaks_and_decays_with_time() {
        let o = Observed::default();
        let c = cfg();
        o.record_latency(Duration::from_millis(100), Instant::now(), &c);
        o.record_latency(Duration::from_millis(500), Instant::now(), &c);
        assert_eq!(o.latency_ms(), Some(500.0), "a peak is taken at once");
        o.record_latency(Duration::from_millis(100), Instant::now(), &c);
        assert_eq!(
            o.latency_ms(),
            Some(500.0),
            "no time passed: the peak holds"
        );
        tokio::time::advance(c.latency_decay * 5).await;
        o.record_latency(Duration::from_millis(100), Instant::now(), &c);
        let l = o.latency_ms().unwrap();
        assert!(l < 105.0, "an old peak has decayed: {l}");
    }

    #[test]
    fn in_flight_guard_counts() {
        let o = Observed::default();
        {
            let _a = o.start();
            let _b = o.start();
            assert_eq!(o.in_flight(), 2);
        }
        assert_eq!(o.in_flight(), 0);
    }
}
