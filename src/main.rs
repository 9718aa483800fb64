//! `ldp-gateway`: parse the command line and hand over to the library (through `cli`).

mod cli;

/// mimalloc instead of glibc malloc: the request path allocates many small, short-lived
/// buffers across threads, where glibc spent ~13% of the gateway's CPU under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = <cli::Cli as clap::Parser>::parse();
    if !cli.logs_itself() {
        ldp_gateway::telemetry::init();
    }
    cli.run()
}
