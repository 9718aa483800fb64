//! Policy hot reload: the directory is watched (a fingerprint of names, sizes and mtimes,
//! checked every second, acted on once it has been stable for one more check — the debounce),
//! and SIGHUP reloads at once. `POST /admin/reload` is the third way in (admin routes).

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

/// Watches `dir` and listens for SIGHUP until shutdown.
pub fn spawn_watcher(
    proxy: Arc<Proxy>,
    dir: PathBuf,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut applied = fingerprint(&dir);
        let mut seen = applied.clone();
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let sighup = async {
                match hup.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let sighup = std::future::pending::<()>();
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = sighup => {
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
