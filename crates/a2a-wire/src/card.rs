//! The Agent Card (spec §4.4, §8): one type that reads v1.0 cards, v0.3 cards and the merged
//! cards the v1.0 SDK serves (v1.0 members plus the v0.3 ones, so that clients of both
//! versions can read it: `a2a/server/request_handlers/response_helpers.py`,
//! `agent_card_to_dict`).
//!
//! Cards come from many agents and are read leniently: every member defaults (a v0.3 card
//! has no `supportedInterfaces`, a v1.0 one no `url`); [`AgentCard::interfaces`] gives the
//! interfaces of either. [`AgentCard::served_json`] writes a v1.0 card the way the SDK serves
//! it, with the v0.3 members added when the card declares a v0.3 interface.

mod compat;

use crate::consts::BINDING_JSONRPC;
use crate::serde_util::Map;
use crate::version::{Dialect, ProtocolVersion};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `protocolVersion` of a v0.3 card that does not say (its JSON Schema's default).
const V03_CARD_DEFAULT_VERSION: &str = "0.3.0";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// v1.0: where and how to reach the agent, in preference order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_interfaces: Vec<AgentInterface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    /// The agent's own version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<AgentCapabilities>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// v1.0: alternatives (OR) of scheme sets (AND) a request must satisfy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
    /// Always written, even empty: v0.3 requires the member (ProtoJSON would leave an empty
    /// list out; a valid v1.0 card is never without these three).
    #[serde(default)]
    pub default_input_modes: Vec<String>,
    #[serde(default)]
    pub default_output_modes: Vec<String>,
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<AgentCardSignature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
    /// v0.3: the preferred endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// v0.3: the protocol version of the card's interfaces (`"0.3.0"`, the schema's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// v0.3: the binding of [`AgentCard::url`] (default `JSONRPC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_transport: Option<String>,
    /// v0.3: further `{url, transport}` pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_interfaces: Option<Vec<AgentInterfaceV03>>,
    /// v0.3: security requirements as OpenAPI writes them (`[{"bearer": []}]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Vec<BTreeMap<String, Vec<String>>>>,
    /// v0.3: v1.0's `capabilities.extendedAgentCard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_authenticated_extended_card: Option<bool>,
    #[serde(flatten)]
    pub rest: Map,
}

/// A URL, binding and protocol version to reach the agent at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON`, `GRPC` or a URI (spec §5.8).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_binding: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// `Major.Minor`; empty is read as 0.3 (as the SDK does).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_version: String,
    #[serde(flatten)]
    pub rest: Map,
}

impl AgentInterface {
    /// The dialect spoken here; `None` for a version neither dialect covers.
    pub fn dialect(&self) -> Option<Dialect> {
        if self.protocol_version.trim().is_empty() {
            return Some(Dialect::V03);
        }
        ProtocolVersion::parse(&self.protocol_version)?.dialect()
    }
}

/// A v0.3 `additionalInterfaces` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterfaceV03 {
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub transport: String,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentProvider {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub organization: String,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<AgentExtension>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_agent_card: Option<bool>,
    #[serde(flatten)]
    pub rest: Map,
}

/// An extension the agent supports (spec §4.6): the gateway's LDP identity travels as one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentExtension {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uri: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Whether clients must declare the extension. An `Option` although the proto field has no
    /// presence: the SDK's served card writes an explicit `false` (its v0.3 merge), kept here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
    #[serde(flatten)]
    pub rest: Map,
}

/// Scheme name → required scopes, all of which apply (v1.0 shape:
/// `{"schemes": {"bearer": {"list": []}}}`; ProtoJSON writes an empty list as `{}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityRequirement {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemes: BTreeMap<String, StringList>,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StringList {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<String>,
    #[serde(flatten)]
    pub rest: Map,
}

/// One security scheme: the proto's `oneof scheme` as optional members (a served card also
/// carries the v0.3 flat members, `type`, `scheme`, `in`, …, which land in `rest`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityScheme {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_security_scheme: Option<ApiKeySecurityScheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_auth_security_scheme: Option<HttpAuthSecurityScheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2_security_scheme: Option<OAuth2SecurityScheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_id_connect_security_scheme: Option<OpenIdConnectSecurityScheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls_security_scheme: Option<MutualTlsSecurityScheme>,
    #[serde(flatten)]
    pub rest: Map,
}

impl SecurityScheme {
    /// HTTP bearer authentication (as the gateway asks for its tenant keys).
    pub fn http_bearer(description: impl Into<String>) -> SecurityScheme {
        SecurityScheme {
            http_auth_security_scheme: Some(HttpAuthSecurityScheme {
                description: description.into(),
                scheme: "Bearer".into(),
                bearer_format: String::new(),
                rest: Map::new(),
            }),
            ..SecurityScheme::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeySecurityScheme {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `header`, `query` or `cookie`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthSecurityScheme {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// An RFC 7235 scheme: `Bearer`, `Basic`, …
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheme: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bearer_format: String,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuth2SecurityScheme {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub flows: OAuthFlows,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oauth2_metadata_url: String,
    #[serde(flatten)]
    pub rest: Map,
}

/// The proto's `oneof flow` (a v0.3 card may list several).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuthFlows {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_code: Option<OAuthFlow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_credentials: Option<OAuthFlow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implicit: Option<OAuthFlow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<OAuthFlow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_code: Option<OAuthFlow>,
    #[serde(flatten)]
    pub rest: Map,
}

/// Any OAuth flow: the union of the members of the five flow messages (each writes only the
/// members it has).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuthFlow {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub authorization_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub device_authorization_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_url: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pkce_required: bool,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenIdConnectSecurityScheme {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub open_id_connect_url: String,
    #[serde(flatten)]
    pub rest: Map,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MutualTlsSecurityScheme {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(flatten)]
    pub rest: Map,
}

/// A JWS over the card (spec §8.4).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCardSignature {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protected: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<Map>,
    #[serde(flatten)]
    pub rest: Map,
}

impl AgentCard {
    /// The card's interfaces: `supportedInterfaces` of a v1.0 card, else those a v0.3 card
    /// declares: `url` with `preferredTransport` (default `JSONRPC`), then each of
    /// `additionalInterfaces`, all at the card's `protocolVersion` (default `0.3.0`), as the
    /// SDK's card resolver reads a v0.3 card (`a2a/client/card_resolver.py`,
    /// `parse_agent_card`).
    pub fn interfaces(&self) -> Vec<AgentInterface> {
        if !self.supported_interfaces.is_empty() {
            return self.supported_interfaces.clone();
        }
        let Some(url) = self.url.as_ref().filter(|u| !u.is_empty()) else {
            return Vec::new();
        };
        let version = self
            .protocol_version
            .clone()
            .unwrap_or_else(|| V03_CARD_DEFAULT_VERSION.to_owned());
        let interface = |url: &str, binding: &str| AgentInterface {
            url: url.to_owned(),
            protocol_binding: binding.to_owned(),
            tenant: String::new(),
            protocol_version: version.clone(),
            rest: Map::new(),
        };
        let binding = self
            .preferred_transport
            .as_deref()
            .unwrap_or(BINDING_JSONRPC);
        let mut out = vec![interface(url, binding)];
        for i in self.additional_interfaces.iter().flatten() {
            out.push(interface(&i.url, &i.transport));
        }
        out
    }

    /// The first interface with `binding` (`JSONRPC`, …) in `dialect`.
    pub fn interface(&self, binding: &str, dialect: Dialect) -> Option<AgentInterface> {
        self.interfaces()
            .into_iter()
            .find(|i| i.protocol_binding == binding && i.dialect() == Some(dialect))
    }

    /// Whether the agent streams (`capabilities.streaming`; absent is no, spec §3.3.4).
    pub fn streaming(&self) -> bool {
        self.capabilities
            .as_ref()
            .and_then(|c| c.streaming)
            .unwrap_or(false)
    }

    /// The extension with this URI, if the card declares it.
    pub fn extension(&self, uri: &str) -> Option<&AgentExtension> {
        self.capabilities
            .as_ref()?
            .extensions
            .iter()
            .find(|e| e.uri == uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_v03_card() {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "old", "description": "d", "version": "1", "url": "http://h/rpc",
            "protocolVersion": "0.3.0", "capabilities": {"streaming": true,
            "stateTransitionHistory": false}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"], "skills": [{"id": "s", "name": "S",
            "description": "sd", "tags": [], "security": [{"k": []}]}],
            "additionalInterfaces": [{"url": "http://h/rest", "transport": "HTTP+JSON"}],
            "securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "X-Key"}},
            "security": [{"k": []}]
        }))
        .unwrap();
        let i = card.interfaces();
        assert_eq!(i.len(), 2);
        assert_eq!(
            (
                i[0].url.as_str(),
                i[0].protocol_binding.as_str(),
                i[0].protocol_version.as_str()
            ),
            ("http://h/rpc", "JSONRPC", "0.3.0")
        );
        assert_eq!(i[1].protocol_binding, "HTTP+JSON");
        assert!(card.streaming());
        assert_eq!(
            card.interface(BINDING_JSONRPC, Dialect::V03).map(|i| i.url),
            Some("http://h/rpc".to_owned())
        );
        assert_eq!(card.interface(BINDING_JSONRPC, Dialect::V1), None);
        assert_eq!(card.skills[0].rest["security"], json!([{"k": []}]));
    }

    #[test]
    fn a_card_without_interfaces_has_none() {
        let card: AgentCard = serde_json::from_value(json!({"name": "x"})).unwrap();
        assert!(card.interfaces().is_empty());
        assert!(!card.streaming());
        assert!(serde_json::from_value::<AgentCard>(json!({"name": 1})).is_err());
    }
}
