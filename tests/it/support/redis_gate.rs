//! A relay in front of the test Redis that can hold one command: the first whose arguments
//! contain a marker, once armed, until the test lets it go. Everything else passes as it is
//! (every byte the server sends, every command before it). The gateway's shared stores talk
//! over one multiplexed connection, so the commands after a held one wait behind it, as they
//! would behind a slow Redis: a step of the request path that needs Redis is held there, at
//! a real seam, for as long as the test needs.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// The relay.
pub struct RedisGate {
    url: String,
    /// The marker of the next command to hold (none: hold nothing).
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    /// Said once per held command.
    held: mpsc::UnboundedReceiver<String>,
    release: watch::Sender<bool>,
}

impl RedisGate {
    /// Relays to the Redis at `target` (`redis://host:port`).
    pub async fn start(target: &str) -> RedisGate {
        let upstream = target
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind gate");
        let url = format!("redis://{}", listener.local_addr().expect("addr"));
        let armed: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let (said, held) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        let state = (armed.clone(), said, released);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (armed, said, released) = (state.0.clone(), state.1.clone(), state.2.clone());
                tokio::spawn(relay(client, server, armed, said, released));
            }
        });
        RedisGate {
            url,
            armed,
            held,
            release,
        }
    }

    /// Its URL, for `[cluster] redis_url`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Holds the next command with an argument containing `marker`.
    pub fn hold_next(&self, marker: &str) {
        *self.armed.lock().expect("gate") = Some(marker.as_bytes().to_vec());
    }

    /// Waits until a command is held; its name.
    pub async fn held(&mut self) -> String {
        self.held.recv().await.expect("gate running")
    }

    /// Lets the held command, and every later one, go.
    pub fn release(&self) {
        let _ = self.release.send(true);
    }
}

/// One connection: the server's bytes back as they come; the client's forwarded command by
/// command, the armed one held until released.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    said: mpsc::UnboundedSender<String>,
    mut released: watch::Receiver<bool>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match from_client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some((len, args)) = command(&buf) {
            let hold = {
                let mut armed = armed.lock().expect("gate");
                let hit = armed
                    .as_ref()
                    .is_some_and(|m| args.iter().any(|a| contains(a, m)));
                if hit {
                    *armed = None;
                }
                hit
            };
            if hold {
                let name = String::from_utf8_lossy(args.first().copied().unwrap_or_default());
                let _ = said.send(name.into_owned());
                while !*released.borrow() {
                    if released.changed().await.is_err() {
                        return;
                    }
                }
            }
            if to_server.write_all(&buf[..len]).await.is_err() {
                return;
            }
            buf.drain(..len);
        }
    }
}

/// One whole RESP command (an array of bulk strings) at the start of `buf`: its length in
/// bytes and its arguments; `None` until it has all come.
fn command(buf: &[u8]) -> Option<(usize, Vec<&[u8]>)> {
    let line = |from: usize| -> Option<(usize, usize)> {
        let end = from + buf.get(from..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&buf[from + 1..end])
            .ok()?
            .parse()
            .ok()?;
        Some((n, end + 2))
    };
    if buf.first() != Some(&b'*') {
        return None;
    }
    let (count, mut at) = line(0)?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        if buf.get(at) != Some(&b'$') {
            return None;
        }
        let (len, start) = line(at)?;
        let end = start + len;
        if buf.len() < end + 2 {
            return None;
        }
        args.push(&buf[start..end]);
        at = end + 2;
    }
    Some((at, args))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
