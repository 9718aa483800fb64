//! Identity cards: fetched (well-known path, then `/ldp/identity`) within size and capability
//! caps, at most `discovery.concurrency` at a time.

use super::{Req, Transport};
use crate::Error;
use bytes::Bytes;
use ldp_wire::IdentityCard;
use std::time::Duration;

/// Bounds on card fetches (`[discovery]`): a delegate cannot make the gateway read, store or
/// serve an unbounded card, nor a large fleet open every fetch at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardLimits {
    /// Largest card read, bytes.
    pub max_bytes: usize,
    /// Most capabilities a card may list.
    pub max_capabilities: usize,
    /// Most fetches in flight at once.
    pub concurrency: usize,
}

impl Default for CardLimits {
    fn default() -> Self {
        CardLimits {
            max_bytes: 1024 * 1024,
            max_capabilities: 1024,
            concurrency: 16,
        }
    }
}

impl Transport {
    /// Sets the bounds on card fetches.
    pub fn set_card_limits(&mut self, limits: CardLimits) {
        let limits = CardLimits {
            concurrency: limits.concurrency.max(1),
            ..limits
        };
        self.card_permits = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.concurrency));
        self.cards = limits;
    }

    /// The bounds on card fetches.
    pub fn card_limits(&self) -> CardLimits {
        self.cards
    }

    /// GETs `base` + `path` and reads at most `max` bytes of its answer, all within `timeout`.
    async fn get_json(
        &self,
        base: &str,
        path: &'static str,
        timeout: Duration,
        max: usize,
    ) -> Result<Bytes, Error> {
        let req = Req {
            path,
            body: None,
            forward: Default::default(),
            events: false,
            headers: &self.headers,
        };
        let (head, bytes) = self.exchange(base, &req, timeout, max).await?;
        let status = head.status;
        if !status.is_success() {
            return Err(Self::status_error(
                format!("{base}{path}"),
                status.as_u16(),
                &bytes,
            ));
        }
        Ok(bytes)
    }

    /// Fetches a delegate's card: `/.well-known/ldp-identity` first (RFC), `/ldp/identity`
    /// second (reference SDK). At most [`CardLimits`] `max_bytes` are read, a card listing
    /// more than `max_capabilities` is refused, and at most `concurrency` fetches run at once.
    pub async fn fetch_card(&self, base: &str, timeout: Duration) -> Result<IdentityCard, Error> {
        // The deadline starts once a permit is held: a large fleet polls more slowly, it
        // does not time its delegates out. (The semaphore is never closed.)
        let _permit = self.card_permits.acquire().await.ok();
        let mut last = None;
        for path in ["/.well-known/ldp-identity", "/ldp/identity"] {
            let url = format!("{base}{path}");
            match self
                .get_json(base, path, timeout, self.cards.max_bytes)
                .await
            {
                Ok(bytes) => {
                    let card = serde_json::from_slice::<IdentityCard>(&bytes).map_err(|e| {
                        Error::Malformed {
                            url: url.clone(),
                            reason: format!("identity card: {e}"),
                        }
                    })?;
                    let n = card.capabilities.len();
                    if n > self.cards.max_capabilities {
                        return Err(Error::Malformed {
                            url,
                            reason: format!(
                                "identity card lists {n} capabilities; at most {} are accepted",
                                self.cards.max_capabilities
                            ),
                        });
                    }
                    return Ok(card);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(Error::Malformed {
            url: base.to_owned(),
            reason: "no identity card".into(),
        }))
    }
}
