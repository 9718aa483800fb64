//! Calls to an Anthropic-API delegate: `GET {url}/v1/models` (liveness) and
//! `POST {url}/v1/messages`, whole or streamed (named events), through the gateway's one
//! transport (`ldp-client`'s pool, deadlines and size caps), with its key (`x-api-key`, or
//! `Authorization: Bearer`) and `anthropic-version`. Each answer is classified once into a
//! [`Reply`] or a [`ChatError`] that says whether another delegate may be tried.

use crate::chat::{self, anthropic::PieceReader, Delta, Finish, Refusal, Usage};
use crate::config::{AnthropicAuth, DelegateConfig};
use crate::secret::Secret;
use crate::upstream::chat::{ChatError, Stopped, Streamed, DRAIN};
use crate::upstream::declared::{prices, Prices};
use crate::upstream::{secret_header, KeyError, UpstreamClient, UpstreamError};
use anthropic_wire::{
    ErrorBody, MessageResponse, StartedMessage, COUNT_TOKENS_PATH, MESSAGES_PATH, MODELS_PATH,
    VERSION_2023, VERSION_HEADER,
};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION};
use serde::Serialize;
use serde_json::{Map, Value};
use std::ops::ControlFlow;
use std::time::Duration;
use tokio::time::Instant;

/// How the gateway calls one Anthropic delegate.
pub struct Backend {
    /// The upstream model sent with every request.
    pub model: String,
    /// The declared per-token prices (cache reads and writes apart).
    pub prices: Prices,
    /// The declared context window, in tokens.
    pub context_window: Option<u64>,
    /// The key (marked sensitive: never printed), if one is set, and `anthropic-version`.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("model", &self.model)
            .field("prices", &self.prices)
            .field("context_window", &self.context_window)
            .field("api_key", &(self.headers.len() > 1).then_some("***"))
            .finish()
    }
}

impl Backend {
    /// The backend of an entry of kind `anthropic`, its key read from `api_key_env`.
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
        let mut headers = Vec::with_capacity(2);
        if let Some((var, secret)) = key {
            headers.push(match cfg.auth.unwrap_or_default() {
                AnthropicAuth::XApiKey => secret_header(
                    name,
                    var,
                    secret,
                    HeaderName::from_static(anthropic_wire::KEY_HEADER),
                    "",
                )?,
                AnthropicAuth::Bearer => {
                    secret_header(name, var, secret, AUTHORIZATION, "Bearer ")?
                }
            });
        }
        let version = cfg.anthropic_version.as_deref().unwrap_or(VERSION_2023);
        // `check` refuses a version that is no header value; a registration falls back.
        let version = HeaderValue::from_str(version)
            .unwrap_or_else(|_| HeaderValue::from_static(VERSION_2023));
        headers.push((HeaderName::from_static(VERSION_HEADER), version));
        let card = cfg.card.as_ref();
        Ok(Backend {
            model: cfg.model.clone().unwrap_or_default(),
            prices: card.map(prices).unwrap_or_default(),
            context_window: card.and_then(|c| c.context_window),
            headers,
        })
    }
}

/// What a message produced.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// The text of its text blocks.
    pub content: String,
    /// Its content blocks as they came (a stream's are relayed as its events instead, and
    /// left empty).
    pub blocks: Vec<Value>,
    /// The model that answered (the configured one if it named none).
    pub model: String,
    /// Token counts, if the delegate reported them.
    pub usage: Option<Usage>,
    /// Why it stopped.
    pub finish: Option<Finish>,
    /// The stop sequence met, if one was.
    pub stop_sequence: Option<String>,
    /// Bytes of the request sent (what a plausible prompt count is bounded by).
    pub request_bytes: usize,
}

/// What a message request carries besides its messages.
#[derive(Debug, Default, Clone, Copy)]
pub struct Params<'a> {
    /// Most output tokens.
    pub max_tokens: u64,
    /// The system prompt, when it is not among `extra`.
    pub system: Option<&'a Value>,
    /// The client's other parameters (a chat front end's).
    pub extra: Option<&'a Map<String, Value>>,
    /// Headers an Anthropic client sent to be passed on (`anthropic-beta`).
    pub client_headers: &'a [(String, String)],
    /// The hop count and the attempt's trace context.
    pub forward: crate::upstream::Forward<'a>,
}

/// The body sent.
#[derive(Serialize)]
struct Request<'a, M: Serialize> {
    model: &'a str,
    max_tokens: u64,
    messages: M,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a Value>,
    stream: bool,
    #[serde(flatten)]
    extra: Option<&'a Map<String, Value>>,
}

impl Backend {
    fn body<M: Serialize>(
        &self,
        messages: M,
        params: &Params<'_>,
        stream: bool,
        url: &str,
    ) -> Result<Bytes, ChatError> {
        let req = Request {
            model: &self.model,
            max_tokens: params.max_tokens,
            messages,
            system: params.system,
            stream,
            extra: params.extra,
        };
        serde_json::to_vec(&req)
            .map(Bytes::from)
            .map_err(|e| ChatError::Malformed {
                url: url.to_owned(),
                reason: format!("request not encoded: {e}"),
            })
    }

    /// The headers of a request: the key, the version, the client's passed on, each of its
    /// lines (a header that is not one is dropped, as is one that would replace the
    /// gateway's own).
    fn headers(&self, client: &[(String, String)]) -> Vec<(HeaderName, HeaderValue)> {
        let mut h = self.headers.clone();
        let own = h.len();
        for (name, value) in client {
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                continue;
            };
            if !h[..own].iter().any(|(k, _)| *k == n) {
                h.push((n, v));
            }
        }
        h
    }

    /// `GET {base}/v1/models` answered 2xx within `timeout`: the delegate is up.
    pub async fn check_models(
        &self,
        client: &UpstreamClient,
        base: &str,
        timeout: Duration,
    ) -> Result<(), ChatError> {
        let answer = client
            .request(base, MODELS_PATH, None, &self.headers, None.into(), timeout)
            .await?;
        if answer.head.status.is_success() {
            return Ok(());
        }
        Err(status_error(
            format!("{base}{MODELS_PATH}"),
            answer.head,
            &answer.body,
        ))
    }

    /// `POST {base}/v1/messages/count_tokens` of a request's `body` (its model replaced by
    /// this delegate's) with the client's `client_headers` (its `anthropic-beta`) and the
    /// gateways passed so far (`hops`, this one included, for loop protection) within
    /// `timeout`: the input tokens it counts.
    pub async fn count_tokens(
        &self,
        client: &UpstreamClient,
        base: &str,
        mut body: Map<String, Value>,
        client_headers: &[(String, String)],
        hops: u32,
        timeout: Duration,
    ) -> Result<u64, ChatError> {
        let url = format!("{base}{COUNT_TOKENS_PATH}");
        body.insert("model".into(), Value::String(self.model.clone()));
        let bytes = serde_json::to_vec(&body).map_err(|e| ChatError::Malformed {
            url: url.clone(),
            reason: format!("request not encoded: {e}"),
        })?;
        let answer = client
            .request(
                base,
                COUNT_TOKENS_PATH,
                Some(Bytes::from(bytes)),
                &self.headers(client_headers),
                Some(hops).into(),
                timeout,
            )
            .await?;
        if !answer.head.status.is_success() {
            return Err(status_error(url, answer.head, &answer.body));
        }
        serde_json::from_slice::<anthropic_wire::TokenCount>(&answer.body)
            .map(|c| c.input_tokens)
            .map_err(|e| ChatError::Malformed {
                url,
                reason: e.to_string(),
            })
    }

    /// One whole message of `messages` within `timeout`.
    pub async fn complete<M: Serialize>(
        &self,
        client: &UpstreamClient,
        base: &str,
        messages: M,
        params: Params<'_>,
        timeout: Duration,
    ) -> Result<Reply, ChatError> {
        let url = format!("{base}{MESSAGES_PATH}");
        let body = self.body(messages, &params, false, &url)?;
        let request_bytes = body.len();
        let headers = self.headers(params.client_headers);
        let answer = client
            .request(
                base,
                MESSAGES_PATH,
                Some(body),
                &headers,
                params.forward,
                timeout,
            )
            .await?;
        if !answer.head.status.is_success() {
            return Err(status_error(url, answer.head, &answer.body));
        }
        self.whole(url, &answer.body, request_bytes)
    }

    /// A whole message's body read into a [`Reply`].
    fn whole(&self, url: String, body: &[u8], request_bytes: usize) -> Result<Reply, ChatError> {
        let m: MessageResponse =
            serde_json::from_slice(body).map_err(|e| ChatError::Malformed {
                url,
                reason: e.to_string(),
            })?;
        let finish = m
            .stop_reason
            .as_deref()
            .map(|r| chat::anthropic::finish(r, m.stop_sequence.as_deref()));
        Ok(Reply {
            content: chat::anthropic::text(&m.content),
            blocks: m.content,
            model: if m.model.is_empty() {
                self.model.clone()
            } else {
                m.model
            },
            usage: m.usage.map(neutral),
            finish,
            stop_sequence: m.stop_sequence,
            request_bytes,
        })
    }

    /// One streamed message of `messages`, all within `timeout`: each content event goes to
    /// `on_piece` as it comes (awaited, so a slow consumer slows the read), and `used` is kept
    /// up to date. Reading stops, failing the stream, when `on_piece` breaks (nobody listens)
    /// or the stream read or the answer handed on passes the transport's answer cap; a stream
    /// that ends before `message_stop` (or sends an `error` event) is [`ChatError::Broken`].
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
        let url = format!("{base}{MESSAGES_PATH}");
        let body = self.body(messages, &params, true, &url)?;
        used.request_bytes = body.len();
        let deadline = Instant::now() + timeout;
        let headers = self.headers(params.client_headers);
        let (head, mut events) = client
            .events(base, MESSAGES_PATH, body, &headers, params.forward, timeout)
            .await?;
        if !head.status.is_success() {
            let body = tokio::time::timeout_at(deadline, events.body())
                .await
                .unwrap_or_default();
            return Err(status_error(url, head, &body));
        }
        if head.json {
            // A server that does not stream (LiteLLM's mock, some proxies) answers whole, as
            // JSON: its blocks are handed on as the events a stream would have carried.
            let Ok(body) = tokio::time::timeout_at(deadline, events.body()).await else {
                return Err(ChatError::Transport(UpstreamError::Timeout {
                    url,
                    after: timeout,
                }));
            };
            let reply = self.whole(url.clone(), &body, used.request_bytes)?;
            used.usage = reply.usage;
            used.bytes = body.len();
            let mut pieces = PieceReader::default();
            for (index, block) in reply.blocks.iter().enumerate() {
                for (kind, event) in chat::anthropic::block_events(index, block) {
                    if on_piece(pieces.piece(kind, event)).await.is_break() {
                        used.stopped = Some(Stopped::Unheard);
                        return Err(ChatError::Broken { url, relayed: true });
                    }
                }
            }
            return Ok(reply);
        }
        let mut reply = Reply {
            model: self.model.clone(),
            request_bytes: used.request_bytes,
            ..Reply::default()
        };
        let cap = client.max_response_bytes();
        let mut relayed = false;
        let mut pieces = PieceReader::default();
        let mut usage = anthropic_wire::Usage::default();
        let read = async {
            let broken = |relayed| ChatError::Broken {
                url: url.clone(),
                relayed,
            };
            loop {
                let data = match events.next().await {
                    Ok(Some(d)) => d,
                    // Every byte of the stream counts against the cap (`events` counts it).
                    Ok(None) => return Err(broken(relayed)),
                    Err(_) => {
                        if let Some(passed) = events.past_cap() {
                            used.stopped = Some(Stopped::Cap(passed));
                            tracing::warn!(url = %url, cap = passed, "a stream passed its cap; stopped reading");
                        }
                        return Err(broken(relayed));
                    }
                };
                let malformed = |e: serde_json::Error| ChatError::Malformed {
                    url: url.clone(),
                    reason: e.to_string(),
                };
                let Value::Object(event) = serde_json::from_str(&data).map_err(malformed)? else {
                    continue;
                };
                let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "message_start" => {
                        let started = event.get("message").cloned().unwrap_or(Value::Null);
                        let m: StartedMessage =
                            serde_json::from_value(started).map_err(malformed)?;
                        if !m.model.is_empty() {
                            reply.model = m.model;
                        }
                        if let Some(u) = m.usage {
                            usage = u;
                            used.usage = Some(neutral(usage));
                        }
                    }
                    "content_block_start" | "content_block_delta" | "content_block_stop" => {
                        // What is held and handed on: the event whole.
                        if used.bytes + data.len() > cap {
                            used.stopped = Some(Stopped::Cap(cap));
                            tracing::warn!(url = %url, cap, "a streamed answer passed the answer cap; stopped reading");
                            return Err(broken(relayed));
                        }
                        used.bytes += data.len();
                        let kind = kind.to_owned();
                        let piece = pieces.piece(&kind, event);
                        reply.content.push_str(&piece.text);
                        used.written = used.written.saturating_add(
                            piece.text.len()
                                + piece
                                    .tool_calls
                                    .iter()
                                    .map(|c| c.arguments.len())
                                    .sum::<usize>(),
                        );
                        relayed = true;
                        if on_piece(piece).await.is_break() {
                            used.stopped = Some(Stopped::Unheard);
                            return Err(broken(relayed));
                        }
                    }
                    "message_delta" => {
                        let d: anthropic_wire::StreamEvent =
                            serde_json::from_value(Value::Object(event)).map_err(malformed)?;
                        if let anthropic_wire::StreamEvent::MessageDelta { delta, usage: u } = d {
                            if let Some(u) = u {
                                usage = usage.updated(&u);
                                used.usage = Some(neutral(usage));
                            }
                            reply.finish = delta.stop_reason.as_deref().map(|r| {
                                chat::anthropic::finish(r, delta.stop_sequence.as_deref())
                            });
                            reply.stop_sequence = delta.stop_sequence;
                        }
                    }
                    "message_stop" if reply.finish.is_some() => return Ok(()),
                    "message_stop" => return Err(broken(relayed)),
                    "error" => {
                        // An error event mid-stream (`overloaded_error`, …): the stream failed.
                        tracing::debug!(event = %data, "error event in an upstream stream");
                        return Err(broken(relayed));
                    }
                    // `ping`, and what a later version adds.
                    _ => {}
                }
            }
        };
        let read = tokio::time::timeout_at(deadline, read).await;
        if matches!(read, Ok(Ok(()))) {
            // Reading the response to its end returns the connection to the pool; aside.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(DRAIN, async {
                    while let Ok(Some(_)) = events.next().await {}
                })
                .await;
            });
        }
        reply.usage = used.usage;
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

/// The wire's token counts in the pipeline's words (the cache's counted apart, as Anthropic
/// counts them).
pub fn neutral(u: anthropic_wire::Usage) -> Usage {
    Usage::with_cache(
        u.input_tokens,
        u.output_tokens,
        u.cache_read_input_tokens.unwrap_or(0),
        u.cache_creation_input_tokens.unwrap_or(0),
    )
}

/// A non-2xx answer as a [`ChatError`], with Anthropic's error fields when the body has them.
fn status_error(url: String, head: ldp_client::transport::Head, body: &[u8]) -> ChatError {
    let status = head.status.as_u16();
    let (message, kind) = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => (b.error.message, Some(b.error.kind)),
        Err(_) => (format!("HTTP {status}"), None),
    };
    ChatError::Status {
        url,
        retry_after: head.retry_after,
        refusal: Box::new(Refusal {
            status,
            message,
            kind,
            param: None,
            code: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DelegateKind;

    #[test]
    fn the_key_goes_as_configured_marked_sensitive_and_never_printed() {
        let mut cfg = DelegateConfig::new("http://127.0.0.1:1");
        cfg.kind = DelegateKind::Anthropic;
        cfg.model = Some("claude".into());
        let secret = Secret::new("sk-ant-very-secret");
        let b = Backend::new(&cfg, "d", Some(("KEY_VAR", &secret))).unwrap();
        assert_eq!(b.headers[0].0.as_str(), "x-api-key");
        assert!(b.headers[0].1.is_sensitive());
        assert_eq!(b.headers[0].1.as_bytes(), b"sk-ant-very-secret");
        assert_eq!(b.headers[1].1.as_bytes(), VERSION_2023.as_bytes());
        let shown = format!("{b:?}");
        assert!(
            !shown.contains("very-secret") && shown.contains("***"),
            "{shown}"
        );
        cfg.auth = Some(AnthropicAuth::Bearer);
        cfg.anthropic_version = Some("2026-10-21".into());
        let b = Backend::new(&cfg, "d", Some(("KEY_VAR", &secret))).unwrap();
        assert_eq!(b.headers[0].0, AUTHORIZATION);
        assert_eq!(b.headers[0].1.as_bytes(), b"Bearer sk-ant-very-secret");
        assert_eq!(b.headers[1].1.as_bytes(), b"2026-10-21");
        // A client's beta header is passed on, each of its lines; one naming the key or
        // version is not.
        let h = b.headers(&[
            ("anthropic-beta".into(), "prompt-caching-2024-07-31".into()),
            ("anthropic-version".into(), "1999-01-01".into()),
            ("authorization".into(), "Bearer sk-client".into()),
            ("bad header".into(), "x".into()),
            (
                "anthropic-beta".into(),
                "interleaved-thinking-2025-05-14".into(),
            ),
        ]);
        assert_eq!(h.len(), 4);
        assert_eq!(h[2].1.as_bytes(), b"prompt-caching-2024-07-31");
        assert_eq!(h[3].1.as_bytes(), b"interleaved-thinking-2025-05-14");
    }

    #[test]
    fn a_2xx_body_that_is_no_message_is_malformed() {
        let mut cfg = DelegateConfig::new("http://127.0.0.1:1");
        cfg.kind = DelegateKind::Anthropic;
        cfg.model = Some("claude".into());
        let b = Backend::new(&cfg, "d", None).unwrap();
        for body in [
            "{}",
            r#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
            r#"{"choices":[{"message":{"content":"hi"}}]}"#,
        ] {
            assert!(
                matches!(
                    b.whole("u".into(), body.as_bytes(), 0),
                    Err(ChatError::Malformed { .. })
                ),
                "{body}"
            );
        }
        let empty = b
            .whole("u".into(), br#"{"content":[],"stop_reason":"end_turn"}"#, 0)
            .unwrap();
        assert!(empty.blocks.is_empty() && empty.content.is_empty());
    }

    #[test]
    fn cache_counts_stay_apart_from_input() {
        let u: anthropic_wire::Usage = serde_json::from_value(serde_json::json!({
            "input_tokens": 10, "output_tokens": 5,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}))
        .unwrap();
        let n = neutral(u);
        assert_eq!(
            (n.input_tokens, n.cache_read_tokens, n.cache_write_tokens),
            (10, 100, 20)
        );
        assert_eq!((n.prompt_tokens(), n.total_tokens), (130, 135));
    }
}
