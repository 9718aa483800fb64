//! Streaming a task: TASK_UPDATE events relayed as they arrive (SSE), then the final answer.

use super::{Transport, HOPS_HEADER};
use crate::error::{classify, unanswered};
use crate::Error;
use ldp_wire::{Body, Envelope};
use std::time::Duration;

/// Splits complete SSE events off the front of `buf`, returning each event's `data` text.
fn take_events(buf: &mut String) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let normalized = buf.replace("\r\n", "\n");
        if normalized.len() != buf.len() {
            *buf = normalized;
        }
        let Some(end) = buf.find("\n\n") else { break };
        let event: String = buf.drain(..end + 2).collect();
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}

impl Transport {
    /// Sends one envelope to `base/ldp/stream` and reads Server-Sent Events: every TASK_UPDATE
    /// goes to `on_update` (awaited: a slow consumer slows the read, so nothing piles up), the
    /// final TASK_RESULT/TASK_FAILED is returned. A stream that ends
    /// without a final message is [`Error::StreamBroken`], never a success.
    pub async fn send_stream<F>(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
        hops: Option<u32>,
        mut on_update: impl FnMut(Envelope) -> F,
    ) -> Result<Envelope, Error>
    where
        F: std::future::Future<Output = ()>,
    {
        let url = format!("{base}/ldp/stream");
        let body = self.encode(base, "/ldp/stream", envelope)?;
        let cap = self.max_response_bytes;
        let work = async {
            let mut req = self.http.post(&url);
            if let Some(n) = hops {
                req = req.header(HOPS_HEADER, n);
            }
            for (name, value) in self.headers.iter() {
                req = req.header(name, value);
            }
            let mut resp = req
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .body(body)
                .send()
                .await
                .map_err(|e| unanswered(classify(&url, timeout, e)))?;
            if !resp.status().is_success() {
                let status = resp.status().as_u16();
                let body = resp.bytes().await.unwrap_or_default();
                return Err(Self::status_error(url.clone(), status, &body));
            }
            let mut buf = String::new();
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) => return Err(Error::StreamBroken { url: url.clone() }),
                    Err(_) => return Err(Error::StreamBroken { url: url.clone() }),
                };
                buf.push_str(&String::from_utf8_lossy(&chunk));
                if buf.len() > cap {
                    return Err(Error::Malformed {
                        url: url.clone(),
                        reason: format!("stream event larger than {cap} bytes"),
                    });
                }
                for data in take_events(&mut buf) {
                    let env =
                        Envelope::from_slice(data.as_bytes()).map_err(|e| Error::Malformed {
                            url: url.clone(),
                            reason: e.to_string(),
                        })?;
                    match env.body {
                        Body::TaskUpdate { .. } => on_update(env).await,
                        _ => return Ok(env),
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                url,
                after: timeout,
            }),
        }
    }
}
