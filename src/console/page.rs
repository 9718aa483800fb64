//! The frame of every console page: head, navigation, the logout button, and small helpers
//! for numbers. maud escapes every value put into a page.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

/// Who is looking: a logged-in session (its CSRF token for the logout form) or, with no admin
/// token on a loopback listener, anyone (as the admin API).
#[derive(Debug, Clone)]
pub enum Viewer {
    /// Logged in.
    Session {
        /// The session's CSRF token.
        csrf: String,
    },
    /// No admin token set, loopback listener: no login.
    Open,
}

/// The navigation: path and label.
const NAV: [(&str, &str); 5] = [
    ("/ui/fleet", "Fleet"),
    ("/ui/route", "Explain"),
    ("/ui/ledger", "Ledger"),
    ("/ui/spend", "Spend"),
    ("/ui/policies", "Policies"),
];

/// A whole page: `title`, the navigation with `active` marked, and `body`.
pub fn render(title: &str, active: &str, viewer: &Viewer, body: Markup) -> Response {
    page(StatusCode::OK, title, active, viewer, body)
}

/// A whole page with `status`.
pub fn page(
    status: StatusCode,
    title: &str,
    active: &str,
    viewer: &Viewer,
    body: Markup,
) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · LDP Gateway" }
                link rel="stylesheet" href="/ui/static/console.css";
            }
            body {
                header.top {
                    a.brand href="/ui/fleet" { "LDP Gateway" }
                    nav aria-label="Console" {
                        @for (href, label) in NAV {
                            @if href == active {
                                a.active href=(href) aria-current="page" { (label) }
                            } @else {
                                a href=(href) { (label) }
                            }
                        }
                    }
                    @match viewer {
                        Viewer::Session { csrf } => {
                            form.logout method="post" action="/ui/logout" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                        Viewer::Open => {
                            span.note title="No admin token is set; the listener is loopback only" { "open (loopback, no token)" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    (status, Html(doc.into_string())).into_response()
}

/// A bare page (login, errors before a session): no navigation.
pub fn bare(status: StatusCode, title: &str, body: Markup) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · LDP Gateway" }
                link rel="stylesheet" href="/ui/static/console.css";
            }
            body.bare {
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    (status, Html(doc.into_string())).into_response()
}

/// `v` with `digits` decimals, or a dash.
pub fn num(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite())
        .map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// A cost in dollars, or a dash.
pub fn usd(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite())
        .map_or_else(|| "–".to_owned(), |v| format!("${v:.6}"))
}

/// `v`, or a dash.
pub fn or_dash(v: Option<&str>) -> &str {
    v.unwrap_or("–")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped() {
        let name = "<img src=x onerror=alert(1)>";
        let m = html! { td { (name) } }.into_string();
        assert_eq!(m, "<td>&lt;img src=x onerror=alert(1)&gt;</td>");
        assert_eq!(num(Some(0.12345), 2), "0.12");
        assert_eq!(num(None, 2), "–");
        assert_eq!(usd(Some(f64::NAN)), "–");
    }
}
