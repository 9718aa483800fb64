//! `ldp-gateway demo`: simulated delegates and a gateway on loopback, sample traffic, a summary.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {}
pub async fn run(_a: DemoArgs) -> anyhow::Result<()> {
    Ok(())
}
