//! Cluster mode's notes between replicas, over Redis pub/sub: a cancel asked of whichever
//! replica runs a task (`Topic::Cancel`, answered by each replica on the asker's own channel),
//! an A2A task's events told to its subscribers on every replica (`Topic::A2a`).
//!
//! Each replica holds one subscriber connection (its own, as pub/sub needs), subscribed to
//! `{p}:bus:cancel`, `{p}:bus:a2a` and `{p}:bus:r:{replica}` (its answers), re-made after a
//! failure; notes are JSON. A note is fire-and-forget: one sent while a replica's subscriber
//! is down does not reach it (an ask then waits only for the replicas that got it, as
//! `PUBLISH` counts them).

use super::redis::Redis;
use super::StoreError;
use dashmap::DashMap;
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// Notes a listener may fall behind by before it skips (a cancel is then answered by nobody
/// here, and its asker's deadline decides).
const BUFFERED: usize = 1024;

/// How long a lost subscriber connection waits before it is made again.
const RECONNECT: Duration = Duration::from_millis(500);

/// What a note is about: the channel it travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// A cancel of a task running on some replica.
    Cancel,
    /// An A2A task's event.
    A2a,
}

impl Topic {
    const ALL: [Topic; 2] = [Topic::Cancel, Topic::A2a];

    fn name(self) -> &'static str {
        match self {
            Topic::Cancel => "cancel",
            Topic::A2a => "a2a",
        }
    }

    fn index(self) -> usize {
        match self {
            Topic::Cancel => 0,
            Topic::A2a => 1,
        }
    }
}

/// One note: who sent it, its number (an ask's answers carry the ask's), what it says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Note {
    /// The sending replica.
    pub from: String,
    /// The ask's number (0 for a note nobody answers).
    pub id: u64,
    /// What it says.
    pub body: Value,
}

/// This replica's end of the bus (cheap to clone).
#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

struct Inner {
    redis: Redis,
    replica: String,
    listeners: [broadcast::Sender<Arc<Note>>; 2],
    asks: DashMap<u64, mpsc::UnboundedSender<Note>>,
    next: AtomicU64,
    subscribed: watch::Sender<bool>,
    up: AtomicBool,
}

impl Bus {
    /// The bus on `redis`, for this replica (a random id of its own).
    pub fn new(redis: Redis) -> Bus {
        let listeners = Topic::ALL.map(|_| broadcast::channel(BUFFERED).0);
        Bus {
            inner: Arc::new(Inner {
                redis,
                replica: crate::ldp::new_id(),
                listeners,
                asks: DashMap::new(),
                next: AtomicU64::new(1),
                subscribed: watch::channel(false).0,
                up: AtomicBool::new(false),
            }),
        }
    }

    /// The connection it publishes on.
    pub fn redis(&self) -> &Redis {
        &self.inner.redis
    }

    /// `body` as a note of this replica's, as it travels (for a script that publishes it).
    pub fn note(&self, body: Value) -> Result<Vec<u8>, StoreError> {
        let note = Note {
            from: self.inner.replica.clone(),
            id: 0,
            body,
        };
        serde_json::to_vec(&note).map_err(|e| StoreError::Redis(e.to_string()))
    }

    /// The channel of `topic`.
    pub fn channel(&self, topic: Topic) -> String {
        self.inner.redis.key(format_args!("bus:{}", topic.name()))
    }

    fn answers(&self, replica: &str) -> String {
        self.inner.redis.key(format_args!("bus:r:{replica}"))
    }

    /// Whether this replica's subscriber is connected (readiness).
    pub fn ready(&self) -> bool {
        self.inner.up.load(Ordering::Acquire)
    }

    /// Waits until this replica's subscriber is connected (at most `within`).
    pub async fn wait_ready(&self, within: Duration) -> bool {
        let mut rx = self.inner.subscribed.subscribe();
        tokio::time::timeout(within, rx.wait_for(|up| *up))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The notes of `topic` other replicas send, from now on.
    pub fn listen(&self, topic: Topic) -> broadcast::Receiver<Arc<Note>> {
        self.inner.listeners[topic.index()].subscribe()
    }

    async fn send(&self, channel: &str, id: u64, body: Value) -> Result<usize, StoreError> {
        let note = Note {
            from: self.inner.replica.clone(),
            id,
            body,
        };
        let bytes = serde_json::to_vec(&note).map_err(|e| StoreError::Redis(e.to_string()))?;
        let n: i64 = self
            .inner
            .redis
            .query("bus_publish", redis::cmd("PUBLISH").arg(channel).arg(bytes))
            .await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Asks every other replica listening to `topic` and waits, at most `deadline`, for the
    /// first answer `wanted` takes; `None` when every replica that got the ask answered
    /// otherwise, or the deadline passed.
    pub async fn ask(
        &self,
        topic: Topic,
        body: Value,
        deadline: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<Option<Value>, StoreError> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.inner.asks.insert(id, tx);
        let _asked = Asked { bus: self, id };
        let got = self.send(&self.channel(topic), id, body).await?;
        // This replica's own subscriber got it too (and does not answer itself).
        let mut others = got.saturating_sub(usize::from(self.ready()));
        let waited = tokio::time::timeout(deadline, async {
            while others > 0 {
                let note = rx.recv().await?;
                others -= 1;
                if wanted(&note.body) {
                    return Some(note.body);
                }
            }
            None
        })
        .await;
        Ok(waited.unwrap_or(None))
    }

    /// Answers `ask` (a note of another replica's) with `body`.
    pub async fn answer(&self, ask: &Note, body: Value) {
        if let Err(e) = self.send(&self.answers(&ask.from), ask.id, body).await {
            tracing::warn!(error = %e, "an answer to another replica was not sent");
        }
    }

    /// Runs the subscriber until `shutdown`: connects, subscribes, hands each note to its
    /// listeners or its ask, and connects again after a failure.
    pub fn spawn(&self, mut shutdown: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        let bus = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    r = bus.subscribe_once() => {
                        bus.set_up(false);
                        if let Err(e) = r {
                            tracing::warn!(error = %e, "the replicas' bus (Redis pub/sub) is down");
                        }
                    }
                }
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    // Not a synchronisation: the pause between two attempts to reconnect.
                    _ = tokio::time::sleep(RECONNECT) => {}
                }
            }
        })
    }

    fn set_up(&self, up: bool) {
        self.inner.up.store(up, Ordering::Release);
        self.inner.subscribed.send_replace(up);
    }

    async fn subscribe_once(&self) -> Result<(), StoreError> {
        let mut pubsub = self.inner.redis.pubsub().await?;
        let answers = self.answers(&self.inner.replica);
        let mut channels: Vec<String> = Topic::ALL.iter().map(|t| self.channel(*t)).collect();
        channels.push(answers.clone());
        for c in &channels {
            pubsub
                .subscribe(c)
                .await
                .map_err(|e| StoreError::Redis(e.to_string()))?;
        }
        self.set_up(true);
        tracing::debug!(replica = %self.inner.replica, "the replicas' bus is up");
        let mut stream = pubsub.on_message();
        while let Some(msg) = stream.next().await {
            let Ok(note) = serde_json::from_slice::<Note>(msg.get_payload_bytes()) else {
                tracing::debug!("a note on the bus did not parse");
                continue;
            };
            let channel = msg.get_channel_name();
            if channel == answers {
                if let Some(ask) = self.inner.asks.get(&note.id) {
                    let _ = ask.send(note);
                }
                continue;
            }
            if note.from == self.inner.replica {
                continue;
            }
            if let Some(t) = Topic::ALL.iter().find(|t| self.channel(**t) == channel) {
                let _ = self.inner.listeners[t.index()].send(Arc::new(note));
            }
        }
        Err(StoreError::Redis("the subscriber connection closed".into()))
    }
}

/// An ask waiting for answers: forgotten when the asker stops waiting.
struct Asked<'a> {
    bus: &'a Bus,
    id: u64,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.bus.inner.asks.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `body` to every replica listening to `topic` (the sender included); how many
    /// subscribers got it. (The gateway publishes A2A events from a script instead.)
    async fn tell(bus: &Bus, topic: Topic, body: Value) -> Result<usize, StoreError> {
        bus.send(&bus.channel(topic), 0, body).await
    }

    #[tokio::test]
    async fn an_ask_is_answered_by_another_replica_and_not_by_itself() {
        let (redis, _) = crate::state::redis::testing::redis();
        let (a, b) = (Bus::new(redis.clone()), Bus::new(redis));
        let (_stop, rx) = watch::channel(false);
        let (ta, tb) = (a.spawn(rx.clone()), b.spawn(rx));
        assert!(a.wait_ready(Duration::from_secs(5)).await);
        assert!(b.wait_ready(Duration::from_secs(5)).await);
        let mut heard = b.listen(Topic::Cancel);
        let answerer = b.clone();
        tokio::spawn(async move {
            while let Ok(note) = heard.recv().await {
                let yes = note.body["task"] == "t1";
                answerer
                    .answer(&note, serde_json::json!({ "found": yes }))
                    .await;
            }
        });
        let found = |v: &Value| v["found"] == true;
        let asked = a
            .ask(
                Topic::Cancel,
                serde_json::json!({"task": "t1"}),
                Duration::from_secs(5),
                found,
            )
            .await
            .unwrap();
        assert_eq!(asked, Some(serde_json::json!({"found": true})));
        // Nobody has t2: every replica that got the ask said so, well before the deadline.
        let started = tokio::time::Instant::now();
        let asked = a
            .ask(
                Topic::Cancel,
                serde_json::json!({"task": "t2"}),
                Duration::from_secs(30),
                found,
            )
            .await
            .unwrap();
        assert_eq!(asked, None);
        assert!(started.elapsed() < Duration::from_secs(30));
        // A replica does not hear its own notes.
        let mut own = a.listen(Topic::A2a);
        let mut other = b.listen(Topic::A2a);
        assert_eq!(tell(&a, Topic::A2a, Value::from(1)).await.unwrap(), 2);
        assert_eq!(other.recv().await.unwrap().body, Value::from(1));
        tell(&b, Topic::A2a, Value::from(2)).await.unwrap();
        assert_eq!(own.recv().await.unwrap().body, Value::from(2));
        ta.abort();
        tb.abort();
    }
}
