//! HTTPS to delegates (the `tls` feature): reqwest with rustls, no redirects. Plain HTTP, the
//! hot path, goes through [`super::pool`]; this is the same exchange over TLS.

use super::pool::Req;
use crate::Error;
use bytes::Bytes;
use hyper::StatusCode;
use std::time::Duration;

/// The HTTPS client.
#[derive(Clone)]
pub(super) struct Tls {
    http: reqwest::Client,
}

impl Tls {
    pub(super) fn new(connect_timeout: Duration, idle_timeout: Duration) -> Tls {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(idle_timeout)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Tls { http }
    }

    async fn start(
        &self,
        url: &str,
        req: &Req<'_>,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, Error> {
        let mut r = match &req.body {
            // JSON unless the caller's headers say otherwise (an OTLP export's protobuf).
            Some(body) if req.headers.iter().any(|(n, _)| n == "content-type") => {
                self.http.post(url).body(body.clone())
            }
            Some(body) => self
                .http
                .post(url)
                .header("content-type", "application/json")
                .body(body.clone()),
            None => self.http.get(url),
        };
        if req.events {
            r = r.header("accept", "text/event-stream");
        }
        if let Some(n) = req.forward.hops {
            r = r.header(super::HOPS_HEADER, n);
        }
        for (name, value) in req.headers.iter().chain(req.forward.trace) {
            r = r.header(name, value);
        }
        if let Some(t) = timeout {
            r = r.timeout(t);
        }
        let after = timeout.unwrap_or_default();
        r.send()
            .await
            .map_err(|e| unanswered(classify(url, after, e)))
    }

    /// [`super::pool::Pool::exchange`] over TLS.
    pub(super) async fn exchange(
        &self,
        base: &str,
        req: &Req<'_>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<(super::head::Head, Bytes), Error> {
        let url = format!("{base}{}", req.path);
        let mut resp = self.start(&url, req, Some(timeout)).await?;
        let status =
            StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let head = super::head::Head::of(status, resp.headers());
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(&url, timeout, e))? {
            if bytes.len() + chunk.len() > max_bytes {
                return Err(Error::Malformed {
                    url,
                    reason: format!("answer larger than {max_bytes} bytes"),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((head, bytes.into()))
    }

    /// [`super::pool::Pool::open`] over TLS (the caller holds the deadline).
    pub(super) async fn open(
        &self,
        base: &str,
        req: &Req<'_>,
    ) -> Result<(super::head::Head, Body), Error> {
        let url = format!("{base}{}", req.path);
        let resp = self.start(&url, req, None).await?;
        let status =
            StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let head = super::head::Head::of(status, resp.headers());
        Ok((head, Body(resp)))
    }
}

/// An answer's body being read over TLS.
pub(super) struct Body(reqwest::Response);

impl Body {
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        self.0.chunk().await.map_err(|e| e.to_string())
    }
}

/// A reqwest failure as an [`Error`]: a timeout, no connection, or a broken exchange.
fn classify(url: &str, timeout: Duration, e: reqwest::Error) -> Error {
    if e.is_timeout() {
        return Error::Timeout {
            url: url.to_owned(),
            after: timeout,
        };
    }
    // The source chain carries the useful part ("Connection refused").
    let mut reason = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        reason = s.to_string();
        src = s.source();
    }
    if e.is_connect() {
        Error::Connect {
            url: url.to_owned(),
            reason,
        }
    } else {
        Error::Broken {
            url: url.to_owned(),
            reason,
        }
    }
}

/// A transport failure before the answer's head arrived: the delegate never answered, so the
/// task may go to another.
fn unanswered(e: Error) -> Error {
    match e {
        Error::Broken { url, reason } => Error::Unanswered { url, reason },
        other => other,
    }
}
