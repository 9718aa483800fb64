//! The v0.3 members of a served card: the v0.3 projection of a v1.0 card
//! (`a2a/compat/v0_3/conversions.py`, `to_compat_agent_card`, dumped without `None`s) merged
//! under the v1.0 members as `agent_card_to_dict` merges it.

use super::{
    AgentCard, AgentExtension, AgentSkill, OAuthFlow, SecurityRequirement, SecurityScheme,
};
use crate::consts::PROTOCOL_VERSION_0_3;
use crate::serde_util::Map;
use crate::version::Dialect;
use serde_json::{json, Value};

impl AgentCard {
    /// The card as the SDK serves it: its v1.0 JSON, plus, when it declares an interface in
    /// v0.3 (or one without a version), the v0.3 card's members merged in where the v1.0 JSON
    /// has none (recursively into objects, and into the objects of lists by position). A card
    /// without a v0.3 interface is served as v1.0 only, as the SDK does.
    pub fn served_json(&self) -> Value {
        let mut v1 = serde_json::to_value(self).unwrap_or_else(|_| Value::Object(Map::new()));
        if let Some(mut compat) = self.v03_card() {
            // Served, the member is dropped unless it is true.
            if let Some(m) = compat.as_object_mut() {
                if m.get("supportsAuthenticatedExtendedCard") != Some(&Value::Bool(true)) {
                    m.remove("supportsAuthenticatedExtendedCard");
                }
            }
            merge(&mut v1, compat);
        }
        v1
    }

    /// The card in v0.3 shape (what a v0.3-only agent would serve), from its first v0.3
    /// interface; `None` without one (the SDK raises VersionNotSupported).
    pub fn v03_card(&self) -> Option<Value> {
        let legacy: Vec<_> = self
            .supported_interfaces
            .iter()
            .filter(|i| i.dialect() == Some(Dialect::V03))
            .collect();
        let (primary, others) = legacy.split_first()?;
        let mut card = Map::new();
        let mut put = |k: &str, v: Value| {
            card.insert(k.to_owned(), v);
        };
        put("name", self.name.clone().into());
        put("description", self.description.clone().into());
        put("version", self.version.clone().into());
        put("url", primary.url.clone().into());
        put(
            "preferredTransport",
            primary.protocol_binding.clone().into(),
        );
        let version = if primary.protocol_version.is_empty() {
            PROTOCOL_VERSION_0_3
        } else {
            &primary.protocol_version
        };
        put("protocolVersion", version.into());
        if !others.is_empty() {
            let list = others
                .iter()
                .map(|i| json!({"url": i.url, "transport": i.protocol_binding}))
                .collect();
            put("additionalInterfaces", Value::Array(list));
        }
        if let Some(p) = &self.provider {
            put(
                "provider",
                json!({"url": p.url, "organization": p.organization}),
            );
        }
        if let Some(u) = &self.documentation_url {
            put("documentationUrl", u.clone().into());
        }
        if let Some(u) = &self.icon_url {
            put("iconUrl", u.clone().into());
        }
        let caps = self.capabilities.clone().unwrap_or_default();
        let mut c = Map::new();
        if let Some(s) = caps.streaming {
            c.insert("streaming".into(), s.into());
        }
        if let Some(p) = caps.push_notifications {
            c.insert("pushNotifications".into(), p.into());
        }
        if !caps.extensions.is_empty() {
            let list = caps.extensions.iter().map(extension).collect();
            c.insert("extensions".into(), Value::Array(list));
        }
        put("capabilities", Value::Object(c));
        if let Some(e) = caps.extended_agent_card {
            put("supportsAuthenticatedExtendedCard", e.into());
        }
        let schemes: Map = self
            .security_schemes
            .iter()
            .filter_map(|(k, s)| Some((k.clone(), scheme(s)?)))
            .collect();
        if !schemes.is_empty() {
            put("securitySchemes", Value::Object(schemes));
        }
        if !self.security_requirements.is_empty() {
            put("security", requirements(&self.security_requirements));
        }
        put("defaultInputModes", json!(self.default_input_modes));
        put("defaultOutputModes", json!(self.default_output_modes));
        put(
            "skills",
            Value::Array(self.skills.iter().map(skill).collect()),
        );
        if !self.signatures.is_empty() {
            let list = self
                .signatures
                .iter()
                .map(|s| {
                    let mut m = Map::new();
                    m.insert("protected".into(), s.protected.clone().into());
                    m.insert("signature".into(), s.signature.clone().into());
                    if let Some(h) = &s.header {
                        m.insert("header".into(), Value::Object(h.clone()));
                    }
                    Value::Object(m)
                })
                .collect();
            put("signatures", Value::Array(list));
        }
        Some(Value::Object(card))
    }
}

fn extension(e: &AgentExtension) -> Value {
    let mut m = Map::new();
    m.insert("uri".into(), e.uri.clone().into());
    if !e.description.is_empty() {
        m.insert("description".into(), e.description.clone().into());
    }
    m.insert("required".into(), e.required.unwrap_or(false).into());
    if let Some(p) = &e.params {
        m.insert("params".into(), Value::Object(p.clone()));
    }
    Value::Object(m)
}

fn skill(s: &AgentSkill) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), s.id.clone().into());
    m.insert("name".into(), s.name.clone().into());
    m.insert("description".into(), s.description.clone().into());
    m.insert("tags".into(), json!(s.tags));
    for (k, list) in [
        ("examples", &s.examples),
        ("inputModes", &s.input_modes),
        ("outputModes", &s.output_modes),
    ] {
        if !list.is_empty() {
            m.insert(k.into(), json!(list));
        }
    }
    if !s.security_requirements.is_empty() {
        m.insert("security".into(), requirements(&s.security_requirements));
    }
    Value::Object(m)
}

/// v1.0 `[{"schemes": {"k": {"list": [..]}}}]` as v0.3 `[{"k": [..]}]`.
fn requirements(reqs: &[SecurityRequirement]) -> Value {
    reqs.iter()
        .map(|r| {
            r.schemes
                .iter()
                .map(|(k, l)| (k.clone(), json!(l.list)))
                .collect::<Map>()
        })
        .map(Value::Object)
        .collect()
}

/// One scheme in v0.3 shape (`type` discriminator, flat members); `None` for a scheme with
/// no known kind (the SDK fails on those; the card is then served without it).
fn scheme(s: &SecurityScheme) -> Option<Value> {
    let mut m = Map::new();
    let opt = |m: &mut Map, k: &str, v: &str| {
        if !v.is_empty() {
            m.insert(k.into(), v.into());
        }
    };
    if let Some(a) = &s.api_key_security_scheme {
        m.insert("type".into(), "apiKey".into());
        m.insert("in".into(), a.location.clone().into());
        m.insert("name".into(), a.name.clone().into());
        opt(&mut m, "description", &a.description);
    } else if let Some(h) = &s.http_auth_security_scheme {
        m.insert("type".into(), "http".into());
        m.insert("scheme".into(), h.scheme.clone().into());
        opt(&mut m, "bearerFormat", &h.bearer_format);
        opt(&mut m, "description", &h.description);
    } else if let Some(o) = &s.oauth2_security_scheme {
        m.insert("type".into(), "oauth2".into());
        let mut flows = Map::new();
        // v0.3 has no device-code flow and no `pkceRequired`; the SDK drops both.
        let f = &o.flows;
        if let Some(x) = &f.authorization_code {
            flows.insert("authorizationCode".into(), flow(x, true, true));
        } else if let Some(x) = &f.client_credentials {
            flows.insert("clientCredentials".into(), flow(x, false, true));
        } else if let Some(x) = &f.implicit {
            flows.insert("implicit".into(), flow(x, true, false));
        } else if let Some(x) = &f.password {
            flows.insert("password".into(), flow(x, false, true));
        }
        m.insert("flows".into(), Value::Object(flows));
        opt(&mut m, "oauth2MetadataUrl", &o.oauth2_metadata_url);
        opt(&mut m, "description", &o.description);
    } else if let Some(o) = &s.open_id_connect_security_scheme {
        m.insert("type".into(), "openIdConnect".into());
        m.insert(
            "openIdConnectUrl".into(),
            o.open_id_connect_url.clone().into(),
        );
        opt(&mut m, "description", &o.description);
    } else if let Some(t) = &s.mtls_security_scheme {
        m.insert("type".into(), "mutualTLS".into());
        opt(&mut m, "description", &t.description);
    } else {
        return None;
    }
    Some(Value::Object(m))
}

fn flow(f: &OAuthFlow, authorization_url: bool, token_url: bool) -> Value {
    let mut m = Map::new();
    if authorization_url {
        m.insert(
            "authorizationUrl".into(),
            f.authorization_url.clone().into(),
        );
    }
    if token_url {
        m.insert("tokenUrl".into(), f.token_url.clone().into());
    }
    m.insert("scopes".into(), json!(f.scopes));
    if !f.refresh_url.is_empty() {
        m.insert("refreshUrl".into(), f.refresh_url.clone().into());
    }
    Value::Object(m)
}

/// `agent_card_to_dict`'s `merge`: members of `extra` that `base` lacks are added; objects
/// present in both are merged; lists present in both have their objects merged by position;
/// for anything else `base` wins.
fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    None => {
                        b.insert(k, v);
                    }
                    Some(existing) => merge(existing, v),
                }
            }
        }
        (Value::Array(b), Value::Array(e)) => {
            for (bi, ei) in b.iter_mut().zip(e) {
                if bi.is_object() && ei.is_object() {
                    merge(bi, ei);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::AgentInterface;

    fn card(versions: &[&str]) -> AgentCard {
        AgentCard {
            name: "g".into(),
            description: "d".into(),
            version: "1".into(),
            supported_interfaces: versions
                .iter()
                .map(|v| AgentInterface {
                    url: "http://h/a2a".into(),
                    protocol_binding: "JSONRPC".into(),
                    protocol_version: (*v).into(),
                    ..AgentInterface::default()
                })
                .collect(),
            security_schemes: [("bearer".to_owned(), SecurityScheme::http_bearer(""))].into(),
            default_input_modes: vec!["text/plain".into()],
            default_output_modes: vec!["text/plain".into()],
            skills: vec![AgentSkill {
                id: "s".into(),
                name: "S".into(),
                description: "sd".into(),
                tags: vec!["t".into()],
                ..AgentSkill::default()
            }],
            ..AgentCard::default()
        }
    }

    #[test]
    fn v1_only_cards_are_served_as_they_are() {
        let c = card(&["1.0"]);
        assert_eq!(c.served_json(), serde_json::to_value(&c).unwrap());
    }

    #[test]
    fn cards_with_a_v03_interface_carry_the_v03_members() {
        let v = card(&["1.0", "0.3"]).served_json();
        assert_eq!(v["url"], "http://h/a2a");
        assert_eq!(v["protocolVersion"], "0.3");
        assert_eq!(v["preferredTransport"], "JSONRPC");
        assert_eq!(v["capabilities"], json!({}));
        assert_eq!(
            v["securitySchemes"]["bearer"],
            json!({"httpAuthSecurityScheme": {"scheme": "Bearer"}, "type": "http", "scheme": "Bearer"})
        );
        let back: AgentCard = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
        assert_eq!(back.interfaces().len(), 2);
    }

    #[test]
    fn merge_keeps_the_base() {
        let mut b = json!({"a": 1, "o": {"x": 1}, "l": [{"p": 1}, 2]});
        merge(
            &mut b,
            json!({"a": 2, "n": 3, "o": {"x": 2, "y": 2}, "l": [{"q": 1}, {"r": 1}, 3]}),
        );
        assert_eq!(
            b,
            json!({"a": 1, "n": 3, "o": {"x": 1, "y": 2}, "l": [{"p": 1, "q": 1}, 2]})
        );
    }
}
