//! The demo fleet: the example cards (embedded), one delegate whose declared latency is a lie,
//! the quiz fleet (producers that are right as often as their accuracy, one of them claiming
//! far more than it delivers, and two verifiers), the simulated LDP delegates that serve them,
//! and one simulated OpenAI-compatible server per `kind = "openai"` entry of
//! `config/demo.toml`, all on free loopback ports.

use anyhow::Context as _;
use ldp_gateway::config::{DelegateConfig, DelegateKind};
use ldp_gateway::ldp::IdentityCard;
use ldp_gateway::routing::TierPrices;
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions};
use ldp_gateway::sim::{SimHandle, SimOptions};
use ldp_gateway::upstream::declared::{self as openai_card, Prices};
use ldp_gateway::upstream::openai::Backend;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The example cards shipped in `config/delegates/`, by registry name (the file stem).
const CARDS: [(&str, &str); 7] = [
    (
        "claude-sonnet-eu",
        include_str!("../../../config/delegates/claude-sonnet-eu.json"),
    ),
    (
        "echo-fast-us",
        include_str!("../../../config/delegates/echo-fast-us.json"),
    ),
    (
        "gemini-pro-us-west",
        include_str!("../../../config/delegates/gemini-pro-us-west.json"),
    ),
    (
        "gpt-mini-us",
        include_str!("../../../config/delegates/gpt-mini-us.json"),
    ),
    (
        "llama-research-eu",
        include_str!("../../../config/delegates/llama-research-eu.json"),
    ),
    (
        "mistral-sovereign-eu",
        include_str!("../../../config/delegates/mistral-sovereign-eu.json"),
    ),
    (
        "qwen-translate-apac",
        include_str!("../../../config/delegates/qwen-translate-apac.json"),
    ),
];

/// Registry name of the delegate whose card under-states its latency.
pub const LIAR: &str = "phi-turbo-us";

/// What the liar's card declares (p50, ms) and what it really takes.
pub const LIAR_DECLARED_MS: u64 = 120;
/// The liar's real latency: 15× its claim, slower than the honest reasoning delegates.
pub const LIAR_ACTUAL: Duration = Duration::from_millis(1800);

/// The liar's card: fast on paper for the slow skills (reasoning, code review), mid-priced,
/// mid-quality, so only a latency-minded policy is tempted by it.
const LIAR_CARD: &str = r#"{
  "delegate_id": "ldp:delegate:phi-turbo-us",
  "name": "Phi Turbo (US East)",
  "description": "Claims 120 ms for reasoning and review; in the demo it really takes about 1.8 s.",
  "model_family": "phi",
  "model_version": "phi-4-mini-flash",
  "trust_domain": { "name": "default", "allow_cross_domain": false, "trusted_peers": [] },
  "context_window": 65536,
  "reasoning_profile": "fast-practical",
  "cost_profile": "medium",
  "latency_profile": "p50:120ms,p99:300ms",
  "jurisdiction": "us-east",
  "capabilities": [
    { "name": "reasoning", "quality_hint": 0.8 },
    { "name": "code-review", "quality_hint": 0.78 }
  ],
  "supported_payload_modes": ["semantic_frame", "text"],
  "endpoint": "",
  "metadata": { "note": "declared latency is a lie" }
}"#;

/// The skill the quiz fleet answers (and only it: no other traffic asks for it).
pub const QUIZ_SKILL: &str = "quiz";

/// The skill the quiz verifiers offer (the `[verify] skill` of the demo's `verified` policy).
pub const VERIFY_SKILL: &str = "verify";

/// Registry name of the quiz producer whose card claims far more than it delivers.
pub const QUIZ_LIAR: &str = "falcon-quiz-us";

/// One member of the quiz fleet: what its card declares for its one skill, and how often it is
/// really right (a producer's answers; a verifier's verdicts).
#[derive(Debug, Clone, Copy)]
pub struct Quizzer {
    /// Registry name.
    pub name: &'static str,
    /// Model family (the verifiers' differ from every producer's: they are independent).
    pub family: &'static str,
    /// Jurisdiction on the card.
    pub jurisdiction: &'static str,
    /// A verifier (skill `verify`), else a producer (skill `quiz`).
    pub verifier: bool,
    /// Declared quality (self-claimed).
    pub declared: f64,
    /// Declared (and charged) price per call, USD.
    pub price_usd: f64,
    /// Declared p50 latency, ms (honest: it sleeps about that).
    pub p50_ms: u64,
    /// Probability of a right answer, or of a right verdict.
    pub accuracy: f64,
    /// A verifier that passes everything (its `accuracy`: how often that is right).
    pub rubber_stamp: bool,
}

/// Registry name of the quiz verifier that passes everything (the cheapest).
pub const QUIZ_STAMP: &str = "yi-stamp-us";

/// The quiz fleet: the cheap liar (claims 0.95, right half the time), two dearer honest
/// producers, two verifiers of other model families, and a rubber stamp that claims as much
/// as they do, costs the least and passes everything (calibration rounds find it out).
pub const QUIZ: [Quizzer; 6] = [
    Quizzer {
        name: QUIZ_LIAR,
        family: "falcon",
        jurisdiction: "us-east",
        verifier: false,
        declared: 0.95,
        price_usd: 0.001,
        p50_ms: 40,
        accuracy: 0.5,
        rubber_stamp: false,
    },
    Quizzer {
        name: "granite-quiz-eu",
        family: "granite",
        jurisdiction: "eu-west",
        verifier: false,
        declared: 0.9,
        price_usd: 0.004,
        p50_ms: 80,
        accuracy: 1.0,
        rubber_stamp: false,
    },
    Quizzer {
        name: "deepseek-quiz-apac",
        family: "deepseek",
        jurisdiction: "ap-southeast",
        verifier: false,
        declared: 0.88,
        price_usd: 0.006,
        p50_ms: 100,
        accuracy: 0.98,
        rubber_stamp: false,
    },
    Quizzer {
        name: "olmo-judge-eu",
        family: "olmo",
        jurisdiction: "eu-central",
        verifier: true,
        declared: 0.95,
        price_usd: 0.0005,
        p50_ms: 30,
        accuracy: 0.98,
        rubber_stamp: false,
    },
    Quizzer {
        name: "jamba-judge-us",
        family: "jamba",
        jurisdiction: "us-west",
        verifier: true,
        declared: 0.95,
        price_usd: 0.0008,
        p50_ms: 40,
        accuracy: 0.98,
        rubber_stamp: false,
    },
    Quizzer {
        name: QUIZ_STAMP,
        family: "yi",
        jurisdiction: "us-east",
        verifier: true,
        declared: 0.95,
        price_usd: 0.0002,
        p50_ms: 20,
        accuracy: 0.5,
        rubber_stamp: true,
    },
];

impl Quizzer {
    /// Its skill: `verify` for a verifier, else `quiz`.
    pub fn skill(&self) -> &'static str {
        if self.verifier {
            VERIFY_SKILL
        } else {
            QUIZ_SKILL
        }
    }

    /// Its card: one skill, with a self-claimed quality, a price per call and a p50.
    fn card(&self) -> anyhow::Result<IdentityCard> {
        let role = if self.verifier {
            "Judges quiz answers"
        } else {
            "Answers quiz questions"
        };
        let card = serde_json::json!({
            "delegate_id": format!("ldp:delegate:{}", self.name),
            "name": self.name,
            "description": format!(
                "{role}; declares quality {}, is right with probability {} in the demo.",
                self.declared, self.accuracy
            ),
            "model_family": self.family,
            "model_version": format!("{}-quiz-sim", self.family),
            "trust_domain": { "name": "default", "allow_cross_domain": false, "trusted_peers": [] },
            "jurisdiction": self.jurisdiction,
            "capabilities": [{
                "name": self.skill(),
                "quality": {
                    "quality_score": self.declared,
                    "cost_per_call_usd": self.price_usd,
                    "latency_p50_ms": self.p50_ms,
                },
            }],
            "supported_payload_modes": ["semantic_frame", "text"],
            "endpoint": "",
            "metadata": {},
        });
        serde_json::from_value(card)
            .with_context(|| format!("built-in quiz card '{}' does not parse", self.name))
    }
}

/// One member of the fleet.
pub struct Member {
    /// Registry name (what `provenance.lineage[0].routed_to` says).
    pub name: String,
    /// The card it serves (an OpenAI-backed member's: the one the gateway builds from its
    /// declared `[delegates.card]`).
    pub card: IdentityCard,
    /// The running simulator.
    pub sim: Sim,
}

/// A member's simulator: an LDP delegate, or an OpenAI-compatible server.
pub enum Sim {
    /// A simulated LDP delegate.
    Ldp(SimHandle),
    /// A simulated OpenAI-compatible server, and how to call it as the gateway does.
    OpenAi {
        /// The server.
        handle: OpenAiHandle,
        /// Its model, declared prices and context window (blind routing calls it with this).
        backend: Arc<Backend>,
    },
}

impl Member {
    /// Its base URL (an OpenAI-compatible server's ends in `/v1`).
    pub fn url(&self) -> String {
        match &self.sim {
            Sim::Ldp(h) => h.url(),
            Sim::OpenAi { handle, .. } => handle.url(),
        }
    }

    /// Per-token prices, for an OpenAI-backed member.
    pub fn token_prices(&self) -> Option<Prices> {
        match &self.sim {
            Sim::Ldp(_) => None,
            Sim::OpenAi { backend, .. } => Some(backend.prices),
        }
    }

    /// `ldp` or `openai`.
    pub fn kind(&self) -> &'static str {
        match self.sim {
            Sim::Ldp(_) => "ldp",
            Sim::OpenAi { .. } => "openai",
        }
    }

    /// Declared p50 latencies over its skills, `(min, max)` in ms, if it declares any.
    pub fn declared_p50_range(&self) -> Option<(u64, u64)> {
        let all: Vec<u64> = self
            .card
            .capabilities
            .iter()
            .filter_map(|c| self.card.effective_hints(&c.name)?.latency_p50_ms)
            .collect();
        Some((*all.iter().min()?, *all.iter().max()?))
    }

    /// Price per call over its skills, `(min, max)` in USD: the declared price, else the
    /// cost tier's price.
    pub fn price_range(&self, tiers: &TierPrices) -> Option<(f64, f64)> {
        let all: Vec<f64> = self
            .card
            .capabilities
            .iter()
            .filter_map(|c| {
                let h = self.card.effective_hints(&c.name)?;
                h.cost_per_call_usd
                    .or_else(|| h.cost_tier.map(|t| tiers.of(t)))
            })
            .collect();
        let min = all.iter().copied().reduce(f64::min)?;
        let max = all.iter().copied().reduce(f64::max)?;
        Some((min, max))
    }
}

/// The parsed cards, in a fixed order: the seven examples, the liar, then the quiz fleet.
pub fn cards() -> anyhow::Result<Vec<(&'static str, IdentityCard)>> {
    let mut cards = CARDS
        .iter()
        .copied()
        .chain(std::iter::once((LIAR, LIAR_CARD)))
        .map(|(name, json)| {
            let card: IdentityCard = serde_json::from_str(json)
                .with_context(|| format!("embedded card '{name}' does not parse"))?;
            Ok((name, card))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for q in &QUIZ {
        cards.push((q.name, q.card()?));
    }
    Ok(cards)
}

/// How a member behaves: honest delegates sleep each skill's declared p50 (± 15 % jitter);
/// the liar sleeps [`LIAR_ACTUAL`] whatever its card says; a quiz member is right (or judges
/// right) with its accuracy.
fn options(name: &str, card: IdentityCard) -> SimOptions {
    let mut opts = SimOptions::new(card);
    if name == LIAR {
        opts.latency = LIAR_ACTUAL;
        opts.jitter = LIAR_ACTUAL / 10;
        return opts;
    }
    if let Some(q) = QUIZ.iter().find(|q| q.name == name) {
        opts.accuracy = Some(q.accuracy);
        opts.verifier = q.verifier;
        opts.rubber_stamp = q.rubber_stamp;
    }
    let fastest = opts
        .card
        .capabilities
        .iter()
        .filter_map(|c| opts.card.effective_hints(&c.name)?.latency_p50_ms)
        .min()
        .unwrap_or(0);
    opts.card_latency = true;
    opts.jitter = Duration::from_millis(fastest * 15 / 100);
    opts
}

/// Starts every LDP member on `127.0.0.1:0`, then one simulated OpenAI-compatible server per
/// `kind = "openai"` entry of `delegates`, answering after the entry's declared p50.
pub async fn start(delegates: &[DelegateConfig]) -> anyhow::Result<Vec<Member>> {
    let mut fleet = Vec::new();
    for (name, card) in cards()? {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .with_context(|| format!("binding a port for delegate '{name}'"))?;
        let handle = ldp_gateway::sim::spawn(listener, options(name, card.clone()))
            .await
            .with_context(|| format!("starting delegate '{name}'"))?;
        fleet.push(Member {
            name: name.to_owned(),
            card,
            sim: Sim::Ldp(handle),
        });
    }
    for d in delegates.iter().filter(|d| d.kind == DelegateKind::OpenAi) {
        fleet.push(start_openai(d).await?);
    }
    Ok(fleet)
}

/// A simulated OpenAI-compatible server for entry `d`, and the card the gateway builds for it.
async fn start_openai(d: &DelegateConfig) -> anyhow::Result<Member> {
    let name = d.name.clone().unwrap_or_else(|| d.url.clone());
    let (model, declared) = match (&d.model, &d.card) {
        (Some(model), Some(card)) => (model.clone(), card),
        _ => anyhow::bail!("OpenAI-backed delegate '{name}' needs `model` and [delegates.card]"),
    };
    let mut opts = OpenAiOptions::new(model.clone());
    opts.latency = Duration::from_millis(declared.latency_p50_ms.unwrap_or(0));
    opts.context_window = declared.context_window;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .with_context(|| format!("binding a port for delegate '{name}'"))?;
    let handle = ldp_gateway::sim::openai::spawn(listener, opts)
        .await
        .with_context(|| format!("starting delegate '{name}'"))?;
    let card = openai_card::build("openai", &name, &handle.url(), &model, declared);
    let backend = Backend::new(d, &name, None)?;
    Ok(Member {
        name,
        card,
        sim: Sim::OpenAi {
            handle,
            backend: Arc::new(backend),
        },
    })
}

/// Stops every member.
pub async fn stop(fleet: Vec<Member>) {
    for m in fleet {
        match m.sim {
            Sim::Ldp(h) => h.shutdown().await,
            Sim::OpenAi { handle, .. } => handle.shutdown().await,
        }
    }
}

/// The member with the highest declared quality for `skill` (blind routing's choice).
pub fn top_quality<'a>(fleet: &'a [Member], skill: &str) -> Option<&'a Member> {
    fleet
        .iter()
        .filter_map(|m| Some((m, m.card.effective_hints(skill)?.quality?)))
        .fold(None, |best: Option<(&Member, f64)>, (m, q)| match best {
            Some((_, bq)) if bq >= q => best,
            _ => Some((m, q)),
        })
        .map(|(m, _)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_parse_with_distinct_families() {
        let cards = cards().unwrap();
        assert_eq!(cards.len(), 8 + QUIZ.len());
        let mut families: Vec<&str> = cards.iter().map(|(_, c)| c.model_family.as_str()).collect();
        families.sort_unstable();
        families.dedup();
        assert_eq!(families.len(), 8 + QUIZ.len(), "{families:?}");
        let liar = &cards.iter().find(|(n, _)| *n == LIAR).unwrap().1;
        assert_eq!(
            liar.effective_hints("reasoning").unwrap().latency_p50_ms,
            Some(LIAR_DECLARED_MS)
        );
        assert!(LIAR_ACTUAL > Duration::from_millis(LIAR_DECLARED_MS * 10));
    }

    #[test]
    fn honest_members_sleep_their_card_and_the_liar_does_not() {
        for (name, card) in cards().unwrap() {
            let o = options(name, card);
            assert_eq!(o.card_latency, name != LIAR, "{name}");
        }
    }

    #[test]
    fn the_quiz_liar_claims_the_most_costs_the_least_and_is_right_half_the_time() {
        let producers: Vec<&Quizzer> = QUIZ.iter().filter(|q| !q.verifier).collect();
        let liar = producers.iter().find(|q| q.name == QUIZ_LIAR).unwrap();
        assert_eq!((liar.declared, liar.accuracy), (0.95, 0.5));
        for q in producers.iter().filter(|q| q.name != QUIZ_LIAR) {
            assert!(
                q.declared < liar.declared && q.price_usd > liar.price_usd,
                "{q:?}"
            );
            assert!(
                q.accuracy >= 0.95 && (0.85..=0.9).contains(&q.declared),
                "{q:?}"
            );
        }
        // Three verifiers (one a rubber stamp, the cheapest), of families no producer
        // shares, so each may judge every producer.
        let verifiers: Vec<&Quizzer> = QUIZ.iter().filter(|q| q.verifier).collect();
        assert_eq!(verifiers.len(), 3);
        let stamp = verifiers.iter().find(|v| v.rubber_stamp).unwrap();
        assert!(verifiers.iter().all(|v| v.price_usd >= stamp.price_usd));
        for v in &verifiers {
            assert!(producers.iter().all(|p| p.family != v.family), "{v:?}");
        }
        for (name, card) in cards().unwrap() {
            let Some(q) = QUIZ.iter().find(|q| q.name == name) else {
                let skills: Vec<&str> = card.capabilities.iter().map(|c| c.name.as_str()).collect();
                assert!(
                    !skills.contains(&QUIZ_SKILL) && !skills.contains(&VERIFY_SKILL),
                    "{name}"
                );
                continue;
            };
            let h = card.effective_hints(q.skill()).unwrap();
            assert_eq!(h.quality, Some(q.declared), "{name}");
            assert_eq!(h.cost_per_call_usd, Some(q.price_usd), "{name}");
            assert_eq!(h.latency_p50_ms, Some(q.p50_ms), "{name}");
            let o = options(name, card);
            assert_eq!(
                (o.accuracy, o.verifier, o.rubber_stamp),
                (Some(q.accuracy), q.verifier, q.rubber_stamp),
                "{name}"
            );
        }
    }
}
