//! What the LLMX front end remembers of each tenant's senders: the last sequence number each
//! sent, and the gateway's own numbering of its answers to it, in one tenant-fair table.

use crate::fair::{Changed, FairTable, Kept, TableStats};

/// What the bridge remembers of one sender of a tenant: the last sequence number it sent,
/// and the last the gateway numbered an answer to it with.
#[derive(Debug, Default)]
struct Peer {
    last_in: Option<u64>,
    sent: u64,
}

impl Kept<String> for Peer {
    fn weight(&self, from: &String) -> usize {
        from.len() + std::mem::size_of::<Peer>()
    }
}

/// The bridge's per-process state: for each tenant's sender, its last sequence number and
/// the gateway's own numbering of its answers to it, in one tenant-fair table.
pub struct LlmxState {
    peers: FairTable<String, Peer>,
}

impl Default for LlmxState {
    fn default() -> Self {
        LlmxState::new(&crate::config::LlmxConfig::default())
    }
}

impl LlmxState {
    /// The state for `config`.
    pub fn new(config: &crate::config::LlmxConfig) -> LlmxState {
        let bytes = usize::try_from(config.max_sender_bytes).unwrap_or(usize::MAX);
        LlmxState {
            peers: FairTable::new(bytes, None),
        }
    }

    /// Accepts `seq` from `tenant`'s sender `from` if it is above the last one accepted.
    pub fn check_seq(&self, tenant: &str, from: &str, seq: u64) -> Result<(), llmx::SeqError> {
        if from.len() > llmx::MAX_SENDER_BYTES {
            return Err(llmx::SeqError::SenderTooLong);
        }
        let new = || Some((from.to_owned(), Peer::default()));
        let checked = self.peers.change(tenant, from, new, |p| match p.last_in {
            Some(last) if seq <= last => Err(llmx::SeqError::NotIncreasing {
                sender: from.to_owned(),
                last,
                got: seq,
            }),
            _ => {
                p.last_in = Some(seq);
                Ok(())
            }
        });
        match checked {
            Changed::Kept(checked, _) => checked,
            // Never for entries this small (a refusal needs an entry over its tenant's
            // share): taken as a first message is.
            Changed::Absent | Changed::Refused(..) => Ok(()),
        }
    }

    /// The gateway's next sequence number for an answer to `tenant`'s sender `to` (rising
    /// from 1 per tenant and sender; a sender too long to remember is answered with 1).
    pub fn next_seq(&self, tenant: &str, to: &str) -> u64 {
        if to.len() > llmx::MAX_SENDER_BYTES {
            return 1;
        }
        let new = || Some((to.to_owned(), Peer::default()));
        match self.peers.change(tenant, to, new, |p| {
            p.sent += 1;
            p.sent
        }) {
            Changed::Kept(n, _) => n,
            Changed::Absent | Changed::Refused(..) => 1,
        }
    }

    /// The table's figures (its metrics).
    pub fn stats(&self) -> TableStats {
        self.peers.stats()
    }
}
