//! Calls to an A2A agent through the gateway's one transport (`ldp-client`'s pool, deadlines
//! and answer cap): its Agent Card (`GET /.well-known/agent-card.json`, else the v0.3
//! `/.well-known/agent.json`), and JSON-RPC `SendMessage` and `CancelTask` (`message/send`,
//! `tasks/cancel` to an agent whose card speaks only 0.3). Every answer is read within the
//! cap and classified once; nothing an agent sends can panic the gateway.

use crate::config::DeclaredCard;
use crate::upstream::{Forward, UpstreamClient, UpstreamError};
use a2a_wire::consts::{
    AGENT_CARD_PATH, BINDING_JSONRPC, LEGACY_AGENT_CARD_PATH, PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
};
use a2a_wire::{v03, v1, AgentCard, Dialect, Method, Request, Response};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Duration;

/// Where and how an agent is called: the JSON-RPC URL and the protocol version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The JSON-RPC URL: the configured origin, with the path and query of the card's
    /// interface URL resolved against the configured URL.
    pub url: String,
    /// 1.0, or 0.3 for an agent whose card offers no 1.0 JSON-RPC interface.
    pub dialect: Dialect,
    /// Whether its card says it streams (`capabilities.streaming`).
    pub streaming: bool,
}

/// Why an Agent Card gives no endpoint the gateway will call: the delegate's card is
/// unusable (the delegate is marked down and not routed to).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// No JSON-RPC interface of A2A 1.0 or 0.3.
    #[error("the Agent Card offers no JSON-RPC interface of A2A 1.0 or 0.3")]
    NoInterface,
    /// The configured URL is not one `url` reads (config checks make this unreachable).
    #[error("the configured URL is not a URL: {0}")]
    Base(url::ParseError),
    /// The interface URL is no URL reference.
    #[error("the Agent Card's JSON-RPC interface URL {url:?} is not a URL reference: {reason}")]
    Unreadable {
        /// The card's URL (cut, credentials masked).
        url: String,
        /// Why.
        reason: url::ParseError,
    },
    /// The interface URL, resolved against the configured one, has another scheme, host or
    /// port: calling it would send the task and the agent's key elsewhere.
    #[error(
        "the Agent Card's JSON-RPC interface URL {url:?} resolves to {resolved}, not the \
         configured {configured}: the gateway calls only the origin it was pointed at"
    )]
    OffOrigin {
        /// The card's URL (cut, credentials masked).
        url: String,
        /// The origin it resolves to.
        resolved: String,
        /// The configured origin.
        configured: String,
    },
}

/// Most bytes of an agent's interface URL quoted in an error.
const SHOWN_URL_BYTES: usize = 256;

impl Endpoint {
    /// The JSON-RPC interface of `card` (a 1.0 one first, else a 0.3 one) for an agent
    /// configured at `base`. The interface URL is resolved as a URL reference (RFC 3986 §5,
    /// as WHATWG's URL parser does it) against `base` taken as a directory (`{base}/`, where
    /// the agent's card lives): `/rpc` and `rpc` are on the configured origin, an absolute
    /// URL is itself. A result whose scheme, host or port is not `base`'s is refused: a card
    /// cannot move the gateway's calls, the task and the agent's key, to another host or
    /// port. The call goes to `base`'s origin as configured, with the resolved path and query.
    pub fn of(card: &AgentCard, base: &str) -> Result<Endpoint, EndpointError> {
        let (interface, dialect) = [Dialect::V1, Dialect::V03]
            .into_iter()
            .find_map(|d| card.interface(BINDING_JSONRPC, d).map(|i| (i, d)))
            .ok_or(EndpointError::NoInterface)?;
        let configured = url::Url::parse(&format!("{}/", base.trim_end_matches('/')))
            .map_err(EndpointError::Base)?;
        let shown = || {
            let masked = ldp_client::masked_url(&interface.url);
            crate::ldp::text::cut(&masked, SHOWN_URL_BYTES).to_owned()
        };
        let resolved =
            configured
                .join(interface.url.trim())
                .map_err(|reason| EndpointError::Unreadable {
                    url: shown(),
                    reason,
                })?;
        if resolved.origin() != configured.origin() {
            return Err(EndpointError::OffOrigin {
                url: shown(),
                resolved: resolved.origin().ascii_serialization(),
                configured: configured.origin().ascii_serialization(),
            });
        }
        let mut path = resolved.path().trim_end_matches('/').to_owned();
        if let Some(query) = resolved.query() {
            path.push('?');
            path.push_str(query);
        }
        Ok(Endpoint {
            url: format!("{}{path}", origin(base)),
            dialect,
            streaming: card.streaming(),
        })
    }

    /// The `A2A-Version` the calls carry.
    fn version(&self) -> &'static str {
        match self.dialect {
            Dialect::V1 => PROTOCOL_VERSION_1_0,
            Dialect::V03 => PROTOCOL_VERSION_0_3,
        }
    }
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// How the gateway calls one A2A agent, and where, as its last card said.
pub struct Agent {
    /// What the operator declared (`[delegates.card]`).
    pub declared: Option<DeclaredCard>,
    /// `Authorization: Bearer <key>` (marked sensitive: never printed), if a key is set.
    auth: Vec<(HeaderName, HeaderValue)>,
    /// Where the last card said to call it (`None` before the first card).
    endpoint: ArcSwapOption<Endpoint>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("endpoint", &self.endpoint.load_full())
            .field("api_key", &(!self.auth.is_empty()).then_some("***"))
            .finish()
    }
}

/// Why a call to an A2A agent failed.
#[derive(Debug, thiserror::Error)]
pub enum A2aCallError {
    /// The exchange failed (no connection, no answer in time, a non-2xx status, an answer
    /// past the cap or not JSON-RPC).
    #[error(transparent)]
    Transport(#[from] UpstreamError),
    /// The agent answered with a JSON-RPC error.
    #[error("{url} answered JSON-RPC error {code}: {message}")]
    Rpc {
        /// Where.
        url: String,
        /// The error's code.
        code: i64,
        /// Its message (at most 512 bytes of it).
        message: String,
    },
}

/// What an agent answered a message with.
#[derive(Debug)]
pub enum Reply {
    /// A task (in whichever state).
    Task(Box<v1::Task>),
    /// A message straight back (no task).
    Message(Box<v1::Message>),
}

/// The first 512 bytes (at a character boundary) of an agent's words.
fn short(s: &str) -> String {
    crate::ldp::text::cut(s, 512).to_owned()
}

impl Agent {
    /// The agent of the entry `cfg` (named `name`), its key read from `api_key_env`.
    pub fn from_config(
        cfg: &crate::config::DelegateConfig,
        name: &str,
    ) -> Result<Agent, crate::upstream::KeyError> {
        use crate::upstream::KeyError;
        let key = crate::upstream::read_key(cfg, name)?.map(|(_, secret)| secret);
        Agent::new(cfg.card.clone(), key.as_ref()).map_err(|_| KeyError::BadKey {
            delegate: name.to_owned(),
            var: cfg.api_key_env.clone().unwrap_or_default(),
        })
    }

    /// The agent of an entry, with `key` as its bearer token if given.
    pub fn new(
        declared: Option<DeclaredCard>,
        key: Option<&crate::secret::Secret>,
    ) -> Result<Agent, hyper::header::InvalidHeaderValue> {
        let mut auth = Vec::new();
        if let Some(secret) = key {
            let bearer = [b"Bearer ".as_slice(), secret.expose()].concat();
            let mut value = HeaderValue::from_bytes(&bearer)?;
            value.set_sensitive(true);
            auth.push((hyper::header::AUTHORIZATION, value));
        }
        Ok(Agent {
            declared,
            auth,
            endpoint: ArcSwapOption::empty(),
        })
    }

    /// Where to call it now (`None` before its first card).
    pub fn endpoint(&self) -> Option<Arc<Endpoint>> {
        self.endpoint.load_full()
    }

    /// Records where its card says to call it.
    pub fn set_endpoint(&self, e: Endpoint) {
        if self.endpoint.load().as_deref() != Some(&e) {
            self.endpoint.store(Some(Arc::new(e)));
        }
    }

    /// The Agent Card at `base` within `timeout`: `/.well-known/agent-card.json`, else (any
    /// failure there) the v0.3 `/.well-known/agent.json`.
    pub async fn fetch_card(
        &self,
        client: &UpstreamClient,
        base: &str,
        timeout: Duration,
    ) -> Result<AgentCard, UpstreamError> {
        match self.card_at(client, base, AGENT_CARD_PATH, timeout).await {
            Ok(card) => Ok(card),
            Err(first) => match self
                .card_at(client, base, LEGACY_AGENT_CARD_PATH, timeout)
                .await
            {
                Ok(card) => Ok(card),
                Err(_) => Err(first),
            },
        }
    }

    async fn card_at(
        &self,
        client: &UpstreamClient,
        base: &str,
        path: &'static str,
        timeout: Duration,
    ) -> Result<AgentCard, UpstreamError> {
        let url = format!("{base}{path}");
        let mut headers = self.auth.clone();
        headers.push((
            HeaderName::from_static("a2a-version"),
            HeaderValue::from_static(PROTOCOL_VERSION_1_0),
        ));
        let answer = client
            .request(base, path, None, &headers, None.into(), timeout)
            .await?;
        if !answer.head.status.is_success() {
            return Err(UpstreamError::Status {
                url,
                status: answer.head.status.as_u16(),
                error: None,
            });
        }
        // Read within the answer cap; kept only within `[discovery] max_card_bytes`.
        let max = client.card_limits().max_bytes;
        if answer.body.len() > max {
            return Err(UpstreamError::Malformed {
                url,
                reason: format!("an Agent Card larger than {max} bytes"),
            });
        }
        serde_json::from_slice(&answer.body).map_err(|e| UpstreamError::Malformed {
            url,
            reason: format!("not an Agent Card: {e}"),
        })
    }

    /// Sends `message` (`SendMessage`, or `message/send` in 0.3) to `at` and reads the
    /// answer within `timeout`; `forward` (hops, trace context) as for every forwarded task.
    pub async fn send(
        &self,
        client: &UpstreamClient,
        at: &Endpoint,
        message: v1::Message,
        forward: Forward<'_>,
        timeout: Duration,
    ) -> Result<Reply, A2aCallError> {
        let id = message.message_id.clone();
        let params = send_params(at, message);
        let raw = self
            .rpc(
                client,
                at,
                &id,
                Method::SendMessage,
                params,
                forward,
                timeout,
            )
            .await?;
        let bad = |e: serde_json::Error| UpstreamError::Malformed {
            url: at.url.clone(),
            reason: format!("not a SendMessage result: {e}"),
        };
        Ok(match at.dialect {
            Dialect::V1 => match serde_json::from_str(raw.get()).map_err(bad)? {
                v1::SendMessageResponse::Task(t) => Reply::Task(t),
                v1::SendMessageResponse::Message(m) => Reply::Message(m),
            },
            Dialect::V03 => match serde_json::from_str(raw.get()).map_err(bad)? {
                v03::SendMessageResult::Task(t) => Reply::Task(Box::new((*t).into())),
                v03::SendMessageResult::Message(m) => Reply::Message(Box::new((*m).into())),
            },
        })
    }

    /// Sends `message` as `SendStreamingMessage` (`message/stream` in 0.3) to `at` and reads
    /// its events within `timeout`: the agent's task id goes to `task_id` as soon as it is
    /// named (for a cancel), each status message's and artifact's text to `on_text`; the
    /// task is built from the events (artifacts appended or replaced as they say) up to its
    /// terminal or interrupted state, or the message the agent answered with. The stream
    /// read, every byte of it (comments and events skipped included), stays within the
    /// transport's answer cap, and so does what is held.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call, every part of it needed"
    )]
    pub async fn stream(
        &self,
        client: &UpstreamClient,
        at: &Endpoint,
        message: v1::Message,
        forward: Forward<'_>,
        timeout: Duration,
        task_id: &std::sync::OnceLock<String>,
        mut on_text: impl FnMut(&str),
    ) -> Result<Reply, A2aCallError> {
        let url = at.url.clone();
        let malformed = |reason: String| UpstreamError::Malformed {
            url: url.clone(),
            reason,
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let id = message.message_id.clone();
        let params =
            send_params(at, message).map_err(|e| malformed(format!("request not encoded: {e}")))?;
        let name = Method::SendStreamingMessage
            .name(at.dialect)
            .unwrap_or(a2a_wire::method::SEND_STREAMING_MESSAGE);
        let body = serde_json::to_vec(&Request::new(id, name, params))
            .map_err(|e| malformed(format!("request not encoded: {e}")))?;
        let path = if origin(&at.url) == at.url { "/" } else { "" };
        let headers = self.headers(at);
        let (head, mut events) = client
            .events(&at.url, path, Bytes::from(body), &headers, forward, timeout)
            .await?;
        if !head.status.is_success() {
            return Err(UpstreamError::Status {
                url,
                status: head.status.as_u16(),
                error: None,
            }
            .into());
        }
        let cap = client.max_response_bytes();
        let read = async {
            let mut task: Option<v1::Task> = None;
            let mut held = 0usize;
            loop {
                let Some(data) = events.next().await? else {
                    return task.map(|t| Reply::Task(Box::new(t))).ok_or_else(|| {
                        malformed("the stream ended before a task or message".into()).into()
                    });
                };
                held += data.len();
                if held > cap {
                    return Err(malformed(format!("a streamed answer past {cap} bytes")).into());
                }
                let response: Response = serde_json::from_str(&data)
                    .map_err(|e| malformed(format!("not a JSON-RPC response: {e}")))?;
                let result = match response.outcome() {
                    Some(Ok(r)) => r,
                    Some(Err(e)) => {
                        return Err(A2aCallError::Rpc {
                            url: url.clone(),
                            code: e.code,
                            message: short(&e.message),
                        })
                    }
                    None => {
                        return Err(
                            malformed("an event with neither result nor error".into()).into()
                        )
                    }
                };
                let event: v1::StreamResponse = match at.dialect {
                    Dialect::V1 => serde_json::from_str(result.get()),
                    Dialect::V03 => {
                        serde_json::from_str::<v03::StreamResult>(result.get()).map(Into::into)
                    }
                }
                .map_err(|e| malformed(format!("not a stream event: {e}")))?;
                match event {
                    v1::StreamResponse::Message(m) => return Ok(Reply::Message(m)),
                    v1::StreamResponse::Task(t) => {
                        let _ = task_id.set(t.id.clone());
                        task = Some(*t);
                    }
                    v1::StreamResponse::StatusUpdate(u) => {
                        let _ = task_id.set(u.task_id.clone());
                        if let Some(m) = &u.status.message {
                            m.parts
                                .iter()
                                .filter_map(v1::Part::as_text)
                                .for_each(&mut on_text);
                        }
                        let t = task.get_or_insert_with(|| empty_task(&u.task_id, &u.context_id));
                        t.status = u.status;
                    }
                    v1::StreamResponse::ArtifactUpdate(u) => {
                        let _ = task_id.set(u.task_id.clone());
                        u.artifact
                            .parts
                            .iter()
                            .filter_map(v1::Part::as_text)
                            .for_each(&mut on_text);
                        let t = task.get_or_insert_with(|| empty_task(&u.task_id, &u.context_id));
                        match t
                            .artifacts
                            .iter_mut()
                            .find(|a| a.artifact_id == u.artifact.artifact_id)
                        {
                            Some(a) if u.append => a.parts.extend(u.artifact.parts),
                            Some(a) => *a = u.artifact,
                            None => t.artifacts.push(u.artifact),
                        }
                    }
                }
                let ended = |t: &mut v1::Task| {
                    t.status.state.is_terminal() || t.status.state.is_interrupted()
                };
                if let Some(t) = task.take_if(ended) {
                    return Ok(Reply::Task(Box::new(t)));
                }
            }
        };
        match tokio::time::timeout_at(deadline, read).await {
            Ok(r) => r,
            Err(_) => Err(UpstreamError::Timeout {
                url: at.url.clone(),
                after: timeout,
            }
            .into()),
        }
    }

    /// The headers of every call: the key, and `A2A-Version`.
    fn headers(&self, at: &Endpoint) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = self.auth.clone();
        headers.push((
            HeaderName::from_static("a2a-version"),
            HeaderValue::from_static(at.version()),
        ));
        headers
    }

    /// Asks the agent to cancel its task `task_id` (`CancelTask`, `tasks/cancel` in 0.3)
    /// within `timeout`; its answer (the task, or an error such as TaskNotCancelable) is not
    /// read further.
    pub async fn cancel(
        &self,
        client: &UpstreamClient,
        at: &Endpoint,
        task_id: &str,
        timeout: Duration,
    ) -> Result<(), A2aCallError> {
        let request = v1::CancelTaskRequest {
            tenant: String::new(),
            id: task_id.to_owned(),
            metadata: None,
            rest: Default::default(),
        };
        let params = match at.dialect {
            Dialect::V1 => serde_json::to_value(request),
            Dialect::V03 => serde_json::to_value(v03::TaskIdParams::from(request)),
        };
        let id = crate::ldp::new_id();
        self.rpc(
            client,
            at,
            &id,
            Method::CancelTask,
            params,
            None.into(),
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// One JSON-RPC call: `method` in `at`'s dialect with `params`, `A2A-Version` and the
    /// key; the `result`, or the error the agent answered.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call, every part of it needed"
    )]
    async fn rpc(
        &self,
        client: &UpstreamClient,
        at: &Endpoint,
        id: &str,
        method: Method,
        params: serde_json::Result<serde_json::Value>,
        forward: Forward<'_>,
        timeout: Duration,
    ) -> Result<Box<RawValue>, A2aCallError> {
        let url = at.url.clone();
        let malformed = |reason: String| UpstreamError::Malformed {
            url: url.clone(),
            reason,
        };
        let name = method
            .name(at.dialect)
            .ok_or_else(|| malformed(format!("{method:?} has no name in {:?}", at.dialect)))?;
        let params = params.map_err(|e| malformed(format!("request not encoded: {e}")))?;
        let body = serde_json::to_vec(&Request::new(id.to_owned(), name, params))
            .map_err(|e| malformed(format!("request not encoded: {e}")))?;
        let headers = self.headers(at);
        // The transport joins a base and a path: an agent at its origin's root is POSTed
        // `/`, one at `/rpc` is the base `…/rpc` with no more path.
        let path = if origin(&at.url) == at.url { "/" } else { "" };
        let answer = client
            .request(
                &at.url,
                path,
                Some(Bytes::from(body)),
                &headers,
                forward,
                timeout,
            )
            .await?;
        if !answer.head.status.is_success() {
            return Err(UpstreamError::Status {
                url,
                status: answer.head.status.as_u16(),
                error: None,
            }
            .into());
        }
        let response: Response = serde_json::from_slice(&answer.body)
            .map_err(|e| malformed(format!("not a JSON-RPC response: {e}")))?;
        match response.outcome() {
            Some(Ok(result)) => Ok(result),
            Some(Err(e)) => Err(A2aCallError::Rpc {
                url,
                code: e.code,
                message: short(&e.message),
            }),
            None => {
                Err(malformed("a JSON-RPC response with neither result nor error".into()).into())
            }
        }
    }
}

/// The params of `SendMessage`/`SendStreamingMessage` carrying `message`, in `at`'s dialect.
fn send_params(at: &Endpoint, message: v1::Message) -> serde_json::Result<serde_json::Value> {
    let request = v1::SendMessageRequest {
        tenant: String::new(),
        message,
        configuration: None,
        metadata: None,
        rest: Default::default(),
    };
    match at.dialect {
        Dialect::V1 => serde_json::to_value(request),
        Dialect::V03 => serde_json::to_value(v03::MessageSendParams::from(request)),
    }
}

/// A task known only by the events about it.
fn empty_task(id: &str, context_id: &str) -> v1::Task {
    v1::Task {
        id: id.to_owned(),
        context_id: context_id.to_owned(),
        status: v1::TaskStatus::new(v1::TaskState::Unspecified),
        artifacts: Vec::new(),
        history: Vec::new(),
        metadata: None,
        rest: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(interface_url: &str) -> AgentCard {
        serde_json::from_value(json!({"name": "a", "supportedInterfaces": [
            {"url": interface_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}))
        .unwrap()
    }

    fn url_of(interface_url: &str, base: &str) -> Result<String, EndpointError> {
        Endpoint::of(&card(interface_url), base).map(|e| e.url)
    }

    #[test]
    fn the_endpoint_is_the_interface_on_the_configured_origin() {
        let v1: AgentCard = serde_json::from_value(json!({"name": "a",
            "supportedInterfaces": [
                {"url": "http://10.0.0.9:9999/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "http://127.0.0.1:5000/a2a/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                {"url": "http://127.0.0.1:5000/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}))
        .unwrap();
        assert_eq!(
            Endpoint::of(&v1, "http://127.0.0.1:5000"),
            Ok(Endpoint {
                url: "http://127.0.0.1:5000/rpc".into(),
                dialect: Dialect::V1,
                streaming: false,
            })
        );
        let old: AgentCard = serde_json::from_value(json!({"name": "a",
            "url": "https://h:8/", "protocolVersion": "0.3.0"}))
        .unwrap();
        assert_eq!(
            Endpoint::of(&old, "https://h:8/base"),
            Ok(Endpoint {
                url: "https://h:8".into(),
                dialect: Dialect::V03,
                streaming: false,
            })
        );
        let none: AgentCard = serde_json::from_value(json!({"name": "a"})).unwrap();
        assert_eq!(
            Endpoint::of(&none, "http://h"),
            Err(EndpointError::NoInterface)
        );
        assert_eq!(short(&"é".repeat(400)).len(), 512);
    }

    #[test]
    fn an_interface_url_is_resolved_as_a_reference_and_never_leaves_the_origin() {
        let base = "http://127.0.0.1:19130";
        // References on the configured origin: a path, a relative path (under the
        // configured URL), an absolute URL of the same origin (default port spelled out).
        for (reference, want) in [
            ("/rpc", "http://127.0.0.1:19130/rpc"),
            ("0/rpc", "http://127.0.0.1:19130/0/rpc"),
            ("rpc?x=1#frag", "http://127.0.0.1:19130/rpc?x=1"),
            (":19420/steal", "http://127.0.0.1:19130/:19420/steal"),
            ("./a/../b/", "http://127.0.0.1:19130/b"),
            ("", "http://127.0.0.1:19130"),
            ("HTTP://127.0.0.1:19130/up", "http://127.0.0.1:19130/up"),
            (
                "http://user:pw@127.0.0.1:19130/x",
                "http://127.0.0.1:19130/x",
            ),
        ] {
            assert_eq!(url_of(reference, base).as_deref(), Ok(want), "{reference}");
        }
        assert_eq!(
            url_of("rpc", "http://h/agents/a").as_deref(),
            Ok("http://h/agents/a/rpc")
        );
        assert_eq!(
            url_of("http://h:80/x", "http://h").as_deref(),
            Ok("http://h/x")
        );
        // Anything that leaves it: another port, host or scheme, a network-path reference,
        // a scheme the gateway does not call.
        for reference in [
            "http://127.0.0.1:19420/steal",
            "http://10.0.0.9:19130/rpc",
            "https://127.0.0.1:19130/rpc",
            "//evil.example:19130/rpc",
            "//127.0.0.1:19420/rpc",
            "ldp://127.0.0.1:19130/rpc",
            "file:///etc/passwd",
        ] {
            assert!(
                matches!(
                    url_of(reference, base),
                    Err(EndpointError::OffOrigin { .. })
                ),
                "{reference}: {:?}",
                url_of(reference, base)
            );
        }
        // An agent configured without a port: `:PORT` never becomes its port, nor `h:PORT`
        // a host.
        assert_eq!(
            url_of(":19420/steal", "http://agent").as_deref(),
            Ok("http://agent/:19420/steal")
        );
        assert!(matches!(
            url_of("evil.example:19420/steal", "http://agent"),
            Err(EndpointError::OffOrigin { .. })
        ));
        assert!(matches!(
            url_of("http://[::1", base),
            Err(EndpointError::Unreadable { .. })
        ));
        let e = url_of("http://u:hunter2@evil.example/", base).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let long = format!("http://evil.example/{}", "x".repeat(10_000));
        assert!(url_of(&long, base).unwrap_err().to_string().len() < 600);
    }
}
