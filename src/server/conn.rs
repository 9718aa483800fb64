//! Accepted connections: the cap on open connections, the write deadline, and serving each one
//! with hyper until shutdown.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Sleep;

/// How one listener treats its connections (from `[server]`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnOptions {
    /// Deadline for reading a request head; it also reaps idle keep-alive connections.
    pub header_read_timeout: Duration,
    /// A connection whose writes make no progress for this long is closed.
    pub write_timeout: Duration,
    /// Most open connections; connections over it are closed at once.
    pub max_connections: usize,
}

impl ConnOptions {
    pub(super) fn of(server: &crate::config::ServerConfig) -> ConnOptions {
        ConnOptions {
            header_read_timeout: server.header_read_timeout,
            write_timeout: server.write_timeout,
            max_connections: server.max_connections,
        }
    }
}

/// The number of open connections of one listener.
#[derive(Debug, Clone, Default)]
pub struct OpenConnections(Arc<AtomicUsize>);

impl OpenConnections {
    /// Connections open now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// A slot for one more connection, unless `max` are open.
    fn acquire(&self, max: usize) -> Option<Slot> {
        // Each accept loop adds before it checks: of racing loops, only those that found
        // room keep their slot.
        if self.0.fetch_add(1, Ordering::Relaxed) >= max {
            self.0.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Slot(self.0.clone()))
    }
}

/// One open connection; frees its slot when the connection ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` until shutdown: HTTP/1.1 with keep-alive, `TCP_NODELAY`, a
/// deadline on reading each request head (slowloris, idle keep-alive), a write deadline (a
/// client that does not read its answers cannot hold the connection and its buffers), and at
/// most `max_connections` open at once. On shutdown it stops accepting and waits for in-flight
/// requests (the caller bounds the wait).
///
/// Over the cap a connection is accepted and closed at once rather than left unaccepted: the
/// client learns immediately (and can retry elsewhere) instead of hanging in the kernel's
/// backlog until its connect deadline, and the listener keeps draining that backlog.
pub(super) fn spawn_server(
    listener: TcpListener,
    app: axum::Router,
    opts: ConnOptions,
    open: OpenConnections,
    rx: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(serve(listener, app, opts, open, rx))
}

/// Thread per core: `app` served on `threads` more threads, each running one current-thread
/// runtime accepting on its own copy of `listener` (one socket: whichever thread is free
/// takes the next connection), so a request, the tasks it spawns and the upstream
/// connections it drives stay on the thread that accepted it, with no hand-off between
/// threads. Measured against tokio's multi-threaded runtime (benches/README.md, "Serving
/// path"), this is the faster. Each thread serves as [`spawn_server`] does, on the same
/// connection cap, and keeps its runtime (so the work its requests left behind) until
/// `ended` is set or dropped, which `Gateway::shutdown` does last; then whatever still runs
/// there is cut. The handles end when a thread has stopped serving.
///
/// One socket shared rather than one `SO_REUSEPORT` socket per thread: with `SO_REUSEPORT`
/// a second process of the same user could bind the port too and silently take half the
/// connections, where a second gateway on the port must fail to start.
pub(super) fn spawn_threads(
    listener: &std::net::TcpListener,
    threads: usize,
    app: &axum::Router,
    opts: ConnOptions,
    open: &OpenConnections,
    rx: &watch::Receiver<bool>,
    ended: &watch::Receiver<bool>,
) -> io::Result<Vec<JoinHandle<()>>> {
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let copy = listener.try_clone()?;
        let (app, open, rx, mut ended) = (app.clone(), open.clone(), rx.clone(), ended.clone());
        let (served_tx, served_rx) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("ldp-serve-{}", i + 1))
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| {
                    runtime.block_on(async move {
                        let listener = match TcpListener::from_std(copy) {
                            Ok(l) => l,
                            Err(e) => {
                                tracing::error!(error = %e, "a serving thread could not start");
                                return;
                            }
                        };
                        let ended_at = async {
                            let _ = ended.wait_for(|v| *v).await;
                        };
                        tokio::pin!(ended_at);
                        tokio::select! {
                            () = serve(listener, app, opts, open, rx) => {}
                            () = &mut ended_at => return,
                        }
                        let _ = served_tx.send(());
                        ended_at.await;
                    });
                });
                if std::panic::catch_unwind(run).is_err() {
                    tracing::error!("a serving thread panicked; its connections were cut");
                }
            })?;
        handles.push(tokio::spawn(async move {
            let _ = served_rx.await;
        }));
    }
    Ok(handles)
}

/// The LDP listener: bound here, then copied to each serving thread ([`spawn_threads`]).
pub(super) fn std_listener(addr: std::net::SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)?.into_std()
}

/// The accept loop of [`spawn_server`] and of each of [`spawn_threads`]' threads.
async fn serve(
    listener: TcpListener,
    app: axum::Router,
    opts: ConnOptions,
    open: OpenConnections,
    mut rx: watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let service = hyper_util::service::TowerToHyperService::new(app);
    let stop = async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    tokio::pin!(stop);
    // Logged once each time the cap is reached, not once per refused connection.
    let mut at_cap = false;
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let Some(slot) = open.acquire(opts.max_connections) else {
            if !at_cap {
                tracing::warn!(
                    max_connections = opts.max_connections,
                    "connection cap reached; closing new connections until some end"
                );
                at_cap = true;
            }
            drop(tcp);
            continue;
        };
        at_cap = false;
        let _ = tcp.set_nodelay(true);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(opts.header_read_timeout)
            .keep_alive(true);
        let io = TokioIo::new(WriteDeadline::new(tcp, opts.write_timeout));
        let conn = graceful.watch(builder.serve_connection(io, service.clone()));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// An IO whose writes fail with `TimedOut` once they have made no progress for `timeout`: the
/// peer stopped reading (its receive window and our send buffer are full). hyper has a deadline
/// for reading a request head but none for writing an answer.
///
/// The clock starts when a write or flush first returns `Pending` and stops at the next one
/// that completes, so a slow reader that keeps taking bytes is not cut off, and the timer
/// costs nothing while writes go straight through.
pub struct WriteDeadline<T> {
    io: T,
    timeout: Duration,
    /// Made on the first stalled write, then reset: most connections never stall.
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl<T> WriteDeadline<T> {
    /// Wraps `io` with a write deadline of `timeout`.
    pub fn new(io: T, timeout: Duration) -> WriteDeadline<T> {
        WriteDeadline {
            io,
            timeout,
            sleep: None,
            armed: false,
        }
    }

    /// After a completed write: progress was made, the clock stops.
    fn progressed<R>(&mut self, r: R) -> Poll<R> {
        self.armed = false;
        Poll::Ready(r)
    }

    /// After a stalled write: starts the clock if it is not running; `TimedOut` once it ran out.
    fn stalled<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if !self.armed {
            let deadline = tokio::time::Instant::now() + self.timeout;
            match self.sleep.as_mut() {
                Some(s) => s.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        match self.sleep.as_mut().map(|s| s.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            _ => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.stalled(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.stalled(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.stalled(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_shutdown(cx) {
            Poll::Ready(r) => this.progressed(r),
            Poll::Pending => this.stalled(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_times_out() {
        // A duplex pipe of 16 bytes that nobody reads: the second write stalls.
        let (a, _b) = tokio::io::duplex(16);
        let mut w = WriteDeadline::new(a, Duration::from_secs(30));
        w.write_all(&[0; 16]).await.unwrap();
        let started = tokio::time::Instant::now();
        let e = w.write_all(&[0; 1]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_not_cut_off() {
        use tokio::io::AsyncReadExt;
        let (a, mut b) = tokio::io::duplex(16);
        let mut w = WriteDeadline::new(a, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0; 16];
            while got < 160 {
                // 20 s between reads: each under the deadline, all ten far over it.
                tokio::time::sleep(Duration::from_secs(20)).await;
                got += b.read(&mut buf).await.unwrap();
            }
            got
        });
        w.write_all(&[0; 160]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 160);
    }
}
