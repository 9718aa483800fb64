//! The simulated delegate's card and the every-constraint policy, shared by the load bench
//! (`load.rs`) and the allocation bench (`allocs.rs`).

/// The simulated LDP delegate's card: one `echo` skill, cheap and fast.
pub const CARD: &str = r#"{
  "delegate_id": "ldp:delegate:load-fast", "name": "load-fast", "model_family": "sim",
  "model_version": "1", "trust_domain": { "name": "default" }, "context_window": 32768,
  "jurisdiction": "eu-west",
  "capabilities": [{ "name": "echo", "quality": { "quality_score": 0.9, "latency_p50_ms": 5,
    "cost_per_call_usd": 0.001, "supports_streaming": false } }],
  "supported_payload_modes": ["text"], "endpoint": "", "metadata": {}
}"#;

/// Every `[require]` constraint kind; the card above passes all of them.
pub const POLICY: &str = r#"name = "load-all"
description = "load bench: every constraint kind"
[require]
jurisdictions = ["eu-*"]
deny_jurisdictions = ["us-*"]
trust_domains = ["default"]
min_quality = 0.5
max_cost_usd = 0.01
max_latency_ms = 2000
payload_modes = ["text", "semantic_frame"]
min_context_window = 8000
model_families = ["sim*"]
deny_model_families = ["gpt*"]
"#;
