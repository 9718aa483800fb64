//! The delegation contract a TASK_SUBMIT may carry (newer reference SDK).

use serde::{Deserialize, Serialize};

/// Bounded expectations for one task. Only the parts the gateway acts on are typed; the rest
/// travels unchanged in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegationContract {
    /// Contract id.
    #[serde(default)]
    pub contract_id: String,
    /// Policy: budget and failure policy.
    #[serde(default)]
    pub policy: ContractPolicy,
    /// RFC 3339 deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Every other field (objective, success criteria, created_at, …), kept as sent.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The contract's policy envelope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContractPolicy {
    /// Token and cost budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetPolicy>,
    /// Other policy fields, kept as sent.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A task budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetPolicy {
    /// Token ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Cost ceiling in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl DelegationContract {
    /// The deadline as a timestamp, if present and parseable.
    pub fn deadline_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let d = self.deadline.as_deref()?;
        chrono::DateTime::parse_from_rfc3339(d)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_unknown_fields_and_reads_budget() {
        let raw = serde_json::json!({
            "contract_id": "c1", "objective": "sum", "success_criteria": ["short"],
            "policy": {"failure_policy": "fail_closed", "budget": {"max_cost_usd": 0.05}},
            "deadline": "2026-12-31T23:59:59Z", "created_at": "2026-01-01T00:00:00Z"
        });
        let c: DelegationContract = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(c.policy.budget.as_ref().unwrap().max_cost_usd, Some(0.05));
        assert!(c.deadline_at().is_some());
        assert_eq!(serde_json::to_value(&c).unwrap(), raw);
    }
}
