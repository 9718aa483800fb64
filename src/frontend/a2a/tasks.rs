//! The A2A bridge's memory: each tenant's tasks (their last snapshot and the events of those
//! still running) and contexts (the gateway session each `contextId` runs in), each a
//! tenant-fair table ([`crate::fair`]) weighed in bytes: a tenant over its share forgets its
//! oldest finished tasks and its least recently used contexts first; a running task is never
//! forgotten.
//!
//! Cluster mode: the same tables in front of the shared ones (`crate::state::a2a_store`), the
//! async methods here (`open`, `bind`, `change`, `read`, `follow`, `stop`) reading and writing
//! both: the replica running a task writes each change of it to Redis (telling subscribers on
//! other replicas), any replica reads a task it does not run from Redis, follows it through
//! the bus, and cancels it there (the replica running it hears of the cancel and stops).

use crate::config::A2aConfig;
use crate::fair::{
    json_in_memory, json_map_in_memory, Changed, FairTable, Kept, Refused, TableStats,
};
use crate::ldp::SessionId;
use crate::state::a2a_store::SharedA2a;
use crate::state::bus::Note;
use crate::state::StoreError;
use a2a_wire::v1::{Artifact, Message, Part, PartContent, StreamResponse, Task, TaskState};
use a2a_wire::Map;
use dashmap::DashMap;
use std::mem::size_of;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Contexts kept per tenant at most, whatever they weigh: each holds a session, which the
/// tenant's session cap counts (the least recently used is forgotten first: its next task
/// opens a new session, so its affinity and conversation start afresh).
pub const MAX_CONTEXTS_PER_TENANT: usize = 1024;
/// Events buffered per task for a listener that is behind (it then skips to the latest).
const EVENTS_BUFFERED: usize = 64;

/// One task: its last snapshot, the session it runs in, its events (none once it ended).
struct Entry {
    task: Task,
    session: Option<SessionId>,
    events: Option<broadcast::Sender<StreamResponse>>,
}

impl Kept<String> for Entry {
    /// Its snapshot (output, history, metadata), its session id and, while it runs, its
    /// events' buffer.
    fn weight(&self, id: &String) -> usize {
        let events = self
            .events
            .as_ref()
            .map_or(0, |_| EVENTS_BUFFERED * size_of::<StreamResponse>());
        size_of::<Entry>()
            + id.len()
            + task_weight(&self.task)
            + self.session.as_ref().map_or(0, |s| s.len())
            + events
    }

    fn running(&self) -> bool {
        !self.task.status.state.is_terminal()
    }
}

/// A context: the session its tasks run in (none yet).
struct Context {
    session: Option<SessionId>,
}

impl Kept<String> for Context {
    fn weight(&self, id: &String) -> usize {
        id.len() + self.session.as_ref().map_or(0, |s| s.len())
    }
}

/// About how many bytes of memory a task's snapshot holds beyond its own slot: its messages',
/// artifacts' and parts' slots, its strings, and its JSON as it sits in memory
/// ([`json_in_memory`]: the provenance under its metadata is a tree of small maps, several
/// times its text).
pub fn task_weight(t: &Task) -> usize {
    let map = |m: &Option<Map>| m.as_ref().map_or(0, json_map_in_memory);
    let messages = |ms: &[Message]| {
        ms.iter()
            .map(|m| size_of::<Message>() + message_weight(m))
            .sum::<usize>()
    };
    let artifacts: usize = t
        .artifacts
        .iter()
        .map(|a| {
            size_of::<Artifact>()
                + a.artifact_id.len()
                + a.name.len()
                + a.description.len()
                + parts_weight(&a.parts)
                + map(&a.metadata)
                + strings(&a.extensions)
                + json_map_in_memory(&a.rest)
        })
        .sum();
    t.id.len()
        + t.context_id.len()
        + t.status.message.as_ref().map_or(0, message_weight)
        + json_map_in_memory(&t.status.rest)
        + artifacts
        + messages(&t.history)
        + map(&t.metadata)
        + json_map_in_memory(&t.rest)
}

/// What a message holds beyond its own slot.
fn message_weight(m: &Message) -> usize {
    m.message_id.len()
        + m.context_id.len()
        + m.task_id.len()
        + parts_weight(&m.parts)
        + m.metadata.as_ref().map_or(0, json_map_in_memory)
        + strings(&m.extensions)
        + strings(&m.reference_task_ids)
        + json_map_in_memory(&m.rest)
}

/// What a list of strings holds: their slots and bytes.
fn strings(list: &[String]) -> usize {
    list.iter().map(|s| size_of::<String>() + s.len()).sum()
}

/// What parts hold, their slots included.
fn parts_weight(parts: &[Part]) -> usize {
    parts
        .iter()
        .map(|p| {
            let content = match &p.content {
                PartContent::Text(s) | PartContent::Raw(s) | PartContent::Url(s) => s.len(),
                PartContent::Data(v) => json_in_memory(v),
            };
            size_of::<Part>()
                + content
                + p.filename.len()
                + p.media_type.len()
                + p.metadata.as_ref().map_or(0, json_map_in_memory)
                + json_map_in_memory(&p.rest)
        })
        .sum()
}

/// The bridge's per-process state.
pub struct A2aState {
    tasks: FairTable<String, Entry>,
    contexts: FairTable<String, Context>,
    shared: Option<Shared>,
}

/// Cluster mode: the shared tables, and the listeners on this replica of tasks run by others.
struct Shared {
    store: SharedA2a,
    /// Keyed by tenant and task id; an entry lives while a listener does (and its task runs).
    remote: DashMap<(String, String), broadcast::Sender<StreamResponse>>,
}

/// A task as stored in Redis: its snapshot and the session it runs in.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    task: Task,
    session: Option<String>,
}

impl Default for A2aState {
    fn default() -> Self {
        A2aState::new(&A2aConfig::default())
    }
}

/// What [`A2aState::cancel`] found.
pub enum Cancel {
    /// Marked canceled: its snapshot, and the session to cancel it in (when it started).
    Canceled(Box<Task>, Option<SessionId>),
    /// Already in a terminal state.
    Terminal(TaskState),
    /// No such task of the tenant's.
    NotFound,
}

impl A2aState {
    /// The tables `config` bounds (`max_task_bytes`, `max_context_bytes`).
    pub fn new(config: &A2aConfig) -> A2aState {
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        A2aState {
            tasks: FairTable::new(bytes(config.max_task_bytes), None),
            contexts: FairTable::new(bytes(config.max_context_bytes), None)
                .with_max_entries(MAX_CONTEXTS_PER_TENANT),
            shared: None,
        }
    }

    /// The same tables in front of `store` (cluster mode), or alone.
    pub fn with_shared(mut self, store: Option<SharedA2a>) -> A2aState {
        self.shared = store.map(|store| Shared {
            store,
            remote: DashMap::new(),
        });
        self
    }

    /// Cluster mode: the events other replicas tell of their tasks, for [`A2aState::heard`].
    pub fn shared_events(&self) -> Option<broadcast::Receiver<Arc<Note>>> {
        self.shared.as_ref().map(|s| s.store.events())
    }

    /// `tenant`'s task `id` and its session, as this replica holds them.
    fn entry(&self, tenant: &str, id: &str) -> Option<Stored> {
        self.tasks.get(tenant, id, |e| Stored {
            task: e.task.clone(),
            session: e.session.as_ref().map(|s| s.as_str().to_owned()),
        })
    }

    /// Cluster mode: writes this replica's snapshot of `tenant`'s task `id` to the shared
    /// table and tells its subscribers `event`. False when the shared task ended meanwhile
    /// (canceled on another replica: this replica's copy then takes its end).
    async fn share(&self, tenant: &str, id: &str, events: &[StreamResponse]) -> bool {
        let Some(shared) = &self.shared else {
            return true;
        };
        let Some(stored) = self.entry(tenant, id) else {
            return true;
        };
        let running = !stored.task.status.state.is_terminal();
        let (json, events) = match (serde_json::to_vec(&stored), serde_json::to_value(events)) {
            (Ok(j), Ok(e)) => (j, e),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "an A2A task was not shared: it did not serialise");
                return true;
            }
        };
        match shared
            .store
            .put_task(tenant, id, running, &json, Some(&events))
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                // Ended elsewhere: take the shared end here too.
                if let Ok(Some(t)) = self.read_shared(shared, tenant, id).await {
                    let ev = StreamResponse::Task(Box::new(t.clone()));
                    self.update(tenant, id, |mine| *mine = t, Some(ev));
                }
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, task_id = %id, "an A2A task change was not shared: the shared state did not answer");
                true
            }
        }
    }

    async fn read_shared(
        &self,
        shared: &Shared,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Task>, StoreError> {
        let Some(snap) = shared.store.get_task(tenant, id).await? else {
            return Ok(None);
        };
        let stored: Stored = serde_json::from_slice(&snap.json)
            .map_err(|e| StoreError::Redis(format!("a stored A2A task: {e}")))?;
        Ok(Some(stored.task))
    }

    /// [`A2aState::insert`], and in cluster mode: the context's session from the shared
    /// table when this replica has none, the task shared.
    pub async fn open(&self, tenant: &str, task: Task) -> Result<Inserted, Refused> {
        let (id, context) = (task.id.clone(), task.context_id.clone());
        let mut inserted = self.insert(tenant, task)?;
        if let Some(shared) = &self.shared {
            if inserted.session.is_none() {
                match shared.store.get_context(tenant, &context).await {
                    Ok(Some(s)) => {
                        let s = SessionId::from(s);
                        self.set_session(tenant, &context, &id, &s);
                        inserted.session = Some(s);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "an A2A context's session was not read: the task runs in a new one");
                    }
                }
            }
            self.share(tenant, &id, &[]).await;
        }
        Ok(inserted)
    }

    /// [`A2aState::set_session`], and in cluster mode the context's session shared when it
    /// is `new` (not the one the context had).
    pub async fn bind(
        &self,
        tenant: &str,
        context: &str,
        id: &str,
        session: &SessionId,
        new: bool,
    ) {
        self.set_session(tenant, context, id, session);
        if let (Some(shared), true) = (&self.shared, new) {
            if let Err(e) = shared
                .store
                .put_context(tenant, context, session.as_str())
                .await
            {
                tracing::warn!(error = %e, "an A2A context's session was not shared");
            }
        }
    }

    /// [`A2aState::update`], and in cluster mode the change shared (with its event).
    /// Whether it was applied (not: the task ended, here or on another replica).
    pub async fn change(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task),
        event: Option<StreamResponse>,
    ) -> bool {
        self.change_told(tenant, id, change, event.into_iter().collect())
            .await
    }

    /// [`A2aState::change`] telling `events` in order (one change shared in one round trip).
    pub async fn change_told(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task),
        events: Vec<StreamResponse>,
    ) -> bool {
        let shared_events = if self.shared.is_some() {
            events.clone()
        } else {
            Vec::new()
        };
        if !self.update_told(tenant, id, change, events) {
            return false;
        }
        self.share(tenant, id, &shared_events).await
    }

    /// The snapshot of `tenant`'s task `id`: this replica's, else (cluster mode) the shared one.
    pub async fn read(&self, tenant: &str, id: &str) -> Result<Option<Task>, StoreError> {
        if let Some(t) = self.get(tenant, id) {
            return Ok(Some(t));
        }
        match &self.shared {
            Some(shared) => self.read_shared(shared, tenant, id).await,
            None => Ok(None),
        }
    }

    /// [`A2aState::subscribe`], else (cluster mode) the shared snapshot and a listener of the
    /// events the replica running it tells.
    pub async fn follow(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<(Task, Option<broadcast::Receiver<StreamResponse>>)>, StoreError> {
        if let Some(found) = self.subscribe(tenant, id) {
            return Ok(Some(found));
        }
        let Some(shared) = &self.shared else {
            return Ok(None);
        };
        // Listening before reading: no event falls between the snapshot and the listener.
        shared.remote.retain(|_, tx| tx.receiver_count() > 0);
        let key = (tenant.to_owned(), id.to_owned());
        let rx = shared
            .remote
            .entry(key.clone())
            .or_insert_with(|| broadcast::channel(EVENTS_BUFFERED).0)
            .subscribe();
        let task = self.read_shared(shared, tenant, id).await;
        match task {
            Ok(Some(t)) if !t.status.state.is_terminal() => Ok(Some((t, Some(rx)))),
            other => {
                drop(rx);
                shared
                    .remote
                    .remove_if(&key, |_, tx| tx.receiver_count() == 0);
                other.map(|t| t.map(|t| (t, None)))
            }
        }
    }

    /// [`A2aState::cancel`], else (cluster mode) the shared task marked canceled (unless it
    /// ended) and its subscribers told; the caller then cancels it where it runs.
    pub async fn stop(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task) -> StreamResponse,
    ) -> Result<Cancel, StoreError> {
        let Some(shared) = &self.shared else {
            return Ok(self.cancel(tenant, id, change));
        };
        if self.get(tenant, id).is_some() {
            let mut event = None;
            let canceled = self.cancel(tenant, id, |t| {
                let ev = change(t);
                event = Some(ev.clone());
                ev
            });
            if let Cancel::Canceled(..) = canceled {
                let events: Vec<StreamResponse> = event.into_iter().collect();
                self.share(tenant, id, &events).await;
            }
            return Ok(canceled);
        }
        let Some(snap) = shared.store.get_task(tenant, id).await? else {
            return Ok(Cancel::NotFound);
        };
        let mut stored: Stored = serde_json::from_slice(&snap.json)
            .map_err(|e| StoreError::Redis(format!("a stored A2A task: {e}")))?;
        if stored.task.status.state.is_terminal() {
            return Ok(Cancel::Terminal(stored.task.status.state));
        }
        let event = change(&mut stored.task);
        let json = serde_json::to_vec(&stored).map_err(|e| StoreError::Redis(e.to_string()))?;
        let event = serde_json::to_value(&event).map_err(|e| StoreError::Redis(e.to_string()))?;
        let events = serde_json::Value::Array(vec![event.clone()]);
        if !shared
            .store
            .put_task(tenant, id, false, &json, Some(&events))
            .await?
        {
            // It ended meanwhile: as it ended.
            let state = self
                .read_shared(shared, tenant, id)
                .await?
                .map_or(TaskState::Canceled, |t| t.status.state);
            return Ok(Cancel::Terminal(state));
        }
        // This replica's own listeners of it hear it too.
        self.heard_event(tenant, id, event);
        Ok(Cancel::Canceled(
            Box::new(stored.task),
            stored.session.map(SessionId::from),
        ))
    }

    /// Cluster mode: the events another replica told of a task (`{"tenant", "task",
    /// "events"}`): to this replica's listeners of it; an end (another replica's cancel) also
    /// ends this replica's copy of a task it runs.
    pub fn heard(&self, note: &Note) {
        let (Some(tenant), Some(id), Some(events)) = (
            note.body.get("tenant").and_then(|v| v.as_str()),
            note.body.get("task").and_then(|v| v.as_str()),
            note.body.get("events").and_then(|v| v.as_array()),
        ) else {
            return;
        };
        for event in events {
            self.heard_event(tenant, id, event.clone());
        }
    }

    fn heard_event(&self, tenant: &str, id: &str, event: serde_json::Value) {
        let Ok(ev) = serde_json::from_value::<StreamResponse>(event) else {
            return;
        };
        let last = super::is_final(&ev);
        if last {
            if let StreamResponse::StatusUpdate(u) = &ev {
                let status = u.status.clone();
                self.update(tenant, id, |t| t.status = status, Some(ev.clone()));
            }
        }
        let Some(shared) = &self.shared else { return };
        let key = (tenant.to_owned(), id.to_owned());
        if let Some(tx) = shared.remote.get(&key) {
            let _ = tx.send(ev);
        }
        if last {
            // The stream ends: its listeners get what was sent, then the end.
            shared.remote.remove(&key);
        }
    }

    /// Adds `task` for `tenant` and touches its context; answers a listener of its events,
    /// the context's session, if any, and the sessions of contexts forgotten to make room
    /// (the caller closes them: a context's session lives no longer than the context).
    /// Refused when the tenant's share of the tasks is full of running ones.
    pub fn insert(&self, tenant: &str, task: Task) -> Result<Inserted, Refused> {
        let (events, rx) = broadcast::channel(EVENTS_BUFFERED);
        let id = task.id.clone();
        let context = task.context_id.clone();
        let entry = Entry {
            task,
            session: None,
            events: Some(events),
        };
        let mut entry = Some(entry);
        let made = || entry.take().map(|e| (id.clone(), e));
        // A task id is the gateway's own (a new one each message): never one that exists.
        let evicted_tasks = match self.tasks.change(tenant, id.as_str(), made, |_| ()) {
            Changed::Kept((), evicted) => evicted,
            Changed::Refused(refused, _) => return Err(refused),
            Changed::Absent => Vec::new(),
        };
        drop(evicted_tasks);
        let made = || Some((context.clone(), Context { session: None }));
        let (session, evicted) = match self
            .contexts
            .change(tenant, context.as_str(), made, |c| c.session.clone())
        {
            Changed::Kept(session, evicted) => (session, evicted),
            // A context entry is a few hundred bytes: refused only past a tenant's share
            // of a table too small to be useful; the task runs in a new session.
            Changed::Refused(_, evicted) => (None, evicted),
            Changed::Absent => (None, Vec::new()),
        };
        Ok(Inserted {
            events: rx,
            session,
            evicted: evicted.into_iter().filter_map(|c| c.session).collect(),
        })
    }

    /// The snapshot of `tenant`'s task `id`.
    pub fn get(&self, tenant: &str, id: &str) -> Option<Task> {
        self.tasks.get(tenant, id, |e| e.task.clone())
    }

    /// The snapshot of `tenant`'s task `id` and a listener of its next events (taken
    /// together: no event falls between them); `None` in place of the listener once the
    /// task ended.
    pub fn subscribe(
        &self,
        tenant: &str,
        id: &str,
    ) -> Option<(Task, Option<broadcast::Receiver<StreamResponse>>)> {
        self.tasks.get(tenant, id, |e| {
            (e.task.clone(), e.events.as_ref().map(|tx| tx.subscribe()))
        })
    }

    /// Records the session `context` (and task `id`, when given) runs in.
    pub fn set_session(&self, tenant: &str, context: &str, id: &str, session: &SessionId) {
        let _ = self
            .tasks
            .change(tenant, id, || None, |e| e.session = Some(session.clone()));
        let _ = self.contexts.change(
            tenant,
            context,
            || None,
            |c| c.session = Some(session.clone()),
        );
    }

    /// Applies `change` to task `id`'s snapshot and sends `event` to its listeners, unless
    /// the task is already terminal (a canceled task keeps its state) or forgotten. Answers
    /// whether it was applied. A change that ends the task closes its events (its listeners
    /// get what was sent, then the end).
    pub fn update(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task),
        event: Option<StreamResponse>,
    ) -> bool {
        self.update_told(tenant, id, change, event.into_iter().collect())
    }

    /// [`A2aState::update`] telling `events`, in order.
    fn update_told(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task),
        events: Vec<StreamResponse>,
    ) -> bool {
        let applied = self.tasks.change(
            tenant,
            id,
            || None,
            |e| {
                if e.task.status.state.is_terminal() {
                    return false;
                }
                change(&mut e.task);
                if let Some(tx) = &e.events {
                    for ev in events {
                        let _ = tx.send(ev);
                    }
                }
                if e.task.status.state.is_terminal() {
                    e.events = None;
                }
                true
            },
        );
        matches!(applied, Changed::Kept(true, _))
    }

    /// Marks `tenant`'s task `id` canceled (telling its listeners with `event(task)`) unless
    /// it is terminal.
    pub fn cancel(
        &self,
        tenant: &str,
        id: &str,
        change: impl FnOnce(&mut Task) -> StreamResponse,
    ) -> Cancel {
        let canceled = self.tasks.change(
            tenant,
            id,
            || None,
            |e| {
                if e.task.status.state.is_terminal() {
                    return Cancel::Terminal(e.task.status.state.clone());
                }
                let ev = change(&mut e.task);
                if let Some(tx) = e.events.take() {
                    let _ = tx.send(ev);
                }
                Cancel::Canceled(Box::new(e.task.clone()), e.session.clone())
            },
        );
        match canceled {
            Changed::Kept(c, _) => c,
            Changed::Absent | Changed::Refused(..) => Cancel::NotFound,
        }
    }

    /// The tables' figures (their metrics): the tasks', then the contexts'.
    pub fn stats(&self) -> (TableStats, TableStats) {
        (self.tasks.stats(), self.contexts.stats())
    }
}

/// What [`A2aState::insert`] answers.
pub struct Inserted {
    /// A listener of the task's events.
    pub events: broadcast::Receiver<StreamResponse>,
    /// The session its context runs in, if it has one yet.
    pub session: Option<SessionId>,
    /// The sessions of the contexts forgotten to make room, for the caller to close.
    pub evicted: Vec<SessionId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a_wire::v1::TaskStatus;

    fn task(id: &str, context: &str) -> Task {
        Task {
            id: id.into(),
            context_id: context.into(),
            status: TaskStatus::new(TaskState::Submitted),
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
            rest: Default::default(),
        }
    }

    /// The provenance under a task's metadata is a tree of small maps: weighed by its text
    /// (about 12 bytes an entry here), a table of such tasks held several times its bound.
    #[test]
    fn a_tasks_weight_counts_its_metadata_as_it_sits_in_memory() {
        let mut t = task("t", "c");
        let entries: Map = (0..200)
            .map(|i| (format!("k{i}"), serde_json::json!({ "n": i })))
            .collect();
        let text = serde_json::to_string(&entries).unwrap().len();
        t.metadata = Some(entries);
        let per_entry = 2 * (size_of::<String>() + size_of::<serde_json::Value>());
        let weight = task_weight(&t);
        assert!(
            weight >= 200 * per_entry,
            "{weight} bytes for 200 nested entries"
        );
        assert!(
            weight > 3 * text,
            "{weight} against its {text} bytes of text"
        );
    }

    fn done_with(output: usize) -> impl FnOnce(&mut Task) {
        move |t: &mut Task| {
            t.artifacts = vec![a2a_wire::v1::Artifact {
                artifact_id: "out".into(),
                name: String::new(),
                description: String::new(),
                parts: vec![Part::text("x".repeat(output))],
                metadata: None,
                extensions: Vec::new(),
                rest: Map::new(),
            }];
            t.status = TaskStatus::new(TaskState::Completed);
        }
    }

    fn small() -> A2aState {
        A2aState::new(&A2aConfig {
            max_task_bytes: 1 << 20,
            max_context_bytes: 64 * 1024,
            ..A2aConfig::default()
        })
    }

    #[test]
    fn tasks_are_weighed_and_a_flood_evicts_only_its_own() {
        let s = small();
        s.insert("quiet", task("mine", "c")).unwrap();
        assert!(s.update("quiet", "mine", done_with(10_000), None));
        for i in 0..200 {
            let id = format!("t{i}");
            s.insert("flood", task(&id, &format!("c{i}"))).unwrap();
            assert!(s.update("flood", &id, done_with(100_000), None));
        }
        let (tasks, _) = s.stats();
        assert!(tasks.bytes_over_share + tasks.bytes_within_share <= 1 << 20);
        assert!(s.get("quiet", "mine").is_some());
        assert!(s.get("flood", "t199").is_some());
        assert!(s.get("flood", "t0").is_none());
        assert!(s.get("flood", "mine").is_none(), "tenants apart");
    }

    #[test]
    fn running_tasks_are_kept_and_a_share_full_of_them_refuses_more() {
        let s = small();
        let mut kept = Vec::new();
        for i in 0..10_000 {
            let id = format!("t{i}");
            match s.insert("flood", task(&id, "c")) {
                Ok(_) => kept.push(id),
                Err(_) => break,
            }
        }
        assert!(kept.len() < 10_000, "refused once its share was full");
        for id in &kept {
            assert!(s.get("flood", id).is_some(), "{id} forgotten while running");
        }
        // Another tenant is still taken.
        assert!(s.insert("quiet", task("mine", "c")).is_ok());
    }

    #[test]
    fn contexts_are_capped_per_tenant_and_give_back_their_sessions() {
        let s = A2aState::default();
        let mut closed = Vec::new();
        for i in 0..MAX_CONTEXTS_PER_TENANT + 5 {
            let (id, ctx) = (format!("t{i}"), format!("c{i}"));
            let ins = s.insert("a", task(&id, &ctx)).unwrap();
            closed.extend(ins.evicted);
            s.set_session("a", &ctx, &id, &SessionId::from(format!("s{i}")));
        }
        let (_, contexts) = s.stats();
        assert_eq!(contexts.tenants, 1);
        let names: Vec<&str> = closed.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ["s0", "s1", "s2", "s3", "s4"]);
        // The next task of a kept context runs in its session.
        let ins = s.insert("a", task("again", "c10")).unwrap();
        assert_eq!(ins.session.as_ref().map(|s| s.as_str()), Some("s10"));
    }

    #[test]
    fn an_ended_task_closes_its_events() {
        let s = A2aState::default();
        let mut rx = s.insert("a", task("t", "c")).unwrap().events;
        assert!(s.update("a", "t", done_with(1), None));
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Closed)
        ));
        assert!(matches!(s.subscribe("a", "t"), Some((_, None))));
    }

    #[test]
    fn a_terminal_task_is_not_changed_again() {
        let s = A2aState::default();
        s.insert("a", task("t", "c")).unwrap();
        let done = |t: &mut Task| t.status = TaskStatus::new(TaskState::Canceled);
        assert!(s.update("a", "t", done, None));
        let work = |t: &mut Task| t.status = TaskStatus::new(TaskState::Completed);
        assert!(!s.update("a", "t", work, None));
        assert_eq!(
            s.get("a", "t").map(|t| t.status.state),
            Some(TaskState::Canceled)
        );
    }
}
