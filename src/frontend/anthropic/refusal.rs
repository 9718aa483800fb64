//! Anthropic's form of an error answer, `{"type": "error", "error": {"type", "message"}}`,
//! with the status the gateway's one table gives the error's kind — a 503 (the gateway or its
//! shared state overloaded) told as Anthropic tells it, 529 `overloaded_error` — or, for a
//! chat delegate's own refusal of the request, the status it answered.

use crate::frontend::api_error::{ApiError, ErrorKind, Form, Telling};
use crate::ldp::LdpError;
use anthropic_wire::{error_type, ErrorBody};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Anthropic's overloaded status.
const OVERLOADED: u16 = 529;

/// How an error is written on the Anthropic routes.
#[derive(Debug, Default)]
struct AnthropicForm {
    /// The status, when it is not the kind's (an upstream's own refusal, passed on).
    status: Option<StatusCode>,
    /// The error's type, when it is not the status's (an upstream's own).
    kind: Option<String>,
    /// The message, when it is not the LDP error's.
    message: Option<String>,
}

impl Form for AnthropicForm {
    fn write(
        self: Box<Self>,
        error: &LdpError,
        _kind: ErrorKind,
        told: Telling,
    ) -> (StatusCode, Response) {
        let status = self.status.unwrap_or(match told.status {
            StatusCode::SERVICE_UNAVAILABLE => {
                StatusCode::from_u16(OVERLOADED).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
            }
            s => s,
        });
        let kind = self
            .kind
            .unwrap_or_else(|| error_type(status.as_u16()).to_owned());
        let message = self.message.unwrap_or_else(|| error.message.clone());
        let body = axum::Json(ErrorBody::new(&kind, message)).into_response();
        (status, body)
    }
}

/// An error in Anthropic's form.
pub(crate) trait AnthropicErrors: Sized {
    /// Written in Anthropic's form (a form already given is kept).
    fn anthropic(self) -> Self;
    /// A chat delegate's own refusal of the request (`error`, the TASK_FAILED `BAD_REQUEST`
    /// the task was answered with), passed on with its status, type and message.
    fn anthropic_upstream(error: LdpError, refusal: crate::chat::Refusal) -> Self;
}

impl AnthropicErrors for ApiError {
    fn anthropic(self) -> Self {
        if self.has_form() {
            return self;
        }
        self.in_form(AnthropicForm::default())
    }

    fn anthropic_upstream(error: LdpError, refusal: crate::chat::Refusal) -> Self {
        let status = StatusCode::from_u16(refusal.status).ok();
        // Another provider's type is kept when Anthropic has the same one.
        let kind = refusal
            .kind
            .filter(|k| *k == error_type(refusal.status))
            .unwrap_or_else(|| error_type(refusal.status).to_owned());
        ApiError::task_failed(error).in_form(AnthropicForm {
            status,
            kind: Some(kind),
            message: Some(refusal.message),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldp::error::GatewayCode;

    async fn answer(e: ApiError) -> (u16, serde_json::Value) {
        let resp = e.anthropic().into_response();
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn each_kind_has_anthropics_status_and_type() {
        let cases = [
            (GatewayCode::BadRequest, 400, "invalid_request_error"),
            (GatewayCode::Unauthenticated, 401, "authentication_error"),
            (GatewayCode::BudgetExceeded, 403, "permission_error"),
            (GatewayCode::NoEligibleDelegate, 404, "not_found_error"),
            (GatewayCode::RateLimited, 429, "rate_limit_error"),
            (GatewayCode::Internal, 500, "api_error"),
            (GatewayCode::Unavailable, 529, "overloaded_error"),
        ];
        for (code, status, kind) in cases {
            let (s, body) = answer(ApiError::new(code, "why")).await;
            assert_eq!(
                (s, body["error"]["type"].as_str()),
                (status, Some(kind)),
                "{code:?}"
            );
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["message"], "why");
        }
        let refusal = crate::chat::Refusal {
            status: 400,
            message: "prompt is too long".into(),
            kind: Some("invalid_request_error".into()),
            param: None,
            code: None,
        };
        let e =
            ApiError::anthropic_upstream(LdpError::gateway(GatewayCode::BadRequest, "x"), refusal);
        let (s, body) = answer(e).await;
        assert_eq!(
            (s, body["error"]["message"].as_str()),
            (400, Some("prompt is too long"))
        );
    }
}
