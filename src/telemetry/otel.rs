//! OpenTelemetry traces: the tracer (none unless `[telemetry] otlp_endpoint` is set), a
//! request's or task's place in a trace ([`Trace`]), and W3C trace context in and out.
//!
//! Span names and attributes follow the OpenTelemetry semantic conventions **v1.37.0**
//! (HTTP: stable; GenAI: development — `gen_ai.provider.name`, `gen_ai.agent.*`,
//! `invoke_agent {name}` and `chat {model}`, the names 1.37 introduced). Since the GenAI
//! conventions have no older stable form to keep, `OTEL_SEMCONV_STABILITY_OPT_IN` changes
//! nothing here; what the conventions do not cover is named `ldp.*`.
//!
//! Off, a [`Trace`] is `None` inside: every method returns at once, no span, attribute or
//! header is made — the hot path pays one branch per call.

mod export;

pub use export::{parse_headers, ExportSettings};

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use std::borrow::Cow;
use std::sync::Arc;

pub use opentelemetry::trace::SpanKind as Kind;
pub use opentelemetry::{KeyValue as Attr, Value as AttrValue};

/// The version of the semantic conventions the spans follow (see the module's doc).
pub const SEMCONV_VERSION: &str = "1.37.0";

/// The W3C trace-context headers.
pub const TRACEPARENT: &str = "traceparent";
/// See [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// The gateway's tracer and exporter: built once at start when an endpoint is configured.
pub struct Otel {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    /// Prompts and outputs may go on spans (`[telemetry] capture_content`).
    content: bool,
    exporter: export::Exporter,
}

impl std::fmt::Debug for Otel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Otel")
            .field("content", &self.content)
            .finish()
    }
}

impl Otel {
    /// The tracer for `settings`: spans sampled parent-based at `sample_ratio`, each ended
    /// span queued for the exporter task (spawned here, on the current runtime), whose drops
    /// `dropped` counts.
    pub fn start(
        settings: ExportSettings,
        sample_ratio: f64,
        content: bool,
        dropped: prometheus::IntCounter,
    ) -> Arc<Otel> {
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let (processor, exporter) = export::start(settings, &resource, dropped);
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                sample_ratio,
            ))))
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        let scope = opentelemetry::InstrumentationScope::builder("ldp-gateway")
            .with_version(env!("CARGO_PKG_VERSION"))
            .with_schema_url(format!(
                "https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
            ))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Arc::new(Otel {
            tracer,
            provider,
            content,
            exporter,
        })
    }

    /// Sends what is queued and stops the exporter, within `grace` at most: shutdown is never
    /// held past it (what is not sent by then is dropped and counted).
    pub async fn shutdown(&self, grace: std::time::Duration) {
        // Spans ended after this are not exported (nothing would send them).
        let _ = self.provider.shutdown_with_timeout(grace);
        self.exporter.finish(grace).await;
    }
}

/// A request's or task's place in a trace: the span its work is under (the parent of the
/// spans it starts), or nothing at all when tracing is off. Cheap to clone; the span ends at
/// [`Trace::end`] or when the last clone is dropped.
#[derive(Clone, Default)]
pub struct Trace(Option<Traced>);

#[derive(Clone)]
struct Traced {
    otel: Arc<Otel>,
    cx: Context,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.trace_id() {
            Some(id) => write!(f, "Trace({id})"),
            None => f.write_str("Trace(off)"),
        }
    }
}

/// Reads the W3C headers from an HTTP header map.
struct Headers<'a>(&'a HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

impl Trace {
    /// No trace: tracing is off (or the work is not traced).
    pub const fn off() -> Trace {
        Trace(None)
    }

    /// A SERVER span for one request (HTTP conventions: `{method} {route}`), under the
    /// client's `traceparent`/`tracestate` when it sent valid ones; `None` tracing: off.
    pub fn server(
        otel: Option<&Arc<Otel>>,
        headers: &HeaderMap,
        method: &str,
        route: &'static str,
    ) -> Trace {
        let Some(otel) = otel else {
            return Trace::off();
        };
        use opentelemetry::propagation::TextMapPropagator as _;
        let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .extract(&Headers(headers));
        // The sampler (parent-based ratio) reads neither name nor attributes: the span is
        // started bare, and named and described only when it is recorded, so an unsampled
        // request builds no strings for it.
        let mut span = otel
            .tracer
            .span_builder("")
            .with_kind(SpanKind::Server)
            .start_with_context(&otel.tracer, &parent);
        if span.is_recording() {
            // The HTTP conventions' known methods, else `_OTHER`: a client's extension method
            // (up to hyper's head limit) never becomes a span's name or attribute.
            let method = known_method(method);
            span.update_name(format!("{method} {route}"));
            span.set_attribute(KeyValue::new("http.request.method", method));
            span.set_attribute(KeyValue::new("http.route", route));
        }
        Trace(Some(Traced {
            otel: otel.clone(),
            cx: parent.with_span(span),
        }))
    }

    /// Whether a span is being recorded (tracing on and this trace sampled): worth building
    /// attributes for.
    pub fn recording(&self) -> bool {
        self.0.as_ref().is_some_and(|t| t.cx.span().is_recording())
    }

    /// Whether prompts and outputs may go on spans.
    pub fn captures_content(&self) -> bool {
        self.0.as_ref().is_some_and(|t| t.otel.content)
    }

    /// A child span named `name`, started now, with the attributes `attrs` gives (called only
    /// when the child is recorded).
    pub fn child(
        &self,
        name: impl FnOnce() -> Cow<'static, str>,
        kind: SpanKind,
        attrs: impl FnOnce() -> Vec<KeyValue>,
    ) -> Trace {
        let Some(t) = &self.0 else {
            return Trace::off();
        };
        let tracer = &t.otel.tracer;
        let builder = if t.cx.span().span_context().is_sampled() {
            tracer
                .span_builder(name())
                .with_kind(kind)
                .with_attributes(attrs())
        } else {
            // Not sampled: the child is not recorded either (parent-based), so nothing is
            // built for it but its context.
            tracer.span_builder("")
        };
        let span = builder.start_with_context(tracer, &t.cx);
        Trace(Some(Traced {
            otel: t.otel.clone(),
            cx: t.cx.with_span(span),
        }))
    }

    /// Adds the attributes `attrs` gives (called only when recorded).
    pub fn set(&self, attrs: impl FnOnce() -> Vec<KeyValue>) {
        if self.recording() {
            if let Some(t) = &self.0 {
                t.cx.span().set_attributes(attrs());
            }
        }
    }

    /// Marks the span failed: `error.type` and an error status.
    pub fn fail(&self, error_type: &str) {
        if self.recording() {
            if let Some(t) = &self.0 {
                let span = t.cx.span();
                span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
                span.set_status(Status::error(error_type.to_owned()));
            }
        }
    }

    /// Ends the span now.
    pub fn end(&self) {
        if let Some(t) = &self.0 {
            t.cx.span().end();
        }
    }

    fn context(&self) -> Option<SpanContext> {
        self.0
            .as_ref()
            .map(|t| t.cx.span().span_context().clone())
            .filter(SpanContext::is_valid)
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> Option<String> {
        self.context().map(|c| c.trace_id().to_string())
    }

    /// The `traceparent` naming this span (for an answer, or a call it makes).
    pub fn traceparent(&self) -> Option<HeaderValue> {
        let c = self.context()?;
        let value = format!(
            "00-{}-{}-{:02x}",
            c.trace_id(),
            c.span_id(),
            c.trace_flags().to_u8()
        );
        HeaderValue::from_str(&value).ok()
    }

    /// The headers that carry this span to the next hop: `traceparent`, and `tracestate`
    /// when the trace has one. Empty when tracing is off.
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let Some(parent) = self.traceparent() else {
            return Vec::new();
        };
        let mut out = vec![(HeaderName::from_static(TRACEPARENT), parent)];
        let state = self.context().map(|c| c.trace_state().header());
        // A client's `tracestate` goes on to delegates only within W3C's advised 512 bytes.
        if let Some(v) = state
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE)
            .and_then(|s| HeaderValue::from_str(&s).ok())
        {
            out.push((HeaderName::from_static(TRACESTATE), v));
        }
        out
    }
}

/// Most bytes of a `tracestate` sent on to a delegate (W3C Trace Context's advice: 512).
const MAX_TRACESTATE: usize = 512;

/// `method` if the HTTP semantic conventions know it, else `_OTHER`.
fn known_method(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE",
    ];
    KNOWN.into_iter().find(|k| *k == method).unwrap_or("_OTHER")
}

/// Parses a `traceparent` value into its trace id (tests, the simulated delegate's log).
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (_version, id) = (parts.next()?, parts.next()?);
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_outside_the_conventions_is_other() {
        assert_eq!(known_method("POST"), "POST");
        assert_eq!(known_method(&"X".repeat(100_000)), "_OTHER");
        assert_eq!(known_method("post"), "_OTHER");
    }

    #[test]
    fn off_does_nothing() {
        let t = Trace::off();
        let c = t.child(|| "x".into(), SpanKind::Internal, Vec::new);
        assert!(!c.recording());
        assert!(c.headers().is_empty());
        assert_eq!(c.trace_id(), None);
    }

    #[test]
    fn a_traceparent_is_read_back() {
        assert_eq!(
            trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(trace_id_of("00-zz-00f067aa0ba902b7-01"), None);
    }
}
