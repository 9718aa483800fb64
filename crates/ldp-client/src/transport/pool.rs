//! Plain-HTTP/1.1 keep-alive connections to delegates on hyper's connection API: the hot
//! path's client. Each base URL is parsed once into an [`Origin`] holding its idle
//! connections, so a request costs a pool pop, one write and one read — no URL parsing, no
//! header map beyond two fixed headers, no DNS lookup (only a new connection resolves).

use crate::Error;
use bytes::Bytes;
use dashmap::DashMap;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most idle connections kept per delegate (split evenly among the lanes).
const MAX_IDLE: usize = 1024;

/// The hot route, whose URI each origin parses once.
pub(super) const MESSAGES: &str = "/ldp/messages";

/// One side of a connection: where requests are written.
type Conn = SendRequest<Full<Bytes>>;

/// A request: a GET, or a POST of a JSON body; to a path below the base URL.
pub(super) struct Req<'a> {
    /// Below the base URL (`/ldp/messages`, `/ldp/stream`, `/ldp/identity`, …).
    pub(super) path: &'static str,
    /// The JSON to POST; `None` for a GET.
    pub(super) body: Option<Bytes>,
    /// `x-ldp-hops` and the trace context, for a forwarded task.
    pub(super) forward: super::Forward<'a>,
    /// Asks for Server-Sent Events.
    pub(super) events: bool,
    /// The transport's own headers (a client's `Authorization`, `x-ldp-policy`).
    pub(super) headers: &'a [(HeaderName, HeaderValue)],
}

/// An answer's body being read (a stream), holding its connection until the end.
pub(super) struct Body {
    body: Incoming,
    conn: Option<(Arc<Origin>, Conn)>,
    idle_timeout: Duration,
}

impl Body {
    /// The next piece of data; `None` at the end, when the connection is returned to the pool.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
                Some(Err(e)) => return Err(error_chain(&e)),
                None => {
                    if let Some((origin, mut tx)) = self.conn.take() {
                        if tx.ready().await.is_ok() {
                            origin.checkin(tx, self.idle_timeout);
                        }
                    }
                    return Ok(None);
                }
            }
        }
    }
}

/// A delegate's address, parsed once, and its idle connections (most recent last).
pub(super) struct Origin {
    authority: String,
    host: HeaderValue,
    /// The base URL's path, for routes other than the hot one.
    prefix: String,
    /// `prefix` + `/ldp/messages`, parsed once.
    messages: Uri,
    /// Per lane (see [`lane`]).
    idle: [Mutex<Vec<Idle>>; LANES],
}

/// Idle connections are kept per thread ("lane"), so that on a gateway serving one
/// current-thread runtime per core a connection is made, driven and reused by one thread,
/// never handed between threads. Threads past `LANES` share lanes (still correct).
const LANES: usize = 8;

/// This thread's lane.
fn lane() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % LANES;
    }
    LANE.with(|l| *l)
}

struct Idle {
    tx: Conn,
    since: Instant,
}

impl Origin {
    /// `http://host:port[/prefix]` → its parts; `None` for anything else.
    fn parse(base: &str) -> Option<Origin> {
        let rest = base.strip_prefix("http://")?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        Some(Origin {
            authority: authority.to_owned(),
            host: HeaderValue::from_str(authority).ok()?,
            prefix: prefix.to_owned(),
            messages: Uri::try_from(format!("{prefix}/ldp/messages")).ok()?,
            idle: std::array::from_fn(|_| Mutex::new(Vec::new())),
        })
    }

    /// Where `path` is on this origin.
    fn uri(&self, path: &str) -> Option<Uri> {
        if path == MESSAGES {
            return Some(self.messages.clone());
        }
        Uri::try_from(format!("{}{path}", self.prefix)).ok()
    }

    /// The most recently used idle connection, if one is younger than `max_age`.
    fn checkout(&self, max_age: Duration) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle[lane()].lock().ok()?;
        while let Some(c) = idle.pop() {
            if c.since.elapsed() < max_age && !c.tx.is_closed() {
                return Some(c.tx);
            }
        }
        None
    }

    /// Returns a connection whose exchange completed; the oldest ones beyond the cap or past
    /// `max_age` are closed.
    fn checkin(&self, tx: SendRequest<Full<Bytes>>, max_age: Duration) {
        if tx.is_closed() {
            return;
        }
        let Ok(mut idle) = self.idle[lane()].lock() else {
            return;
        };
        let stale = idle
            .iter()
            .take_while(|c| c.since.elapsed() >= max_age)
            .count()
            .max((idle.len() + 1).saturating_sub(MAX_IDLE / LANES));
        idle.drain(..stale);
        idle.push(Idle {
            tx,
            since: Instant::now(),
        });
    }
}

/// Keep-alive connections to every delegate the gateway has called over plain HTTP.
pub(super) struct Pool {
    origins: DashMap<String, Arc<Origin>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

impl Pool {
    pub(super) fn new(connect_timeout: Duration, idle_timeout: Duration) -> Pool {
        Pool {
            origins: DashMap::new(),
            connect_timeout,
            idle_timeout,
        }
    }

    /// Whether this pool serves `base` (plain `http://`; HTTPS goes through `tls.rs`).
    pub(super) fn serves(base: &str) -> bool {
        base.starts_with("http://")
    }

    fn origin(&self, base: &str) -> Option<Arc<Origin>> {
        if let Some(o) = self.origins.get(base) {
            return Some(o.clone());
        }
        let origin = Arc::new(Origin::parse(base)?);
        Some(
            self.origins
                .entry(base.to_owned())
                .or_insert(origin)
                .value()
                .clone(),
        )
    }

    /// `req` to `base` as an HTTP request on this origin.
    fn request(
        &self,
        origin: &Origin,
        req: &Req<'_>,
        url: &str,
    ) -> Result<Request<Full<Bytes>>, Error> {
        let malformed = |reason: String| Error::Malformed {
            url: url.to_owned(),
            reason,
        };
        let uri = origin
            .uri(req.path)
            .ok_or_else(|| malformed("not a valid request path".into()))?;
        let mut r = Request::builder()
            .method(if req.body.is_some() {
                Method::POST
            } else {
                Method::GET
            })
            .uri(uri)
            .header(HOST, origin.host.clone());
        // JSON unless the caller's headers say otherwise (an OTLP export's protobuf).
        if req.body.is_some() && !req.headers.iter().any(|(n, _)| n == CONTENT_TYPE) {
            r = r.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if req.events {
            r = r.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(n) = req.forward.hops {
            r = r.header(super::HOPS_HEADER, HeaderValue::from(n));
        }
        for (name, value) in req.headers.iter().chain(req.forward.trace) {
            r = r.header(name, value);
        }
        // A `Bytes` clone shares the buffer.
        let body = req.body.clone().unwrap_or_default();
        r.body(Full::new(body))
            .map_err(|e| malformed(e.to_string()))
    }

    /// Sends `req` and waits for the answer's head.
    async fn start(
        &self,
        base: &str,
        req: &Req<'_>,
        url: &str,
    ) -> Result<(Arc<Origin>, Conn, hyper::Response<Incoming>), Error> {
        let Some(origin) = self.origin(base) else {
            return Err(Error::Malformed {
                url: url.to_owned(),
                reason: "not an http://host:port[/path] URL".into(),
            });
        };
        let request = self.request(&origin, req, url)?;
        let (tx, resp) = self
            .send(&origin, request)
            .await
            .map_err(|reason| match reason {
                SendError::Connect(reason) => Error::Connect {
                    url: url.to_owned(),
                    reason,
                },
                SendError::Unanswered(reason) => Error::Unanswered {
                    url: url.to_owned(),
                    reason,
                },
            })?;
        Ok((origin, tx, resp))
    }

    /// Sends `req` to `base` and reads the whole answer, at most `max_bytes` of it, all within
    /// `timeout`. Errors follow [`Error`]'s contract: `Connect` (no connection), `Unanswered`
    /// (the connection failed before the answer's head), `Broken` (it failed during the
    /// answer), `Timeout`, `Malformed` (too large).
    pub(super) async fn exchange(
        &self,
        base: &str,
        req: &Req<'_>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<(super::head::Head, Bytes), Error> {
        let url = || format!("{base}{}", req.path);
        let exchange = async {
            let (origin, mut tx, resp) = self.start(base, req, &url()).await?;
            let head = super::head::Head::of(resp.status(), resp.headers());
            let body = Limited::new(resp.into_body(), max_bytes)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        Error::Malformed {
                            url: url(),
                            reason: format!("answer larger than {max_bytes} bytes"),
                        }
                    } else {
                        Error::Broken {
                            url: url(),
                            reason: error_chain(&*e),
                        }
                    }
                })?
                .to_bytes();
            // The answer was read to its end: the connection is free for the next request.
            if tx.ready().await.is_ok() {
                origin.checkin(tx, self.idle_timeout);
            }
            Ok((head, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    url: url(),
                    after: timeout,
                })
            })
    }

    /// Sends `req` to `base` and returns the answer's status and its body to read piece by
    /// piece (a stream); the connection goes back to the pool once the body is read to its end.
    pub(super) async fn open(
        &self,
        base: &str,
        req: &Req<'_>,
    ) -> Result<(super::head::Head, Body), Error> {
        let url = format!("{base}{}", req.path);
        let (origin, tx, resp) = self.start(base, req, &url).await?;
        let head = super::head::Head::of(resp.status(), resp.headers());
        Ok((
            head,
            Body {
                body: resp.into_body(),
                conn: Some((origin, tx)),
                idle_timeout: self.idle_timeout,
            },
        ))
    }

    /// Sends on an idle connection, or a new one if there is none or the idle one turns out
    /// closed before the request was written (the keep-alive race with a delegate closing it).
    async fn send(
        &self,
        origin: &Origin,
        req: Request<Full<Bytes>>,
    ) -> Result<
        (
            SendRequest<Full<Bytes>>,
            hyper::Response<hyper::body::Incoming>,
        ),
        SendError,
    > {
        let mut req = req;
        while let Some(mut tx) = origin.checkout(self.idle_timeout) {
            if tx.ready().await.is_err() {
                continue;
            }
            match tx.try_send_request(req).await {
                Ok(resp) => return Ok((tx, resp)),
                Err(mut e) => match e.take_message() {
                    // Not written: safe to send again on another connection.
                    Some(back) => req = back,
                    None => return Err(SendError::Unanswered(error_chain(&e.into_error()))),
                },
            }
        }
        let mut tx = self.connect(origin).await?;
        match tx.send_request(req).await {
            Ok(resp) => Ok((tx, resp)),
            Err(e) => Err(SendError::Unanswered(error_chain(&e))),
        }
    }

    async fn connect(&self, origin: &Origin) -> Result<SendRequest<Full<Bytes>>, SendError> {
        let connect = tokio::net::TcpStream::connect(origin.authority.as_str());
        let stream = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(SendError::Connect(e.to_string())),
            Err(_) => {
                return Err(SendError::Connect(format!(
                    "no connection within {:?}",
                    self.connect_timeout
                )))
            }
        };
        // Small request/answer exchanges: never wait for Nagle.
        let _ = stream.set_nodelay(true);
        let io = hyper_util::rt::TokioIo::new(stream);
        let (tx, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| SendError::Connect(error_chain(&e)))?;
        let authority = origin.authority.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(delegate = %authority, error = %e, "upstream connection ended");
            }
        });
        Ok(tx)
    }

    /// Where `base`'s messages go (tests).
    #[cfg(test)]
    fn messages_uri(&self, base: &str) -> Option<String> {
        self.origin(base).map(|o| o.messages.to_string())
    }
}

enum SendError {
    Connect(String),
    Unanswered(String),
}

/// The innermost cause's text ("Connection refused"), which says the most.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut reason = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        reason = s.to_string();
        src = s.source();
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_once_with_their_prefix() {
        let pool = Pool::new(Duration::from_secs(1), Duration::from_secs(60));
        let uri = |base: &str| pool.messages_uri(base);
        assert_eq!(
            uri("http://127.0.0.1:9/x/y/").as_deref(),
            Some("/x/y/ldp/messages")
        );
        assert_eq!(uri("http://h:9").as_deref(), Some("/ldp/messages"));
        assert!(uri("https://h:9").is_none());
        assert!(uri("http://user@h:9").is_none());
        let o = Origin::parse("http://h:9/p").unwrap();
        assert_eq!(o.messages, "/p/ldp/messages");
        assert_eq!(o.host, "h:9");
    }

    #[tokio::test]
    async fn refused_connections_are_connect_errors() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pool = Pool::new(Duration::from_secs(1), Duration::from_secs(60));
        let base = format!("http://127.0.0.1:{port}");
        let req = Req {
            path: MESSAGES,
            body: Some(Bytes::from_static(b"{}")),
            forward: Default::default(),
            events: false,
            headers: &[],
        };
        let err = pool
            .exchange(&base, &req, Duration::from_secs(2), 1024)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    }
}
