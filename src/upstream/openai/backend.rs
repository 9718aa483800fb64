//! Calls to an OpenAI-compatible delegate: `GET {url}/models` (liveness) and
//! `POST {url}/chat/completions`, whole or streamed, through the gateway's one transport
//! (`ldp-client`'s pool, deadlines and size caps). Each answer is classified once into a
//! [`Reply`] or a [`ChatError`] that says whether another delegate may be tried.

use crate::chat::{self, Delta, Dialect, Native, Refusal};
use crate::config::{DelegateConfig, MaxTokensParam};
use crate::secret::Secret;
use crate::upstream::chat::{ChatError, Stopped, Streamed, DRAIN};
use crate::upstream::declared::{prices, Prices};
use crate::upstream::{secret_header, KeyError};
use crate::upstream::{UpstreamClient, UpstreamError};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION};
use openai_wire::{Chunk, Completion, ErrorBody, StreamOptions, UpstreamRequest, Usage};
use serde::Serialize;
use serde_json::{Map, Value};
use std::ops::ControlFlow;
use std::time::Duration;
use tokio::time::Instant;

const MODELS: &str = "/models";
const CHAT: &str = "/chat/completions";

/// How the gateway calls one OpenAI-backed delegate.
pub struct Backend {
    /// The upstream model sent with every request.
    pub model: String,
    /// The declared per-token prices.
    pub prices: Prices,
    /// The declared context window, in tokens.
    pub context_window: Option<u64>,
    /// The field the output bound is sent in, if the operator chose one.
    pub max_tokens_param: Option<MaxTokensParam>,
    /// `Authorization: Bearer <key>` (marked sensitive: never printed), if a key is set.
    auth: Vec<(HeaderName, HeaderValue)>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("model", &self.model)
            .field("prices", &self.prices)
            .field("context_window", &self.context_window)
            .field("api_key", &(!self.auth.is_empty()).then_some("***"))
            .finish()
    }
}

impl Backend {
    /// The backend of an entry of kind `openai`, its key read from `api_key_env`.
    pub fn from_config(cfg: &DelegateConfig, name: &str) -> Result<Backend, KeyError> {
        let key = crate::upstream::read_key(cfg, name)?;
        Backend::new(cfg, name, key.as_ref().map(|(v, s)| (v.as_str(), s)))
    }

    /// The backend with `key` (its variable's name, for errors) given directly.
    pub fn new(
        cfg: &DelegateConfig,
        name: &str,
        key: Option<(&str, &Secret)>,
    ) -> Result<Backend, KeyError> {
        let auth = match key {
            Some((var, secret)) => {
                vec![secret_header(name, var, secret, AUTHORIZATION, "Bearer ")?]
            }
            None => Vec::new(),
        };
        let card = cfg.card.as_ref();
        Ok(Backend {
            model: cfg.model.clone().unwrap_or_default(),
            prices: card.map(prices).unwrap_or_default(),
            context_window: card.and_then(|c| c.context_window),
            max_tokens_param: cfg.max_tokens_param,
            auth,
        })
    }
}

/// What a completion produced.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// The assistant's text.
    pub content: String,
    /// The answered message's other fields (`tool_calls`, `function_call`, `refusal`, …) as
    /// they came, but `role`; a stream's are relayed as its deltas instead, and left empty.
    pub other: Map<String, Value>,
    /// The model that answered (the response's `model`; the configured one if it sent none).
    pub model: String,
    /// Token counts, if the delegate reported them.
    pub usage: Option<Usage>,
    /// Why it stopped.
    pub finish_reason: Option<String>,
    /// Bytes of the request sent (what a plausible prompt count is bounded by).
    pub request_bytes: usize,
}

/// What a completion is asked for besides the messages.
#[derive(Debug, Default, Clone, Copy)]
pub struct Params<'a> {
    /// Most output tokens.
    pub max_tokens: Option<u64>,
    /// Most output tokens, by the newer name.
    pub max_completion_tokens: Option<u64>,
    /// The client's other parameters (ingress).
    pub extra: Option<&'a Map<String, Value>>,
    /// Sent in `x-ldp-hops`: the gateways the task passed through, this one included (a
    /// gateway behind this delegate refuses a loop as it would over LDP).
    pub hops: Option<u32>,
    /// The attempt's trace context (`traceparent`, `tracestate`), sent beside it.
    pub trace: &'a [(hyper::header::HeaderName, hyper::header::HeaderValue)],
}

/// What a completion request carries besides its body: the hop count and trace context.
fn forward<'a>(params: &Params<'a>) -> crate::upstream::Forward<'a> {
    crate::upstream::Forward {
        hops: params.hops,
        trace: params.trace,
    }
}

impl Backend {
    fn body<M: Serialize>(
        &self,
        messages: M,
        params: Params<'_>,
        stream: bool,
        url: &str,
    ) -> Result<Bytes, ChatError> {
        let req = UpstreamRequest {
            model: &self.model,
            messages,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            max_tokens: params.max_tokens,
            max_completion_tokens: params.max_completion_tokens,
            extra: params.extra,
        };
        serde_json::to_vec(&req)
            .map(Bytes::from)
            .map_err(|e| ChatError::Malformed {
                url: url.to_owned(),
                reason: format!("request not encoded: {e}"),
            })
    }

    /// `GET {base}/models` answered 2xx within `timeout`: the delegate is up.
    pub async fn check_models(
        &self,
        client: &UpstreamClient,
        base: &str,
        timeout: Duration,
    ) -> Result<(), ChatError> {
        let answer = client
            .request(base, MODELS, None, &self.auth, None.into(), timeout)
            .await?;
        if answer.head.status.is_success() {
            return Ok(());
        }
        Err(status_error(
            format!("{base}{MODELS}"),
            answer.head,
            &answer.body,
        ))
    }

    /// One whole completion of `messages` within `timeout`.
    pub async fn complete<M: Serialize>(
        &self,
        client: &UpstreamClient,
        base: &str,
        messages: M,
        params: Params<'_>,
        timeout: Duration,
    ) -> Result<Reply, ChatError> {
        let url = format!("{base}{CHAT}");
        let body = self.body(messages, params, false, &url)?;
        let request_bytes = body.len();
        let answer = client
            .request(
                base,
                CHAT,
                Some(body),
                &self.auth,
                forward(&params),
                timeout,
            )
            .await?;
        if !answer.head.status.is_success() {
            return Err(status_error(url, answer.head, &answer.body));
        }
        let c: Completion =
            serde_json::from_slice(&answer.body).map_err(|e| ChatError::Malformed {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let Some(choice) = c.choices.into_iter().next() else {
            return Err(ChatError::Malformed {
                url,
                reason: "no choices".into(),
            });
        };
        let (content, other) = match choice.message {
            Some(mut m) => {
                m.rest.remove("role");
                (m.content.unwrap_or_default(), m.rest)
            }
            None => (String::new(), Map::new()),
        };
        Ok(Reply {
            content,
            other,
            model: if c.model.is_empty() {
                self.model.clone()
            } else {
                c.model
            },
            usage: c.usage,
            finish_reason: choice.finish_reason,
            request_bytes,
        })
    }

    /// One streamed completion of `messages`, all within `timeout`: each choice's delta of
    /// each chunk goes to `on_piece` as it comes (awaited, so a slow consumer slows the read;
    /// an empty piece too, so that a consumer gone is noticed), and `used` is kept up to date.
    /// Reading stops, failing the stream, when `on_piece` breaks (nobody listens) or the
    /// stream read (every byte of it) or the answer handed on passes the transport's answer
    /// cap (`used.stopped` says which); a
    /// stream that ends before `[DONE]` or a `finish_reason` is [`ChatError::Broken`], never a
    /// reply.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call, every part of it needed"
    )]
    pub async fn stream<M: Serialize, F, Fut>(
        &self,
        client: &UpstreamClient,
        base: &str,
        messages: M,
        params: Params<'_>,
        timeout: Duration,
        used: &mut Streamed,
        mut on_piece: F,
    ) -> Result<Reply, ChatError>
    where
        F: FnMut(Delta) -> Fut,
        Fut: std::future::Future<Output = ControlFlow<()>>,
    {
        let url = format!("{base}{CHAT}");
        let body = self.body(messages, params, true, &url)?;
        used.request_bytes = body.len();
        let deadline = Instant::now() + timeout;
        let (head, mut events) = client
            .events(base, CHAT, body, &self.auth, forward(&params), timeout)
            .await?;
        if !head.status.is_success() {
            let body = tokio::time::timeout_at(deadline, events.body())
                .await
                .unwrap_or_default();
            return Err(status_error(url, head, &body));
        }
        let mut reply = Reply {
            model: self.model.clone(),
            request_bytes: used.request_bytes,
            ..Reply::default()
        };
        let cap = client.max_response_bytes();
        let mut relayed = false;
        let read = async {
            let broken = |relayed| ChatError::Broken {
                url: url.clone(),
                relayed,
            };
            loop {
                let data = match events.next().await {
                    Ok(Some(d)) => d,
                    Ok(None) if reply.finish_reason.is_some() => return Ok(()),
                    // Every byte of the stream counts against the cap, what no piece carries
                    // (comments, keep-alives, unknown events) too: a stream of nothing but
                    // those stops there as one of text does.
                    Ok(None) => return Err(broken(relayed)),
                    Err(_) => {
                        if let Some(passed) = events.past_cap() {
                            used.stopped = Some(Stopped::Cap(passed));
                            tracing::warn!(url = %url, cap = passed, "a stream passed its cap; stopped reading");
                        }
                        return Err(broken(relayed));
                    }
                };
                if data.trim() == "[DONE]" {
                    return match reply.finish_reason {
                        Some(_) => Ok(()),
                        None => Err(broken(relayed)),
                    };
                }
                // Only a chunk that mentions an error is read as one (chunks never do).
                let error = data
                    .contains("\"error\"")
                    .then(|| serde_json::from_str::<ErrorBody>(&data));
                if let Some(Ok(e)) = error {
                    // An error event mid-stream (some servers send one): the stream failed.
                    tracing::debug!(error = %e.error.message, "error event in an upstream stream");
                    return Err(broken(relayed));
                }
                let chunk: Chunk =
                    serde_json::from_str(&data).map_err(|e| ChatError::Malformed {
                        url: url.clone(),
                        reason: e.to_string(),
                    })?;
                if !chunk.model.is_empty() && reply.model != chunk.model {
                    reply.model = chunk.model;
                }
                if chunk.usage.is_some() {
                    reply.usage = chunk.usage;
                    used.usage = chunk.usage.map(super::neutral);
                }
                for choice in chunk.choices {
                    let piece = choice.delta.map(piece_of).unwrap_or_default();
                    // What is held and handed on: the text, and a tool call's piece as it came.
                    let size = piece.text.len() + piece.native.as_ref().map_or(0, |_| data.len());
                    if used.bytes + size > cap {
                        used.stopped = Some(Stopped::Cap(cap));
                        tracing::warn!(url = %url, cap, "a streamed answer passed the answer cap; stopped reading");
                        return Err(broken(relayed));
                    }
                    used.bytes += size;
                    if !piece.is_empty() {
                        reply.content.push_str(&piece.text);
                        relayed = true;
                    }
                    if on_piece(piece).await.is_break() {
                        used.stopped = Some(Stopped::Unheard);
                        return Err(broken(relayed));
                    }
                    if choice.finish_reason.is_some() {
                        reply.finish_reason = choice.finish_reason;
                    }
                }
            }
        };
        let read = tokio::time::timeout_at(deadline, read).await;
        if matches!(read, Ok(Ok(()))) {
            // The answer is complete; reading the response to its end returns the connection
            // to the pool. Done aside, so the reply does not wait for it.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(DRAIN, async {
                    while let Ok(Some(_)) = events.next().await {}
                })
                .await;
            });
        }
        match read {
            Ok(Ok(())) => Ok(reply),
            Ok(Err(e)) => Err(e),
            Err(_) if relayed => Err(ChatError::Broken { url, relayed }),
            Err(_) => Err(ChatError::Transport(UpstreamError::Timeout {
                url,
                after: timeout,
            })),
        }
    }
}

/// A delta as a piece: its text, its tool-call pieces, and its other fields (but `role` and
/// nulls) as they came.
fn piece_of(d: openai_wire::Delta) -> Delta {
    let mut other = d.rest;
    other.retain(|k, v| k != "role" && !v.is_null());
    Delta {
        text: d.content.unwrap_or_default(),
        tool_calls: chat::openai::delta_tool_calls(&other),
        native: (!other.is_empty()).then_some(Native {
            dialect: Dialect::OpenAi,
            fields: other,
        }),
    }
}

/// A non-2xx answer as a [`ChatError`], with OpenAI's error fields when the body has them.
fn status_error(url: String, head: ldp_client::transport::Head, body: &[u8]) -> ChatError {
    let status = head.status.as_u16();
    let refusal = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => Refusal {
            status,
            message: b.error.message,
            kind: b.error.kind,
            param: b.error.param,
            code: b.error.code,
        },
        Err(_) => Refusal {
            status,
            message: format!("HTTP {status}"),
            kind: None,
            param: None,
            code: None,
        },
    };
    ChatError::Status {
        url,
        retry_after: head.retry_after,
        refusal: Box::new(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DelegateKind;

    #[test]
    fn the_key_is_a_sensitive_header_and_never_printed() {
        let mut cfg = DelegateConfig::new("http://127.0.0.1:1/v1");
        cfg.kind = DelegateKind::OpenAi;
        cfg.model = Some("m".into());
        let secret = Secret::new("sk-very-secret");
        let b = Backend::new(&cfg, "d", Some(("KEY_VAR", &secret))).unwrap();
        assert!(b.auth[0].1.is_sensitive());
        assert_eq!(b.auth[0].1.as_bytes(), b"Bearer sk-very-secret");
        let shown = format!("{b:?}");
        assert!(
            !shown.contains("very-secret") && shown.contains("***"),
            "{shown}"
        );
        let bad = Secret::new("line\nbreak");
        let e = Backend::new(&cfg, "d", Some(("KEY_VAR", &bad))).unwrap_err();
        assert!(!e.to_string().contains("break"), "{e}");
        // An LDP entry has no backend: it is an LDP upstream.
        let ldp = DelegateConfig::new("http://127.0.0.1:1");
        assert!(matches!(
            crate::upstream::Upstream::from_config(&ldp, "x", "http://127.0.0.1:1"),
            Ok(crate::upstream::Upstream::Ldp(_))
        ));
    }
}
