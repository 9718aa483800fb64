//! OpenAI's form of an error answer, `{"error": {"message", "type", "param", "code"}}`, with
//! the status the gateway's one table gives the error's kind (or, for an OpenAI-backed
//! delegate's own refusal of the request, the status it answered).

use crate::frontend::api_error::{ApiError, ErrorKind, Form, Telling};
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use openai_wire::ErrorDetail;

/// How an error is written on the OpenAI routes.
#[derive(Debug, Default)]
struct OpenAiForm {
    /// The status, when it is not the kind's (an upstream's own refusal, passed on).
    status: Option<StatusCode>,
    /// The fields, when they are not derived from the LDP error.
    detail: Option<ErrorDetail>,
    /// The request field at fault.
    param: Option<String>,
}

impl Form for OpenAiForm {
    fn write(
        self: Box<Self>,
        error: &LdpError,
        kind: ErrorKind,
        told: Telling,
    ) -> (StatusCode, Response) {
        let OpenAiForm {
            status,
            detail,
            param,
        } = *self;
        let status = status.unwrap_or(told.status);
        let detail = detail.unwrap_or_else(|| ErrorDetail {
            message: error.message.clone(),
            kind: Some(openai_type(status).to_owned()),
            param,
            code: Some(serde_json::Value::String(openai_code(kind, told))),
        });
        let body = axum::Json(serde_json::json!({ "error": detail })).into_response();
        (status, body)
    }
}

/// An error in OpenAI's form.
pub trait OpenAiErrors: Sized {
    /// Written in OpenAI's form (a form already given, such as [`Self::openai_param`]'s, is
    /// kept).
    fn openai(self) -> Self;
    /// In OpenAI's form, naming the request field at fault.
    fn openai_param(self, param: impl Into<String>) -> Self;
    /// In OpenAI's form with exactly these fields (OpenAI's own answer to a case the gateway's
    /// codes do not name, such as an unknown URL).
    fn openai_detail(self, detail: ErrorDetail) -> Self;
    /// An OpenAI-backed delegate's own refusal of the request (`error`, the TASK_FAILED
    /// `BAD_REQUEST` the task was answered with), passed on with its status and fields.
    fn openai_upstream(error: LdpError, status: u16, detail: ErrorDetail) -> Self;
}

impl OpenAiErrors for ApiError {
    fn openai(self) -> Self {
        if self.has_form() {
            return self;
        }
        self.in_form(OpenAiForm::default())
    }

    fn openai_param(self, param: impl Into<String>) -> Self {
        self.in_form(OpenAiForm {
            param: Some(param.into()),
            ..OpenAiForm::default()
        })
    }

    fn openai_detail(self, detail: ErrorDetail) -> Self {
        self.in_form(OpenAiForm {
            detail: Some(detail),
            ..OpenAiForm::default()
        })
    }

    fn openai_upstream(error: LdpError, status: u16, detail: ErrorDetail) -> Self {
        ApiError::task_failed(error).in_form(OpenAiForm {
            status: StatusCode::from_u16(status).ok(),
            detail: Some(detail),
            param: None,
        })
    }
}

/// OpenAI's `type` for an HTTP status.
fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// The `code` of an error in OpenAI's form: OpenAI's own name where it has one
/// (`invalid_api_key`, `model_not_found`, `rate_limit_exceeded`), else the metric code.
fn openai_code(kind: ErrorKind, telling: Telling) -> String {
    match kind {
        ErrorKind::Code(GatewayCode::Unauthenticated) => "invalid_api_key",
        ErrorKind::Code(GatewayCode::RateLimited) => "rate_limit_exceeded",
        ErrorKind::NoRoute => "model_not_found",
        _ => telling.code,
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(e: ApiError) -> (StatusCode, serde_json::Value) {
        use http_body_util::BodyExt;
        let resp = e.into_response();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn openai_routes_get_openais_shape_with_the_same_statuses() {
        let (st, b) = body_of(ApiError::new(GatewayCode::Unauthenticated, "no key").openai()).await;
        assert_eq!(st, StatusCode::UNAUTHORIZED);
        assert_eq!(b["error"]["code"], "invalid_api_key");
        assert_eq!(b["error"]["type"], "authentication_error");
        assert_eq!(b["error"]["message"], "no key");
        let e = ApiError::new(GatewayCode::BadRequest, "bad").openai_param("messages");
        let (st, b) = body_of(e).await;
        assert_eq!(
            (st, &b["error"]["param"]),
            (StatusCode::BAD_REQUEST, &"messages".into())
        );
        let budget = LdpError::gateway(GatewayCode::BudgetExceeded, "over");
        let (st, b) = body_of(ApiError::task_failed(budget).openai()).await;
        assert_eq!(
            (st, &b["error"]["code"]),
            (StatusCode::FORBIDDEN, &"budget_exceeded".into())
        );
        // A delegate's own code is its failure: 502.
        let own = LdpError::upstream_failed("delegate failed", false);
        let own = LdpError {
            code: "MODEL_OVERLOADED".into(),
            ..own
        };
        assert_eq!(
            body_of(ApiError::task_failed(own).openai()).await.0,
            StatusCode::BAD_GATEWAY
        );
        // An upstream's refusal passes on as it came.
        let detail = ErrorDetail {
            message: "too long".into(),
            kind: Some("invalid_request_error".into()),
            param: Some("messages".into()),
            code: Some("context_length_exceeded".into()),
        };
        let error = LdpError::gateway(GatewayCode::BadRequest, "refused");
        let e = ApiError::openai_upstream(error, 400, detail);
        let (st, b) = body_of(e).await;
        assert_eq!(st, StatusCode::BAD_REQUEST);
        assert_eq!(b["error"]["code"], "context_length_exceeded");
        assert_eq!(b["error"]["message"], "too long");
        // The LDP routes keep theirs.
        let (_, b) = body_of(ApiError::new(GatewayCode::Unauthenticated, "no key")).await;
        assert_eq!(b["error"]["code"], "UNAUTHENTICATED");
    }
}
