//! Payload modes and the RFC §4.2 negotiation, including the fallback chain.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A payload mode (RFC §4.1). The last two are read but never emitted: the reference SDKs
/// reject them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum PayloadMode {
    /// Mode 0: plain text, every delegate supports it.
    Text,
    /// Mode 1: typed JSON frames (`task_type`, `instruction`, …).
    SemanticFrame,
    /// Mode 2.
    EmbeddingHints,
    /// Mode 3.
    SemanticGraph,
    /// Mode 4 (RFC "future").
    LatentCapsules,
    /// Mode 5 (RFC "future").
    CacheSlices,
}

impl PayloadMode {
    /// All modes, in mode-number order.
    pub const ALL: [PayloadMode; 6] = [
        PayloadMode::Text,
        PayloadMode::SemanticFrame,
        PayloadMode::EmbeddingHints,
        PayloadMode::SemanticGraph,
        PayloadMode::LatentCapsules,
        PayloadMode::CacheSlices,
    ];

    /// The RFC mode number (0 = text).
    pub fn number(self) -> u8 {
        match self {
            PayloadMode::Text => 0,
            PayloadMode::SemanticFrame => 1,
            PayloadMode::EmbeddingHints => 2,
            PayloadMode::SemanticGraph => 3,
            PayloadMode::LatentCapsules => 4,
            PayloadMode::CacheSlices => 5,
        }
    }

    /// Modes the gateway can carry and translate (the same set as the reference SDKs).
    pub fn is_implemented(self) -> bool {
        matches!(self, PayloadMode::Text | PayloadMode::SemanticFrame)
    }

    /// Modes every reference SDK can parse; only these are ever emitted.
    pub fn is_emittable(self) -> bool {
        self.number() <= 3
    }

    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadMode::Text => "text",
            PayloadMode::SemanticFrame => "semantic_frame",
            PayloadMode::EmbeddingHints => "embedding_hints",
            PayloadMode::SemanticGraph => "semantic_graph",
            PayloadMode::LatentCapsules => "latent_capsules",
            PayloadMode::CacheSlices => "cache_slices",
        }
    }

    /// Parses a wire value; `None` for anything unknown.
    pub fn parse(s: &str) -> Option<PayloadMode> {
        PayloadMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// This mode if every SDK can parse it, else `text`, the mode every peer supports (RFC
    /// §4.3: every fallback chain ends in text).
    pub fn emittable_or_text(self) -> PayloadMode {
        if self.is_emittable() {
            self
        } else {
            PayloadMode::Text
        }
    }
}

/// Writes a single required mode, `text` in place of one the SDKs reject.
pub(super) fn ser_mode<S: Serializer>(mode: &PayloadMode, ser: S) -> Result<S::Ok, S::Error> {
    mode.emittable_or_text().serialize(ser)
}

/// Writes an optional list of modes without those the SDKs reject.
pub(super) fn ser_modes_opt<S: Serializer>(
    modes: &Option<Vec<PayloadMode>>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    modes
        .as_ref()
        .map(|ms| {
            ms.iter()
                .copied()
                .filter(|m| m.is_emittable())
                .collect::<Vec<_>>()
        })
        .serialize(ser)
}

/// Whether an optional single mode has nothing writable (absent, or one the SDKs reject).
pub(super) fn no_emittable_mode(mode: &Option<PayloadMode>) -> bool {
    !mode.is_some_and(PayloadMode::is_emittable)
}

impl fmt::Display for PayloadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads a list of modes, skipping values this build does not know (a peer announcing a
/// future mode must not make its whole card or proposal unreadable).
pub fn lenient_modes<'de, D>(de: D) -> Result<Vec<PayloadMode>, D::Error>
where
    D: Deserializer<'de>,
{
    let raw: Vec<serde_json::Value> = Vec::deserialize(de)?;
    Ok(raw
        .iter()
        .filter_map(|v| v.as_str().and_then(PayloadMode::parse))
        .collect())
}

/// Like [`lenient_modes`] for an optional list.
pub fn lenient_modes_opt<'de, D>(de: D) -> Result<Option<Vec<PayloadMode>>, D::Error>
where
    D: Deserializer<'de>,
{
    let raw: Option<Vec<serde_json::Value>> = Option::deserialize(de)?;
    Ok(raw.map(|raw| {
        raw.iter()
            .filter_map(|v| v.as_str().and_then(PayloadMode::parse))
            .collect()
    }))
}

/// The outcome of negotiation: the agreed mode and what to fall back to, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NegotiatedPayload {
    /// The agreed mode.
    pub mode: PayloadMode,
    /// Lower modes to try when `mode` fails, richest first; ends with `text` unless `mode` is
    /// text.
    pub fallback_chain: Vec<PayloadMode>,
}

impl NegotiatedPayload {
    /// Text with nothing to fall back to.
    pub fn text() -> Self {
        NegotiatedPayload {
            mode: PayloadMode::Text,
            fallback_chain: Vec::new(),
        }
    }

    /// The next mode after `current` on the chain, if any.
    pub fn next_after(&self, current: PayloadMode) -> Option<PayloadMode> {
        if current == self.mode {
            return self.fallback_chain.first().copied();
        }
        let pos = self.fallback_chain.iter().position(|m| *m == current)?;
        self.fallback_chain.get(pos + 1).copied()
    }
}

/// RFC §4.2: the first implemented mode of the initiator's preferences that the responder
/// supports, else text; the fallback chain is the remaining common implemented modes with
/// lower mode numbers, in the initiator's order, always ending in text (RFC §4.3: "… → Mode 0").
pub fn negotiate(initiator: &[PayloadMode], responder: &[PayloadMode]) -> NegotiatedPayload {
    let mode = initiator
        .iter()
        .copied()
        .find(|m| m.is_implemented() && responder.contains(m))
        .unwrap_or(PayloadMode::Text);
    let mut fallback_chain: Vec<PayloadMode> = Vec::new();
    for m in initiator.iter().copied() {
        if m.is_implemented()
            && m != mode
            && responder.contains(&m)
            && m.number() < mode.number()
            && !fallback_chain.contains(&m)
        {
            fallback_chain.push(m);
        }
    }
    if mode != PayloadMode::Text && !fallback_chain.contains(&PayloadMode::Text) {
        fallback_chain.push(PayloadMode::Text);
    }
    NegotiatedPayload {
        mode,
        fallback_chain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PayloadMode::*;

    #[test]
    fn rfc_example_skips_unimplemented_graph() {
        let n = negotiate(
            &[SemanticGraph, SemanticFrame, Text],
            &[SemanticFrame, Text],
        );
        assert_eq!(n.mode, SemanticFrame);
        assert_eq!(n.fallback_chain, vec![Text]);
    }

    #[test]
    fn no_common_mode_falls_back_to_text() {
        let n = negotiate(&[SemanticFrame], &[Text]);
        assert_eq!(n, NegotiatedPayload::text());
    }

    #[test]
    fn chain_always_ends_in_text() {
        let n = negotiate(&[SemanticFrame], &[SemanticFrame]);
        assert_eq!(n.mode, SemanticFrame);
        assert_eq!(n.fallback_chain, vec![Text]);
        assert_eq!(n.next_after(SemanticFrame), Some(Text));
        assert_eq!(n.next_after(Text), None);
    }

    #[test]
    fn initiator_order_wins() {
        let n = negotiate(&[Text, SemanticFrame], &[SemanticFrame, Text]);
        assert_eq!(n.mode, Text);
        assert!(n.fallback_chain.is_empty());
    }

    #[test]
    fn wire_values_round_trip() {
        for m in PayloadMode::ALL {
            let s = serde_json::to_string(&m).unwrap();
            assert_eq!(s, format!("\"{}\"", m.as_str()));
            assert_eq!(serde_json::from_str::<PayloadMode>(&s).unwrap(), m);
            assert_eq!(PayloadMode::parse(m.as_str()), Some(m));
        }
        assert!(!LatentCapsules.is_emittable());
        assert!(SemanticGraph.is_emittable());
        assert_eq!(CacheSlices.emittable_or_text(), Text);
        assert_eq!(SemanticGraph.emittable_or_text(), SemanticGraph);
    }

    #[test]
    fn lenient_list_skips_unknown() {
        #[derive(Deserialize)]
        struct W {
            #[serde(deserialize_with = "lenient_modes")]
            m: Vec<PayloadMode>,
        }
        let w: W = serde_json::from_str(r#"{"m":["hologram","text","cache_slices"]}"#).unwrap();
        assert_eq!(w.m, vec![Text, CacheSlices]);
    }
}
