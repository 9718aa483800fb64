//! HELLO and SESSION_PROPOSE: the capability manifest, the trust check and payload-mode
//! negotiation that open a client session.

use super::{owner, Proxy, RequestCtx, GATEWAY_MODES};
use crate::ldp::error::GatewayCode;
use crate::ldp::negotiate;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, SessionConfig};
use crate::session::NewSession;
use crate::state::{OpenError, SessionStore};
use std::time::Duration;

impl Proxy {
    pub(super) fn hello(&self, env: &Envelope) -> Envelope {
        let card = self.identity_card(None);
        env.reply(
            self.id(),
            Body::CapabilityManifest {
                capabilities: crate::ldp::CapabilityManifest {
                    capabilities: card.capabilities,
                    supported_modes: GATEWAY_MODES.to_vec(),
                },
            },
            PayloadMode::Text,
        )
    }

    pub(super) fn reject(&self, env: &Envelope, code: GatewayCode, reason: String) -> Envelope {
        env.reply(
            self.id(),
            Body::SessionReject {
                error: Some(LdpError::gateway(code, reason.clone())),
                reason,
            },
            PayloadMode::Text,
        )
    }

    pub(super) async fn propose(
        &self,
        env: &Envelope,
        config: &SessionConfig,
        ctx: &RequestCtx,
    ) -> Envelope {
        let own = &self.cfg.identity.trust_domain;
        let tenant = &ctx.tenant;
        let claimed = match (&config.trust_domain, &tenant.trust_domains) {
            (Some(c), _) => c.clone(),
            (None, Some(list)) => list.first().cloned().unwrap_or_else(|| own.name.clone()),
            (None, None) => own.name.clone(),
        };
        match &tenant.trust_domains {
            // With tenants, the claim must be one the tenant owns.
            Some(list) if !list.contains(&claimed) => {
                let reason = format!("trust domain '{claimed}' is not one this tenant may claim");
                return self.reject(env, GatewayCode::TrustViolation, reason);
            }
            Some(_) => {}
            // Without tenants, RFC §7.2: the gateway's own domain must trust the claim.
            None if !own.trusts(&claimed) => {
                let reason = format!(
                    "client trust domain '{claimed}' is not trusted by gateway domain '{}'",
                    own.name
                );
                return self.reject(env, GatewayCode::TrustViolation, reason);
            }
            None => {}
        }
        if let Some(required) = &config.required_trust_domain {
            let any = self
                .registry
                .snapshot()
                .iter()
                .any(|d| d.card().is_some_and(|c| &c.trust_domain.name == required));
            if !any {
                let reason =
                    format!("no registered delegate is in required trust domain '{required}'");
                return self.reject(env, GatewayCode::TrustViolation, reason);
            }
        }
        if let Some(name) = &config.policy {
            if self.policies.load().get(name).is_none() {
                let reason = format!("unknown policy '{name}'");
                return self.reject(env, GatewayCode::UnknownPolicy, reason);
            }
            if !tenant.may_use(name) {
                let reason = format!("policy '{name}' is not allowed for this tenant");
                return self.reject(env, GatewayCode::UnknownPolicy, reason);
            }
        }
        let payload = negotiate(&config.preferences(), &GATEWAY_MODES);
        // Validation keeps max_ttl ≥ 1 s; the `max` keeps `clamp` from panicking regardless.
        let floor = Duration::from_secs(1);
        let ttl = config
            .ttl_secs
            .map(Duration::from_secs)
            .unwrap_or(self.cfg.sessions.default_ttl)
            .clamp(floor, self.cfg.sessions.max_ttl.max(floor));
        let opened = self.sessions.open(
            NewSession {
                owner: owner(ctx, env),
                tenant: tenant.name.clone(),
                client_domain: claimed,
                required_domain: config.required_trust_domain.clone(),
                payload: payload.clone(),
                policy: config.policy.clone(),
                ttl,
            },
            self.cfg.security.max_sessions,
            // A tenant without a cap of its own is held to its share of the overall one: one
            // tenant's sessions cannot take every slot from the others (docs/TABLES.md).
            tenant.max_sessions.or(Some(
                self.cfg.security.max_sessions / self.tenants().all().len().max(1),
            )),
        );
        let session = match opened.await {
            Ok(s) => s,
            Err(OpenError::Limit(e)) => {
                return self.reject(env, GatewayCode::SessionLimit, e.to_string())
            }
            Err(e @ OpenError::Unavailable(_)) => {
                return self.reject(env, GatewayCode::Unavailable, e.to_string())
            }
        };
        tracing::debug!(session_id = %session.id, mode = %payload.mode, "session accepted");
        let mut reply = env.reply(
            self.id(),
            Body::SessionAccept {
                session_id: session.id.to_string(),
                negotiated_mode: payload.mode,
                fallback_chain: payload.fallback_chain,
            },
            PayloadMode::Text,
        );
        reply.session_id = session.id.clone();
        reply
    }
}
