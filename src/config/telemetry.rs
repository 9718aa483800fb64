//! `[telemetry]`: OpenTelemetry traces exported over OTLP/HTTP (off unless an endpoint is set),
//! and the standard `OTEL_*` variables that override the file.

use super::checks::Checks;
use serde::{Deserialize, Serialize};

/// `[telemetry]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`): spans are POSTed to
    /// `{otlp_endpoint}/v1/traces` as protobuf. None: no tracer exists, no span is made.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// The share of new traces sampled (0..=1); a client's `traceparent` decides for its own
    /// (parent-based).
    pub sample_ratio: f64,
    /// The name of an environment variable holding the export headers (`key=value,…`, as
    /// `OTEL_EXPORTER_OTLP_HEADERS`): a collector's API key is a secret, never in the file.
    pub headers_env: Option<String>,
    /// Put prompts and outputs on spans (`gen_ai.input.messages`, `gen_ai.output.messages`).
    /// Off: spans carry sizes, names and numbers, never a client's text.
    pub capture_content: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "ldp-gateway".into(),
            sample_ratio: 1.0,
            headers_env: None,
            capture_content: false,
        }
    }
}

/// The standard variables read, each over its key of the file: the OpenTelemetry
/// specification has the environment configure the SDK, so an operator's collector
/// settings apply to every service alike.
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// See [`ENDPOINT_VAR`].
pub const SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";
/// See [`ENDPOINT_VAR`].
pub const SAMPLER_ARG_VAR: &str = "OTEL_TRACES_SAMPLER_ARG";

impl TelemetryConfig {
    /// Applies the standard `OTEL_*` variables `var` finds over the file's values (an empty
    /// one is unset). A ratio that does not parse is kept as NaN, which `check` refuses.
    pub(super) fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = set(ENDPOINT_VAR) {
            self.otlp_endpoint = Some(v.trim().to_owned());
        }
        if let Some(v) = set(SERVICE_NAME_VAR) {
            self.service_name = v.trim().to_owned();
        }
        if let Some(v) = set(SAMPLER_ARG_VAR) {
            self.sample_ratio = v.trim().parse().unwrap_or(f64::NAN);
        }
    }

    pub(super) fn check(&self, c: &mut Checks) {
        if let Some(url) = &self.otlp_endpoint {
            let plain = url.starts_with("http://");
            let tls = url.starts_with("https://");
            if !(plain || tls) || url.contains(['?', '#']) {
                c.push(
                    "telemetry.otlp_endpoint",
                    "must be an http:// or https:// base URL (the collector's OTLP/HTTP port)",
                );
            } else if tls && !cfg!(feature = "tls") {
                c.push(
                    "telemetry.otlp_endpoint",
                    "https:// needs a build with the `tls` feature",
                );
            }
        }
        if self.service_name.trim().is_empty() || self.service_name.len() > 256 {
            c.push("telemetry.service_name", "must be 1 to 256 bytes");
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            c.push(
                "telemetry.sample_ratio",
                format!("must be between 0 and 1, got {}", self.sample_ratio),
            );
        }
        if let Some(var) = &self.headers_env {
            let valid =
                !var.is_empty() && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                c.push(
                    "telemetry.headers_env",
                    "must be the name of an environment variable (letters, digits, _)",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(t: &TelemetryConfig) -> Vec<(String, String)> {
        let mut c = Checks::default();
        t.check(&mut c);
        c.out
    }

    #[test]
    fn defaults_are_off_and_valid() {
        let t = TelemetryConfig::default();
        assert!(t.otlp_endpoint.is_none());
        assert!(problems(&t).is_empty());
    }

    #[test]
    fn bad_values_are_named() {
        let t = TelemetryConfig {
            otlp_endpoint: Some("collector:4318".into()),
            service_name: " ".into(),
            sample_ratio: 1.5,
            headers_env: Some("MY-HEADERS".into()),
            capture_content: false,
        };
        let keys: Vec<String> = problems(&t).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "telemetry.otlp_endpoint",
                "telemetry.service_name",
                "telemetry.sample_ratio",
                "telemetry.headers_env"
            ]
        );
    }

    #[test]
    fn the_standard_variables_win_over_the_file() {
        let mut t = TelemetryConfig {
            otlp_endpoint: Some("http://file:4318".into()),
            ..TelemetryConfig::default()
        };
        t.apply_env(|name| match name {
            ENDPOINT_VAR => Some("http://env:4318".into()),
            SERVICE_NAME_VAR => Some("edge".into()),
            SAMPLER_ARG_VAR => Some("0.25".into()),
            _ => None,
        });
        assert_eq!(t.otlp_endpoint.as_deref(), Some("http://env:4318"));
        assert_eq!(t.service_name, "edge");
        assert_eq!(t.sample_ratio, 0.25);
        t.apply_env(|name| (name == SAMPLER_ARG_VAR).then(|| "half".into()));
        assert_eq!(
            problems(&t),
            [(
                "telemetry.sample_ratio".into(),
                "must be between 0 and 1, got NaN".into()
            )]
        );
    }
}
