//! The problem collector every section's validation writes to, with the shared wording.

use super::RateConfig;
use std::time::Duration;

/// The longest duration any setting may have: beyond it a deadline added to a clock
/// reading could overflow, and no operator means it.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Collects `(dotted key, reason)` problems.
#[derive(Default)]
pub(super) struct Checks {
    pub(super) out: Vec<(String, String)>,
}

impl Checks {
    pub(super) fn push(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.out.push((key.into(), reason.into()));
    }

    /// At most [`MAX_DURATION`].
    pub(super) fn bounded(&mut self, key: &str, d: Duration) {
        if d > MAX_DURATION {
            self.push(
                key,
                format!(
                    "must be at most 100 years, got {}",
                    humantime::format_duration(d)
                ),
            );
        }
    }

    /// Longer than zero (and bounded).
    pub(super) fn positive(&mut self, key: &str, d: Duration) {
        if d.is_zero() {
            self.push(key, "must be longer than 0s");
        }
        self.bounded(key, d);
    }

    /// At least `min` (and bounded).
    pub(super) fn at_least_duration(&mut self, key: &str, d: Duration, min: Duration) {
        if d < min {
            self.push(
                key,
                format!(
                    "must be at least {}, got {}",
                    humantime::format_duration(min),
                    humantime::format_duration(d)
                ),
            );
        }
        self.bounded(key, d);
    }

    /// `shorter` (key, value) no longer than `longer`.
    pub(super) fn no_longer(&mut self, shorter: (&str, Duration), longer: (&str, Duration)) {
        if shorter.1 > longer.1 {
            self.push(
                shorter.0,
                format!(
                    "must not be longer than {} ({}), got {}",
                    longer.0,
                    humantime::format_duration(longer.1),
                    humantime::format_duration(shorter.1)
                ),
            );
        }
    }

    /// A count or size of at least `min`.
    /// A table's byte bound (`crate::fair`): from 64 KiB (a few entries of every tenant) to
    /// 1 TiB.
    pub(super) fn table_bytes(&mut self, key: &str, n: u64) {
        const MIN: u64 = 64 * 1024;
        const MAX: u64 = 1 << 40;
        if !(MIN..=MAX).contains(&n) {
            self.push(
                key,
                format!("must be between {MIN} (64 KiB) and {MAX} (1 TiB), got {n}"),
            );
        }
    }

    pub(super) fn at_least(&mut self, key: &str, n: usize, min: usize) {
        if n < min {
            self.push(key, format!("must be at least {min}, got {n}"));
        }
    }

    /// A number between 0 and 1.
    pub(super) fn fraction(&mut self, key: &str, x: f64) {
        if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
            self.push(key, format!("must be between 0 and 1, got {x}"));
        }
    }

    /// A rate the limiters can use, with a burst of at least one.
    pub(super) fn rate(&mut self, key: &str, r: &RateConfig) {
        if !crate::policy::rate_ok(r.rps) {
            self.push(
                format!("{key}.rps"),
                format!("{}, got {}", crate::policy::RATE_RANGE, r.rps),
            );
        }
        if r.burst == Some(0) {
            self.push(format!("{key}.burst"), "must be at least 1, got 0");
        }
    }
}
