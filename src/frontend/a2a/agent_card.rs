//! The gateway's Agent Card (`GET /.well-known/agent-card.json`, public, as card discovery
//! is: it says how to authenticate): the skills some healthy delegate offers now, the
//! gateway's LDP identity as `ldp.*` labels in an extension; with an `ETag` (a matching
//! `If-None-Match` is answered 304) and `Cache-Control: max-age` (`[a2a] card_max_age_secs`).

use super::ROUTE;
use crate::frontend::api_error::ApiError;
use crate::frontend::request::refuse;
use crate::frontend::AppState;
use crate::proxy::Proxy;
use a2a_wire::{AgentCard, AgentExtension, AgentInterface, AgentSkill, Map, SecurityScheme};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sha2::Digest;

/// The URI of the card extension carrying the gateway's LDP identity as the RFC §9.1
/// `ldp.*` labels (in its `params`).
pub const IDENTITY_EXTENSION_URI: &str = "urn:ldp:a2a:identity:v1";
/// The security scheme's name on the card.
const BEARER: &str = "bearer";

/// `GET /.well-known/agent-card.json`.
pub(crate) async fn card(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let url = format!("{}{}", s.public_url, ROUTE);
    let card = agent_card(&s.proxy, &url);
    let bytes = match serde_json::to_vec(&card) {
        Ok(b) => b,
        Err(e) => {
            let e = ApiError::new(crate::ldp::error::GatewayCode::Internal, e.to_string());
            return refuse(e);
        }
    };
    let digest = sha2::Sha256::digest(&bytes);
    let etag = format!("\"{}\"", hex::encode(&digest[..16]));
    let max_age = format!("max-age={}", s.config.a2a.card_max_age_secs);
    let matched = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let status = if matched {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let mut resp = if matched {
        status.into_response()
    } else {
        (status, bytes).into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in [(header::ETAG, etag), (header::CACHE_CONTROL, max_age)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    resp
}

/// The agent's Agent Card (v1.0 shape) for the A2A endpoint at `url`.
pub fn agent_card(proxy: &Proxy, url: &str) -> AgentCard {
    let id = proxy.identity_card(None);
    let mut labels = Map::new();
    let mut label = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            labels.insert(format!("ldp.{k}"), Value::String(v));
        }
    };
    label("delegate_id", Some(id.delegate_id.clone()));
    label("model_family", Some(id.model_family.clone()));
    label("model_version", Some(id.model_version.clone()));
    label("trust_domain", Some(id.trust_domain.name.clone()));
    label("context_window", id.context_window.map(|w| w.to_string()));
    label("weights_fingerprint", id.weights_fingerprint.clone());
    label("reasoning_profile", id.reasoning_profile.clone());
    label("cost_profile", id.cost_profile.clone());
    label("latency_profile", id.latency_profile.clone());
    label("jurisdiction", id.jurisdiction.clone());
    let modes: Vec<String> = id
        .supported_payload_modes
        .iter()
        .map(|m| m.to_string())
        .collect();
    label("payload_modes", Some(modes.join(",")));
    let skills = id
        .capabilities
        .iter()
        .map(|c| AgentSkill {
            id: c.name.clone(),
            name: c.name.clone(),
            description: c
                .description
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| format!("The {} skill, routed by policy", c.name)),
            tags: vec!["ldp".into(), c.name.clone()],
            ..AgentSkill::default()
        })
        .collect();
    let requirement = a2a_wire::card::SecurityRequirement {
        schemes: [(BEARER.to_owned(), Default::default())].into(),
        rest: Map::new(),
    };
    AgentCard {
        name: id.name.clone(),
        description: id.description.clone().unwrap_or_default(),
        supported_interfaces: vec![AgentInterface {
            url: url.to_owned(),
            protocol_binding: a2a_wire::consts::BINDING_JSONRPC.into(),
            tenant: String::new(),
            protocol_version: a2a_wire::consts::PROTOCOL_VERSION_1_0.into(),
            rest: Map::new(),
        }],
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: Some(a2a_wire::card::AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: vec![AgentExtension {
                uri: IDENTITY_EXTENSION_URI.into(),
                description: "The gateway's LDP identity (LDP RFC §9.1 labels)".into(),
                required: None,
                params: Some(labels),
                rest: Map::new(),
            }],
            ..Default::default()
        }),
        security_schemes: [(
            BEARER.to_owned(),
            SecurityScheme::http_bearer("The tenant's API key"),
        )]
        .into(),
        security_requirements: vec![requirement],
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills,
        ..AgentCard::default()
    }
}
