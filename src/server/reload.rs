//! Policy hot reload: the directory is watched (a fingerprint of names, sizes and mtimes,
//! checked every second, acted on once it has been stable for one more check — the debounce),
//! and SIGHUP reloads at once. `POST /admin/reload` is the third way in (admin routes).
//!
//! SIGHUP is listened to from the start of `serve` ([`Hangup::listen`]), long before the
//! watcher runs: its default action ends the process, and a SIGHUP during a slow start-up
//! (a first card poll waiting on a silent delegate) is kept and reloads once the watcher runs.

use crate::proxy::Proxy;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the directory is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// `(file name, size, mtime)` of every `*.toml` in `dir`, sorted; empty if unreadable.
fn fingerprint(dir: &Path) -> Vec<(String, u64, Option<SystemTime>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "toml"))
        .map(|e| {
            let meta = e.metadata().ok();
            (
                e.file_name().to_string_lossy().into_owned(),
                meta.as_ref().map_or(0, |m| m.len()),
                meta.and_then(|m| m.modified().ok()),
            )
        })
        .collect();
    out.sort();
    out
}

/// Reloads and logs the outcome once.
pub fn reload_and_log(proxy: &Proxy, why: &str) -> bool {
    match proxy.reload_policies() {
        Ok(_) => true,
        Err(problems) => {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            tracing::error!(trigger = why, problems = %list.join("; "), "policy reload refused; keeping the previous policies");
            false
        }
    }
}

/// SIGHUP, caught from the moment this is made. Signals that arrive before anyone waits are
/// kept (coalesced into one) for the next [`Hangup::recv`].
pub struct Hangup {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangup {
    /// Replaces SIGHUP's default action (end the process) with a notification. Needs a Tokio
    /// runtime; without one (or if the handler cannot be installed) SIGHUP is left as it was.
    pub fn listen() -> Hangup {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signal = match signal(SignalKind::hangup()) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "SIGHUP handler not installed; SIGHUP will not reload");
                    None
                }
            };
            Hangup { signal }
        }
        #[cfg(not(unix))]
        Hangup {}
    }

    /// The next SIGHUP (never, where there are none).
    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(s) = self.signal.as_mut() {
            if s.recv().await.is_some() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// Watches `dir` and reloads on SIGHUP (`hangup`) until shutdown.
pub fn spawn_watcher(
    proxy: Arc<Proxy>,
    dir: PathBuf,
    mut hangup: Hangup,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut applied = fingerprint(&dir);
        let mut seen = applied.clone();
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = hangup.recv() => {
                    reload_and_log(&proxy, "SIGHUP");
                    applied = fingerprint(&dir);
                    seen = applied.clone();
                }
                _ = tick.tick() => {
                    let now = fingerprint(&dir);
                    // Act only when a change has held still for one tick (editors write in steps).
                    if now != applied && now == seen {
                        reload_and_log(&proxy, "file change");
                        applied = now.clone();
                    }
                    seen = now;
                }
            }
        }
    })
}
