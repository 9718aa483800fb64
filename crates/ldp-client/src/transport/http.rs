//! Plain JSON-over-HTTP calls to endpoints that are not LDP (an OpenAI-compatible server),
//! over the same pool, deadlines and size caps as every LDP call: a whole answer
//! ([`Transport::request`]) or one read as Server-Sent Events ([`Transport::events`]).

use super::head::Head;
use super::sse::SseDecoder;
use super::{Answer, Forward, Req, Transport};
use crate::Error;
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use std::time::Duration;

/// A whole answer: its head and body (at most the transport's `max_response_bytes`).
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    /// Status and `Retry-After`.
    pub head: Head,
    /// The body as it came.
    pub body: Bytes,
}

/// An answer read as Server-Sent Events: each event's `data` text, in order.
pub struct Events {
    answer: Answer,
    decoder: SseDecoder,
    ready: std::collections::VecDeque<String>,
    cap: usize,
    url: String,
}

impl Events {
    /// The next event's data; `None` when the answer ends. A stream past the transport's
    /// `max_response_bytes` — every byte counts, comments and what else is skipped included —
    /// is [`Error::Malformed`] ([`Events::past_cap`] says so); a connection that fails is
    /// [`Error::StreamBroken`].
    pub async fn next(&mut self) -> Result<Option<String>, Error> {
        loop {
            if let Some(data) = self.ready.pop_front() {
                return Ok(Some(data));
            }
            let chunk = match self.answer.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => return Ok(None),
                Err(_) => {
                    return Err(Error::StreamBroken {
                        url: self.url.clone(),
                    })
                }
            };
            // Decoded per whole event, never per read: a read may split a character.
            if let Err(o) = self.decoder.feed(&chunk, &mut self.ready) {
                return Err(Error::Malformed {
                    url: self.url.clone(),
                    reason: o.to_string(),
                });
            }
        }
    }

    /// The cap the stream passed (bytes), when reading stopped for its size: the stream's
    /// (every byte read) or the answer cap (one event).
    pub fn past_cap(&self) -> Option<usize> {
        self.decoder.past_cap().map(|o| match o {
            super::sse::Oversize::Stream(cap) | super::sse::Oversize::Event(cap) => cap,
        })
    }
}

impl Transport {
    /// POSTs `body` (JSON) to `base` + `path`, or GETs it without a body, with `headers`
    /// (an `Authorization` for the endpoint) instead of the transport's own (a `content-type` among them replaces JSON's), and
    /// `forward` (a forwarded task's hop count and trace context), and reads the whole answer within `timeout`
    /// (the same exchange as every LDP call). Any status is an answer; only the exchange can
    /// fail.
    pub async fn request(
        &self,
        base: &str,
        path: &'static str,
        body: Option<Bytes>,
        headers: &[(HeaderName, HeaderValue)],
        forward: Forward<'_>,
        timeout: Duration,
    ) -> Result<HttpAnswer, Error> {
        let req = Req {
            path,
            body,
            forward,
            events: false,
            headers,
        };
        let (head, body) = self
            .exchange(base, &req, timeout, self.max_response_bytes)
            .await?;
        Ok(HttpAnswer { head, body })
    }

    /// POSTs `body` to `base` + `path` asking for Server-Sent Events (`forward` as for
    /// [`Transport::request`]); the answer's head (within `timeout`), and its events to read
    /// as they come (the caller holds the deadline for the rest). A non-2xx answer's events
    /// are its body: read it with [`Transport::request`]'s rules by the caller, or drop it.
    pub async fn events(
        &self,
        base: &str,
        path: &'static str,
        body: Bytes,
        headers: &[(HeaderName, HeaderValue)],
        forward: Forward<'_>,
        timeout: Duration,
    ) -> Result<(Head, Events), Error> {
        let req = Req {
            path,
            body: Some(body),
            forward,
            events: true,
            headers,
        };
        let url = format!("{base}{path}");
        let opened = tokio::time::timeout(timeout, self.open(base, &req)).await;
        let (head, answer) = match opened {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::Timeout {
                    url,
                    after: timeout,
                })
            }
        };
        Ok((
            head,
            Events {
                answer,
                decoder: SseDecoder::new(self.max_response_bytes),
                ready: Default::default(),
                cap: self.max_response_bytes,
                url,
            },
        ))
    }
}

impl Events {
    /// The rest of the answer as one body (at most the cap): a refusal's JSON, read instead
    /// of events.
    pub async fn body(mut self) -> Bytes {
        let mut bytes = Vec::new();
        while let Ok(Some(c)) = self.answer.chunk().await {
            if bytes.len() + c.len() > self.cap {
                break;
            }
            bytes.extend_from_slice(&c);
        }
        bytes.into()
    }
}
