//! Login, logout and the session check in front of every page.
//!
//! The login form takes the admin token (compared in constant time) and sets a session cookie
//! (`HttpOnly`, `SameSite=Strict`, `Path=/ui`); the token never travels in a URL. Every POST
//! carries a CSRF token in a hidden field: the session's, or before login one the login page
//! set in a cookie of its own. With no admin token set the console is open on a loopback
//! listener and closed on any other, as the admin API.

use super::page::{self, Viewer};
use super::sessions::random_token;
use super::Console;
use crate::secret::constant_time_eq;
use axum::extract::{Form, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

/// The session cookie.
const SESSION_COOKIE: &str = "ldp_console";
/// The cookie the login form's CSRF token is checked against.
const LOGIN_COOKIE: &str = "ldp_console_login";

/// How the console is entered now.
enum Access {
    /// With this token (the admin token).
    Token(String),
    /// Without a login: no token set, loopback listener.
    Open,
    /// Not at all: no token set, a listener others reach.
    Closed,
}

fn access(c: &Console) -> Access {
    let token = std::env::var(&c.app.config.admin.token_env)
        .ok()
        .filter(|t| !t.is_empty());
    match token {
        Some(t) => Access::Token(t),
        None if c.app.config.admin.listen.ip().is_loopback() => Access::Open,
        None => Access::Closed,
    }
}

/// The value of cookie `name` in `headers`.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn set_cookie(name: &str, value: &str, max_age_secs: u64) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age={max_age_secs}"
    ))
    .ok()
}

/// Lets a request through with its [`Viewer`] when it has a live session (or the console is
/// open); else a GET is sent to the login page and a POST refused.
pub async fn require_session(State(c): State<Console>, mut req: Request, next: Next) -> Response {
    let viewer = match access(&c) {
        Access::Open => Some(Viewer::Open),
        Access::Closed => None,
        Access::Token(_) => cookie(req.headers(), SESSION_COOKIE)
            .and_then(|id| c.sessions.get(id))
            .map(|s| Viewer::Session { csrf: s.csrf }),
    };
    match viewer {
        Some(v) => {
            req.extensions_mut().insert(v);
            next.run(req).await
        }
        None if req.method() == Method::GET || req.method() == Method::HEAD => {
            Redirect::to("/ui/login").into_response()
        }
        None => page::bare(
            StatusCode::FORBIDDEN,
            "Not logged in",
            html! { p { a href="/ui/login" { "Log in" } } },
        ),
    }
}

/// The login page (with `error` shown), and a fresh CSRF cookie for its form.
fn form(status: StatusCode, error: Option<&str>, closed: bool) -> Response {
    let csrf = random_token();
    let body = html! {
        @if closed {
            p.error role="alert" {
                "No admin token is set and the admin listener is not loopback: the console, like "
                "the admin API, is closed. Set the variable named by [admin] token_env."
            }
        }
        @if let Some(e) = error {
            p.error role="alert" { (e) }
        }
        form.login method="post" action="/ui/login" {
            input type="hidden" name="csrf" value=(csrf);
            label for="token" { "Admin token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            button type="submit" { "Log in" }
        }
        p.note { "The token is the admin API's bearer token ([admin] token_env). A session lasts 12 hours." }
    };
    let mut resp = page::bare(status, "Log in", body);
    if let Some(v) = set_cookie(LOGIN_COOKIE, &csrf, 3600) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// `GET /ui/login`. Open console: straight to the fleet.
pub async fn login_form(State(c): State<Console>) -> Response {
    match access(&c) {
        Access::Open => Redirect::to("/ui/fleet").into_response(),
        Access::Token(_) => form(StatusCode::OK, None, false),
        Access::Closed => form(StatusCode::FORBIDDEN, None, true),
    }
}

/// The login form's fields.
#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    csrf: String,
}

/// `POST /ui/login`.
pub async fn login(
    State(c): State<Console>,
    headers: HeaderMap,
    f: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = f else {
        return form(
            StatusCode::BAD_REQUEST,
            Some("The form was not readable."),
            false,
        );
    };
    let csrf_ok = cookie(&headers, LOGIN_COOKIE)
        .is_some_and(|expected| constant_time_eq(expected.as_bytes(), f.csrf.as_bytes()));
    if !csrf_ok {
        return form(
            StatusCode::FORBIDDEN,
            Some("The form expired or did not come from this page; try again."),
            false,
        );
    }
    let expected = match access(&c) {
        Access::Token(t) => t,
        Access::Open => return Redirect::to("/ui/fleet").into_response(),
        Access::Closed => return form(StatusCode::FORBIDDEN, None, true),
    };
    if !constant_time_eq(f.token.as_bytes(), expected.as_bytes()) {
        return form(StatusCode::UNAUTHORIZED, Some("Wrong token."), false);
    }
    let (id, _) = c.sessions.open();
    let mut resp = Redirect::to("/ui/fleet").into_response();
    let lifetime = super::sessions::LIFETIME.as_secs();
    for v in [
        set_cookie(SESSION_COOKIE, &id, lifetime),
        set_cookie(LOGIN_COOKIE, "", 0),
    ]
    .into_iter()
    .flatten()
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// The logout form's field.
#[derive(Deserialize)]
pub struct LogoutForm {
    csrf: String,
}

/// `POST /ui/logout`: ends the session when its CSRF token is given.
pub async fn logout(
    State(c): State<Console>,
    headers: HeaderMap,
    f: Result<Form<LogoutForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let id = cookie(&headers, SESSION_COOKIE).unwrap_or("");
    let session = c.sessions.get(id);
    let ok = match (&session, &f) {
        (Some(s), Ok(Form(f))) => constant_time_eq(s.csrf.as_bytes(), f.csrf.as_bytes()),
        _ => false,
    };
    if !ok {
        return page::bare(
            StatusCode::FORBIDDEN,
            "Refused",
            html! { p { "The form's CSRF token is missing or wrong." } p { a href="/ui/fleet" { "Back" } } },
        );
    }
    c.sessions.close(id);
    let mut resp = Redirect::to("/ui/login").into_response();
    if let Some(v) = set_cookie(SESSION_COOKIE, "", 0) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}
