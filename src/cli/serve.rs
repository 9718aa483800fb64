//! `ldp-gateway serve`: load the config, run the gateway until Ctrl-C or SIGTERM.

use ldp_gateway::config::Config;
use ldp_gateway::server::{Gateway, Hangup};
use std::path::Path;

/// Loads `path`, starts the gateway, prints its URLs, and shuts it down on a signal.
pub async fn run(path: &Path) -> anyhow::Result<()> {
    // Before anything slow (config, ledger, first card poll): SIGHUP's default action is to
    // end the process, and an operator may send it at any time; a SIGTERM sent the moment the
    // URLs are printed must still find its handler.
    let hangup = Hangup::listen();
    let mut stop = Stop::listen();
    let config = Config::load(path)?;
    let gateway = Gateway::start_with_hangup(config, hangup).await?;
    println!("LDP endpoint: {}", gateway.ldp_url());
    println!("admin:        {}", gateway.admin_url());
    stop.wait().await;
    tracing::info!("shutting down");
    gateway.shutdown().await;
    Ok(())
}

/// Ctrl-C and (on Unix) SIGTERM, caught from the moment this is made: a signal that arrives
/// before anyone waits (say, just after the URLs are printed) is kept for the next
/// [`Stop::wait`] instead of being lost, or ending the process as the default action would.
pub struct Stop {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Stop {
    /// Installs the handlers. Needs a Tokio runtime; a handler that cannot be installed leaves
    /// its signal's default action (the process ends), with a warning.
    pub fn listen() -> Stop {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, signal = name, "signal handler not installed");
                    None
                }
            };
            Stop {
                interrupt: listen(SignalKind::interrupt(), "SIGINT"),
                terminate: listen(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        Stop {}
    }

    /// The next Ctrl-C or SIGTERM, or one that came since the last wait.
    pub async fn wait(&mut self) {
        #[cfg(unix)]
        {
            async fn next(s: Option<&mut tokio::signal::unix::Signal>) {
                if let Some(s) = s {
                    if s.recv().await.is_some() {
                        return;
                    }
                }
                std::future::pending::<()>().await;
            }
            tokio::select! {
                () = next(self.interrupt.as_mut()) => {}
                () = next(self.terminate.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::Stop;

    /// A SIGTERM sent before anyone waits is kept for the next wait (without the handler
    /// installed first, it would end this test's process).
    #[tokio::test]
    async fn a_signal_before_the_wait_is_kept_for_it() {
        let mut stop = Stop::listen();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        tokio::time::timeout(std::time::Duration::from_secs(30), stop.wait())
            .await
            .expect("the SIGTERM sent before the wait");
    }
}
