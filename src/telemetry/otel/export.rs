//! The span processor and the OTLP/HTTP exporter: ended spans go into a bounded queue, one
//! tokio task sends them in batches as protobuf to `{endpoint}/v1/traces`.
//!
//! Why our own processor, and not the SDK's `BatchSpanProcessor`: that one runs on a thread
//! of its own with no tokio reactor, so it needs a blocking HTTP client (a second one, beside
//! the gateway's hyper pool); its async-runtime variant can deadlock on a current-thread
//! runtime (tests, `#[tokio::main(flavor = "current_thread")]`), and neither lets us count
//! the spans it drops. Here `on_end` never blocks (a `try_send`; a full queue drops the span
//! and counts it), one task on the gateway's runtime batches (512 spans or a second) and
//! sends each batch within [`EXPORT_TIMEOUT`] through the same `ldp-client` transport the
//! gateway calls delegates with; a batch that fails or is late is dropped and counted. A
//! collector that is down or slow costs the gateway a full queue, never a wait.

use opentelemetry::Context;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use prometheus::IntCounter;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Spans waiting for the exporter; past it, an ended span is dropped (and counted).
const QUEUE: usize = 4096;
/// Most spans in one export request.
const BATCH: usize = 512;
/// A batch goes out at least this often when spans are waiting.
const EVERY: Duration = Duration::from_secs(1);
/// One export's deadline: a collector slower than this loses the batch.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The OTLP/HTTP path for traces below the endpoint.
const TRACES_PATH: &str = "/v1/traces";

/// Where spans go and what the export requests carry.
#[derive(Debug, Clone)]
pub struct ExportSettings {
    /// The collector's base URL (no trailing `/`).
    pub endpoint: String,
    /// `service.name`.
    pub service_name: String,
    /// Headers sent with every export (a collector's API key: never logged).
    pub headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
}

/// The processor the tracer provider calls at each span's end.
#[derive(Debug)]
pub(super) struct Queue {
    tx: mpsc::Sender<SpanData>,
    dropped: IntCounter,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.tx.try_send(span).is_err() {
            self.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The exporter task's handle: stopped (and flushed) by [`Exporter::finish`].
pub(super) struct Exporter {
    stop: watch::Sender<bool>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Exporter {
    /// Asks the task to send what is queued and waits for it, `grace` at most; then it is
    /// aborted (its last batch dropped).
    pub(super) async fn finish(&self, grace: Duration) {
        let _ = self.stop.send(true);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(mut task) = task {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

/// The processor and the exporter task, spawned on the current runtime.
pub(super) fn start(
    settings: ExportSettings,
    resource: &opentelemetry_sdk::Resource,
    dropped: IntCounter,
) -> (Queue, Exporter) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let (stop, stopped) = watch::channel(false);
    let mut headers = vec![(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    )];
    headers.extend(settings.headers);
    let sender = Sender {
        transport: ldp_client::Transport::new("ldp-gateway", EXPORT_TIMEOUT, EXPORT_TIMEOUT),
        resource: resource.into(),
        headers,
        endpoint: settings.endpoint,
        dropped: dropped.clone(),
    };
    let task = tokio::spawn(run(rx, stopped, sender));
    (
        Queue { tx, dropped },
        Exporter {
            stop,
            task: std::sync::Mutex::new(Some(task)),
        },
    )
}

/// Sends batches to the collector.
struct Sender {
    transport: ldp_client::Transport,
    resource: ResourceAttributesWithSchema,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    endpoint: String,
    dropped: IntCounter,
}

impl Sender {
    /// One export request within `timeout`; a failure or a late answer drops the batch
    /// (counted; logged at most once a minute: a collector that is down says so once).
    async fn send(&self, batch: Vec<SpanData>, timeout: Duration) {
        use prost::Message as _;
        let n = batch.len() as u64;
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        let body = bytes::Bytes::from(request.encode_to_vec());
        let sent = self
            .transport
            .request(
                &self.endpoint,
                TRACES_PATH,
                Some(body),
                &self.headers,
                ldp_client::Forward::default(),
                timeout,
            )
            .await;
        let failure = match sent {
            Ok(a) if a.head.status.is_success() => return,
            Ok(a) => format!("the collector answered {}", a.head.status),
            Err(e) => e.summary().to_string(),
        };
        self.dropped.inc_by(n);
        if once_a_minute() {
            tracing::warn!(spans = n, error = %failure, "trace export failed; spans dropped");
        }
    }
}

/// Batches spans from `rx` until `stopped`, then sends what is queued (bounded by the
/// caller's grace: it aborts this task when it runs out).
async fn run(mut rx: mpsc::Receiver<SpanData>, mut stopped: watch::Receiver<bool>, s: Sender) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            span = rx.recv() => match span {
                Some(span) => {
                    batch.push(span);
                    if batch.len() >= BATCH {
                        s.send(std::mem::take(&mut batch), EXPORT_TIMEOUT).await;
                    }
                }
                None => break,
            },
            _ = tick.tick() => {
                if !batch.is_empty() {
                    s.send(std::mem::take(&mut batch), EXPORT_TIMEOUT).await;
                }
            }
        }
    }
    while let Ok(span) = rx.try_recv() {
        batch.push(span);
        if batch.len() >= BATCH {
            s.send(std::mem::take(&mut batch), EXPORT_TIMEOUT).await;
        }
    }
    if !batch.is_empty() {
        s.send(batch, EXPORT_TIMEOUT).await;
    }
}

fn once_a_minute() -> bool {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(i64::MIN);
    let now = chrono::Utc::now().timestamp() / 60;
    LAST.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}

/// Parses export headers as `OTEL_EXPORTER_OTLP_HEADERS` writes them (`k=v,k2=v2`, values
/// percent-decoded is not needed for API keys: taken as written). A pair that is no valid
/// header is an error naming its position, never its value (a secret).
pub fn parse_headers(
    text: &str,
) -> Result<Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>, String> {
    let mut out = Vec::new();
    for (i, pair) in text.split(',').enumerate() {
        if pair.trim().is_empty() {
            continue;
        }
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("header {} is not key=value", i + 1))?;
        let name = hyper::header::HeaderName::from_bytes(k.trim().as_bytes())
            .map_err(|_| format!("header {} has an invalid name", i + 1))?;
        let mut value = hyper::header::HeaderValue::from_str(v.trim())
            .map_err(|_| format!("header {} has an invalid value", i + 1))?;
        value.set_sensitive(true);
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_headers_parse_and_never_echo_values() {
        let h = parse_headers("api-key=s3cret, x-team = core ,").unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].0.as_str(), "api-key");
        assert_eq!(h[1].1.to_str().unwrap(), "core");
        let e = parse_headers("api-key=s3cret,broken").unwrap_err();
        assert_eq!(e, "header 2 is not key=value");
        assert!(!parse_headers("k=\u{1}s3cret")
            .unwrap_err()
            .contains("s3cret"));
    }
}
