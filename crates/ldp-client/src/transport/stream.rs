//! Streaming a task: TASK_UPDATE events relayed as they arrive (SSE), then the final answer.

use super::sse::SseDecoder;
use super::{Forward, Req, Transport};
use crate::Error;
use ldp_wire::{Body, Envelope};
use std::time::Duration;

impl Transport {
    /// Sends one envelope to `base/ldp/stream` and reads Server-Sent Events: every TASK_UPDATE
    /// goes to `on_update` (awaited: a slow consumer slows the read, so nothing piles up), the
    /// final TASK_RESULT/TASK_FAILED is returned. A stream that ends
    /// without a final message is [`Error::StreamBroken`], never a success; one past the
    /// answer cap (every byte counts, comments included) is [`Error::Malformed`].
    pub async fn send_stream<F>(
        &self,
        base: &str,
        envelope: &Envelope,
        timeout: Duration,
        forward: Forward<'_>,
        mut on_update: impl FnMut(Envelope) -> F,
    ) -> Result<Envelope, Error>
    where
        F: std::future::Future<Output = ()>,
    {
        const STREAM: &str = "/ldp/stream";
        let url = format!("{base}{STREAM}");
        let req = Req {
            path: STREAM,
            body: Some(self.encode(base, STREAM, envelope)?),
            forward,
            events: true,
            headers: &self.headers,
        };
        let cap = self.max_response_bytes;
        let work = async {
            let (head, mut body) = self.open(base, &req).await?;
            let status = head.status;
            if !status.is_success() {
                let mut answer = Vec::new();
                while let Ok(Some(chunk)) = body.chunk().await {
                    if answer.len() + chunk.len() > cap {
                        break;
                    }
                    answer.extend_from_slice(&chunk);
                }
                return Err(Self::status_error(url.clone(), status.as_u16(), &answer));
            }
            let mut decoder = SseDecoder::new(cap);
            let mut ready = std::collections::VecDeque::new();
            loop {
                let chunk = match body.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) | Err(_) => return Err(Error::StreamBroken { url: url.clone() }),
                };
                if let Err(o) = decoder.feed(&chunk, &mut ready) {
                    return Err(Error::Malformed {
                        url: url.clone(),
                        reason: o.to_string(),
                    });
                }
                while let Some(data) = ready.pop_front() {
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
