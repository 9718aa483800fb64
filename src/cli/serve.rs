//! `ldp-gateway serve`: load the config, run the gateway until Ctrl-C or SIGTERM.

use ldp_gateway::config::Config;
use ldp_gateway::server::{Gateway, Hangup};
use std::path::Path;

/// Loads `path`, starts the gateway, prints its URLs, and shuts it down on a signal.
pub async fn run(path: &Path) -> anyhow::Result<()> {
    // Before anything slow (config, ledger, first card poll): SIGHUP's default action is to
    // end the process, and an operator may send it at any time.
    let hangup = Hangup::listen();
    let config = Config::load(path)?;
    let gateway = Gateway::start_with_hangup(config, hangup).await?;
    println!("LDP endpoint: {}", gateway.ldp_url());
    println!("admin:        {}", gateway.admin_url());
    wait_for_signal().await;
    tracing::info!("shutting down");
    gateway.shutdown().await;
    Ok(())
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
pub async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
