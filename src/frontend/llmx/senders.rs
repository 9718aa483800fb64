//! What the LLMX front end remembers of each tenant's senders: the last sequence number each
//! sent, and the gateway's own numbering of its answers to it, in the sequence store chosen at
//! start (`crate::state::Sequences`: a tenant-fair table in this process, or Redis shared by
//! every replica).

use crate::fair::TableStats;
use crate::state::sequence_store::LocalSequences;
use crate::state::{SequenceStore, Sequences, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};

/// The bridge's state: for each tenant's sender, its last sequence number and the gateway's
/// own numbering of its answers to it.
pub struct LlmxState {
    store: Sequences,
    /// Answers to messages whose sender could not be read, numbered together, by this
    /// process (in cluster mode too: no one can tell them apart across replicas).
    unread: AtomicU64,
}

impl Default for LlmxState {
    fn default() -> Self {
        LlmxState::new(&crate::config::LlmxConfig::default())
    }
}

impl LlmxState {
    /// A single node's state for `config`.
    pub fn new(config: &crate::config::LlmxConfig) -> LlmxState {
        let bytes = usize::try_from(config.max_sender_bytes).unwrap_or(usize::MAX);
        LlmxState::with_store(Sequences::Local(LocalSequences::new(bytes)))
    }

    /// The state in `store` (chosen at start: `crate::state::BridgeStores`).
    pub fn with_store(store: Sequences) -> LlmxState {
        LlmxState {
            store,
            unread: AtomicU64::new(0),
        }
    }

    /// Accepts `seq` from `tenant`'s sender `from` if it is above the last one accepted, on a
    /// single node (a reader's check; a shared store is checked by [`LlmxState::accept`], and
    /// here only the sender's length is).
    pub fn check_seq(&self, tenant: &str, from: &str, seq: u64) -> Result<(), llmx::SeqError> {
        if from.len() > llmx::MAX_SENDER_BYTES {
            return Err(llmx::SeqError::SenderTooLong);
        }
        match &self.store {
            Sequences::Local(l) => l
                .check(tenant, from, seq)
                .map_err(|last| not_above(from, last, seq)),
            Sequences::Shared(_) => Ok(()),
        }
    }

    /// Checks `seq` from `tenant`'s `from` and numbers the gateway's answer to the message,
    /// in one step of the store: the check's result, and the answer's number.
    pub async fn accept(
        &self,
        tenant: &str,
        from: &str,
        seq: u64,
    ) -> Result<(Result<(), llmx::SeqError>, u64), StoreError> {
        if from.len() > llmx::MAX_SENDER_BYTES {
            return Ok((Err(llmx::SeqError::SenderTooLong), 1));
        }
        let (checked, n) = self.store.accept(tenant, from, seq).await?;
        Ok((checked.map_err(|last| not_above(from, last, seq)), n))
    }

    /// The gateway's next sequence number for an answer to `tenant`'s sender `to` (rising
    /// from 1 per tenant and sender; a sender too long to remember is answered with 1; 0 when
    /// the shared store did not answer).
    pub async fn next_seq(&self, tenant: &str, to: &str) -> u64 {
        if to.len() > llmx::MAX_SENDER_BYTES {
            return 1;
        }
        match self.store.next(tenant, to).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "LLMX answer not numbered: the shared state did not answer");
                0
            }
        }
    }

    /// The number of an answer to a message whose sender and tenant could not be read.
    pub fn next_unread(&self) -> u64 {
        match &self.store {
            Sequences::Local(l) => l.next("", super::UNKNOWN),
            Sequences::Shared(_) => self.unread.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    /// The table's figures (its metrics; none kept here in cluster mode).
    pub fn stats(&self) -> TableStats {
        self.store.local_stats().unwrap_or_default()
    }
}

fn not_above(from: &str, last: u64, got: u64) -> llmx::SeqError {
    llmx::SeqError::NotIncreasing {
        sender: from.to_owned(),
        last,
        got,
    }
}
