//! The adapter of seed `001_…`: to its caller, [`Adapter::invoke`] is request → response. Inside,
//! it reads the delegate's card, checks the trust domain requirement, opens the session
//! (HELLO → SESSION_PROPOSE → SESSION_ACCEPT, payload mode negotiated), caches it per
//! (endpoint, session config), re-establishes it once when the delegate has forgotten it, and
//! closes it when idle, on [`Adapter::close`], or (in the background) when the adapter is
//! dropped.

use crate::transport::Transport;
use crate::{base_url, Error, Secret};
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION};
use ldp_wire::{
    Body, DelegationContract, Envelope, IdentityCard, Json, PayloadMode, Provenance, SessionConfig,
    SessionId, TaskId, TrustViolation,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

mod sessions;
mod stream;
mod tasks;

use sessions::{Open, Sessions};
pub use stream::{Event, TaskStream};
pub use tasks::TaskState;
use tasks::Tasks;

/// How an [`Adapter`] identifies itself and what it allows. Every field has a default.
#[derive(Debug, Clone)]
pub struct Config {
    /// The id sent as `from` (a delegate id, `ldp:delegate:…`).
    pub from: String,
    /// This client's own trust domain, sent with every session proposal.
    pub trust_domain: String,
    /// Refuse, before any session, a delegate whose trust domain is not this one.
    pub required_trust_domain: Option<String>,
    /// Payload modes and TTL proposed for sessions.
    pub session: SessionConfig,
    /// Sent as `Authorization: Bearer …` (a gateway's API key).
    pub api_key: Option<Secret>,
    /// Signs every message (the reference HMAC) when set.
    pub signing_secret: Option<Secret>,
    /// Sent as `x-ldp-policy` (a gateway's routing policy).
    pub policy: Option<String>,
    /// The deadline of every call: a card fetch, each handshake step, a task, a stream.
    pub deadline: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// A cached session unused this long is closed (sooner if the session's TTL is shorter).
    pub session_idle: Duration,
    /// Most sessions cached at once; the least recently used is closed past it.
    pub max_sessions: usize,
    /// Most task records kept for [`Adapter::status`]; the oldest finished go first.
    pub max_tasks: usize,
    /// Updates a [`TaskStream`] buffers before reading from the delegate waits for the caller.
    pub stream_buffer: usize,
    /// Largest answer read.
    pub max_response_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            from: "ldp:delegate:ldp-client".into(),
            trust_domain: "default".into(),
            required_trust_domain: None,
            session: SessionConfig::default(),
            api_key: None,
            signing_secret: None,
            policy: None,
            deadline: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            session_idle: Duration::from_secs(300),
            max_sessions: 64,
            max_tasks: 1024,
            stream_buffer: 16,
            max_response_bytes: crate::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// A task to run: a skill, its input, and optionally a contract and its own session config.
#[derive(Debug, Clone)]
pub struct Task {
    /// The skill.
    pub skill: String,
    /// Its input.
    pub input: Value,
    /// A delegation contract (deadline, budget).
    pub contract: Option<DelegationContract>,
    /// A session config other than the adapter's (a session is cached per config).
    pub session: Option<SessionConfig>,
}

impl Task {
    /// A task for `skill` with `input`.
    pub fn new(skill: impl Into<String>, input: Value) -> Task {
        Task {
            skill: skill.into(),
            input,
            contract: None,
            session: None,
        }
    }
}

/// A delegate's card as [`Adapter::discover`] read it.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The base URL it was read from.
    pub url: String,
    /// The card.
    pub card: IdentityCard,
    /// Its RFC §9.1 `ldp.*` labels.
    pub labels: BTreeMap<String, String>,
    /// Why [`Adapter::invoke`] would refuse this delegate, if it would.
    pub untrusted: Option<TrustViolation>,
}

/// A completed task.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The task's id.
    pub task_id: TaskId,
    /// The output, with the provenance beside it under `ldp_provenance` (an object output
    /// gains the key; any other is wrapped as `{"result": …, "ldp_provenance": …}`).
    pub output: Value,
    /// The provenance record (every conformant delegate sends one; `None` if this one did not,
    /// and then `output` has no `ldp_provenance` either).
    pub provenance: Option<Provenance>,
    /// Who answered (`from` of the result).
    pub answered_by: String,
    /// The payload mode of the answer.
    pub payload_mode: PayloadMode,
    /// From submission to answer.
    pub elapsed: Duration,
}

/// The LDP client adapter. Cheap to clone: clones share sessions, task records and the
/// connection pool.
#[derive(Clone)]
pub struct Adapter {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    config: Config,
    sessions: Sessions,
    tasks: Tasks,
}

impl Adapter {
    /// An adapter with `config`. Fails only on an API key or policy that cannot be an HTTP
    /// header value. Within a Tokio runtime it also starts the sweep that closes idle sessions.
    pub fn new(config: Config) -> Result<Adapter, Error> {
        let mut transport =
            Transport::new(config.from.clone(), config.connect_timeout, config.deadline);
        transport.set_max_response_bytes(config.max_response_bytes);
        let mut headers = Vec::new();
        if let Some(key) = &config.api_key {
            let bearer = [b"Bearer ".as_slice(), key.expose()].concat();
            let mut value = HeaderValue::from_bytes(&bearer).map_err(|_| Error::Config {
                reason: "the API key is not a valid header value".into(),
            })?;
            // Never printed by `Debug`, never compressed into an HPACK table.
            value.set_sensitive(true);
            headers.push((AUTHORIZATION, value));
        }
        if let Some(policy) = &config.policy {
            let value = HeaderValue::from_str(policy).map_err(|_| Error::Config {
                reason: format!("policy {policy:?} is not a valid header value"),
            })?;
            headers.push((HeaderName::from_static("x-ldp-policy"), value));
        }
        transport.set_headers(headers);
        if let Some(secret) = &config.signing_secret {
            transport.sign_all(secret.clone());
        }
        let inner = Arc::new(Inner {
            sessions: Sessions::new(config.max_sessions),
            tasks: Tasks::new(config.max_tasks),
            transport,
            config,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&inner)));
        }
        Ok(Adapter { inner })
    }

    /// The transport underneath (its pool, limits and error classification).
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    /// Reads the card at `url`: its capabilities, `ldp.*` labels, and whether
    /// [`Adapter::invoke`] would refuse it. Opens no session.
    pub async fn discover(&self, url: &str) -> Result<Discovery, Error> {
        let base = base_url(url)?;
        let card = self
            .inner
            .transport
            .fetch_card(&base, self.inner.config.deadline)
            .await?;
        Ok(Discovery {
            labels: card.labels(),
            untrusted: trust(&card, self.inner.config.required_trust_domain.as_deref()).err(),
            card,
            url: base,
        })
    }

    /// Submits `task` to `url` and returns its handle at once; the session is opened first
    /// if none is cached (so a trust refusal or a rejected session is this call's error).
    pub async fn invoke(&self, url: &str, task: Task) -> Result<TaskHandle, Error> {
        let (base, config, open) = self.prepare(url, &task).await?;
        let task_id = TaskId::from(ldp_wire::new_id());
        let inner = self.inner.clone();
        let id = task_id.clone();
        let stopped = self.inner.tasks.submitted(&task_id, &base, &open);
        let join = tokio::spawn(async move {
            let result = tokio::select! {
                result = inner.run(&base, &config, open, &id, task, None) => result,
                Ok(()) = stopped => Err(Error::Cancelled { task_id: id.clone() }),
            };
            inner.tasks.finished(&id, result)
        });
        Ok(TaskHandle { task_id, join })
    }

    /// [`Adapter::invoke`] and wait for its result.
    pub async fn call(&self, url: &str, task: Task) -> Result<Outcome, Error> {
        self.invoke(url, task).await?.result().await
    }

    /// Submits `task` to `url` on the endpoint's stream (`/ldp/stream`) and returns the
    /// updates as they come, ending in the result. At most `stream_buffer` updates wait for
    /// the caller; past that the delegate's stream is read no further until the caller reads.
    /// An endpoint without a stream route answers as [`Adapter::invoke`] would: the stream is
    /// then the result alone.
    pub async fn stream(&self, url: &str, task: Task) -> Result<TaskStream, Error> {
        let (base, config, open) = self.prepare(url, &task).await?;
        let task_id = TaskId::from(ldp_wire::new_id());
        let (tx, rx) = tokio::sync::mpsc::channel(self.inner.config.stream_buffer.max(1));
        let inner = self.inner.clone();
        let id = task_id.clone();
        let stopped = self.inner.tasks.submitted(&task_id, &base, &open);
        tokio::spawn(async move {
            let result = tokio::select! {
                result = inner.run(&base, &config, open, &id, task, Some(&tx)) => result,
                Ok(()) = stopped => Err(Error::Cancelled { task_id: id.clone() }),
            };
            let last = match inner.tasks.finished(&id, result) {
                Ok(outcome) => Event::Completed(Box::new(outcome)),
                Err(e) => Event::Failed(e),
            };
            let _ = tx.send(last).await;
        });
        Ok(TaskStream::new(task_id, rx))
    }

    /// Where a task submitted through this adapter stands, from the adapter's own record.
    pub fn status(&self, task_id: &TaskId) -> Result<TaskState, Error> {
        self.inner
            .tasks
            .state(task_id)
            .ok_or_else(|| Error::UnknownTask {
                task_id: task_id.clone(),
            })
    }

    /// Cancels a task: it is marked cancelled, TASK_CANCEL goes to the delegate in the task's
    /// session, then its wait ends ([`TaskHandle::result`] is [`Error::Cancelled`], a stream
    /// ends with `Event::Failed(Error::Cancelled)`). The TASK_CANCEL goes first so that it
    /// reaches the task while the delegate still runs it. A task already finished stays as
    /// it was.
    pub async fn cancel(&self, task_id: &TaskId) -> Result<(), Error> {
        let Some(target) = self.inner.tasks.cancel(task_id) else {
            return match self.inner.tasks.state(task_id) {
                Some(_) => Ok(()),
                None => Err(Error::UnknownTask {
                    task_id: task_id.clone(),
                }),
            };
        };
        let cancel = Envelope::new(
            target.session_id.as_str(),
            self.inner.config.from.as_str(),
            target.delegate_id.as_str(),
            Body::TaskCancel {
                task_id: task_id.clone(),
            },
            PayloadMode::Text,
        );
        let sent = self
            .inner
            .transport
            .send(&target.base, &cancel, self.inner.config.deadline)
            .await
            .map(drop);
        // Dropped (here, or with this future), it ends the task's wait.
        drop(target.stop);
        sent
    }

    /// Closes every cached session (SESSION_CLOSE) and waits for the answers. A program about
    /// to end calls it: the close on drop runs in the background and dies with the runtime.
    /// The adapter stays usable; the next task opens a new session.
    pub async fn close(&self) {
        for open in self.inner.sessions.take_all() {
            self.inner
                .transport
                .close_session(&open.base, &open.session)
                .await;
        }
    }

    /// The base URL, session config and open session for a task to `url`.
    async fn prepare(
        &self,
        url: &str,
        task: &Task,
    ) -> Result<(String, SessionConfig, Open), Error> {
        let base = base_url(url)?;
        let config = self.inner.session_config(task);
        let open = self.inner.session(&base, &config, None).await?;
        Ok((base, config, open))
    }
}

/// A submitted task: its id, and its result to wait for.
#[derive(Debug)]
pub struct TaskHandle {
    task_id: TaskId,
    join: tokio::task::JoinHandle<Result<Outcome, Error>>,
}

impl TaskHandle {
    /// The task's id (for [`Adapter::status`] and [`Adapter::cancel`]).
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// Waits for the result. A task cancelled meanwhile is [`Error::Cancelled`].
    pub async fn result(self) -> Result<Outcome, Error> {
        match self.join.await {
            Ok(result) => result,
            Err(_) => Err(Error::Cancelled {
                task_id: self.task_id,
            }),
        }
    }
}

impl Inner {
    /// The session config for `task`: its own, or the adapter's, with this client's domain
    /// and requirement filled in.
    fn session_config(&self, task: &Task) -> SessionConfig {
        let mut config = task
            .session
            .clone()
            .unwrap_or_else(|| self.config.session.clone());
        if config.trust_domain.is_none() {
            config.trust_domain = Some(self.config.trust_domain.clone());
        }
        if config.required_trust_domain.is_none() {
            config.required_trust_domain = self.config.required_trust_domain.clone();
        }
        config
    }

    /// The cached session for (`base`, `config`), or a new one: card read, trust checked,
    /// handshake done. Concurrent callers for the same key share one handshake. A cached
    /// session `stale` (the delegate has forgotten it) is dropped, not handed out.
    async fn session(
        &self,
        base: &str,
        config: &SessionConfig,
        stale: Option<&SessionId>,
    ) -> Result<Open, Error> {
        let idle = self.config.session_idle;
        let (slot, evicted) = self.sessions.slot(base, config);
        for old in evicted {
            self.transport.close_session(&old.base, &old.session).await;
        }
        let mut guard = slot.lock().await;
        if guard
            .as_ref()
            .is_some_and(|open| Some(&open.session.session_id) == stale)
        {
            *guard = None;
        }
        if let Some(open) = guard.as_mut() {
            if !open.expired(idle) {
                open.last_used = Instant::now();
                return Ok(open.clone());
            }
            let old = open.clone();
            *guard = None;
            self.transport.close_session(&old.base, &old.session).await;
        }
        let card = self
            .transport
            .fetch_card(base, self.config.deadline)
            .await?;
        let required = config.required_trust_domain.as_deref();
        trust(&card, required).map_err(|violation| Error::Untrusted {
            url: base.to_owned(),
            violation,
        })?;
        let session = self
            .transport
            .open_session(base, &card, config.clone())
            .await?;
        let open = Open::new(base, session, config.ttl_secs);
        *guard = Some(open.clone());
        Ok(open)
    }

    /// TASK_SUBMIT in `open`, once more in a new session if the delegate forgot this one.
    /// With `updates`, on the endpoint's stream, every TASK_UPDATE sent there (awaited:
    /// backpressure); an endpoint without a stream route gets one plain exchange instead.
    async fn run(
        &self,
        base: &str,
        config: &SessionConfig,
        open: Open,
        task_id: &TaskId,
        task: Task,
        updates: Option<&tokio::sync::mpsc::Sender<Event>>,
    ) -> Result<Outcome, Error> {
        let started = Instant::now();
        let input = Json::from_value(&task.input);
        let mut open = open;
        let mut updates = updates;
        let mut renewed = false;
        loop {
            self.tasks.running(task_id, &open);
            let submit = self.submit_envelope(&open, task_id, &task, input.clone());
            let answer = match updates {
                Some(tx) => {
                    let relay = |update: Envelope| async move {
                        if let Body::TaskUpdate {
                            progress, message, ..
                        } = update.body
                        {
                            let _ = tx.send(Event::Progress { progress, message }).await;
                        }
                    };
                    let streamed = self
                        .transport
                        .send_stream(base, &submit, self.config.deadline, None.into(), relay)
                        .await;
                    match streamed {
                        // No stream route here: the task was not taken; one plain exchange.
                        Err(Error::Status {
                            status: 404 | 405, ..
                        }) => {
                            updates = None;
                            continue;
                        }
                        other => other?,
                    }
                }
                None => {
                    self.transport
                        .send(base, &submit, self.config.deadline)
                        .await?
                }
            };
            match self.settle(answer, task_id, started) {
                Err(Error::Failed { error }) if !renewed && forgot_session(&error) => {
                    renewed = true;
                    let stale = open.session.session_id.clone();
                    open = self.session(base, config, Some(&stale)).await?;
                }
                settled => return settled,
            }
        }
    }

    fn submit_envelope(&self, open: &Open, task_id: &TaskId, task: &Task, input: Json) -> Envelope {
        Envelope::new(
            open.session.session_id.as_str(),
            self.config.from.as_str(),
            open.session.delegate_id.as_str(),
            Body::TaskSubmit {
                task_id: task_id.clone(),
                skill: task.skill.clone(),
                input,
                contract: task.contract.clone(),
            },
            open.session.payload.mode,
        )
    }

    /// The answer to a TASK_SUBMIT as an outcome or an error.
    fn settle(
        &self,
        answer: Envelope,
        task_id: &TaskId,
        started: Instant,
    ) -> Result<Outcome, Error> {
        match answer.body {
            Body::TaskResult {
                output, provenance, ..
            } => {
                let output = output.to_value().unwrap_or(Value::Null);
                Ok(Outcome {
                    task_id: task_id.clone(),
                    output: match &provenance {
                        Some(p) => with_provenance(output, p),
                        None => output,
                    },
                    provenance,
                    answered_by: answer.from,
                    payload_mode: answer.payload_mode,
                    elapsed: started.elapsed(),
                })
            }
            Body::TaskFailed { error, .. } => Err(Error::Failed {
                error: Box::new(error),
            }),
            other => Err(Error::Unexpected {
                url: answer.from,
                got: other.message_type().as_str(),
            }),
        }
    }
}

/// The RFC §7.2 check 1 made before any session: the delegate is in the `required` domain.
/// (Checks 2 and 3 are the delegate's to make, on our proposal.)
fn trust(card: &IdentityCard, required: Option<&str>) -> Result<(), TrustViolation> {
    match required {
        Some(required) if required != card.trust_domain.name => {
            Err(TrustViolation::RequiredDomainMismatch {
                required: required.to_owned(),
                actual: card.trust_domain.name.clone(),
            })
        }
        _ => Ok(()),
    }
}

/// Whether a TASK_FAILED says the delegate no longer knows the session (expired, restarted).
fn forgot_session(error: &ldp_wire::LdpError) -> bool {
    matches!(
        error.code.as_str(),
        "SESSION_NOT_FOUND" | "SESSION_EXPIRED" | "UNKNOWN_SESSION"
    )
}

/// `output` with `provenance` beside it, as seed `001_…` puts it (`ldp_provenance`).
fn with_provenance(output: Value, provenance: &Provenance) -> Value {
    let record = serde_json::to_value(provenance).unwrap_or(Value::Null);
    match output {
        Value::Object(mut map) => {
            map.insert("ldp_provenance".into(), record);
            Value::Object(map)
        }
        other => serde_json::json!({ "result": other, "ldp_provenance": record }),
    }
}

/// Closes sessions idle past their time, until the adapter is dropped.
async fn sweep(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(i) => (i.config.session_idle / 2).max(Duration::from_secs(1)),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let transport = strong.transport.clone();
        let expired = strong.sessions.take_expired(strong.config.session_idle);
        drop(strong);
        for open in expired {
            transport.close_session(&open.base, &open.session).await;
        }
    }
}

impl Drop for Inner {
    /// Closes every cached session (in the background, when a runtime is there to run it).
    fn drop(&mut self) {
        let open = self.sessions.take_all();
        if open.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let transport = self.transport.clone();
            runtime.spawn(async move {
                for o in open {
                    transport.close_session(&o.base, &o.session).await;
                }
            });
        }
    }
}
