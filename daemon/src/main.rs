//! `scrinalia-daemon [--config PATH]`: the scheduler daemon. `scrinalia-daemon supervise …` (hidden) is the
//! per-run supervisor the daemon starts itself.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use scrinalia_daemon::supervisor::{SuperviseArgs, supervise};
use scrinalia_shared::Settings;

/// Claims run requests, runs workers under a lease, writes the ledger, recovers.
#[derive(Debug, Parser)]
#[command(name = "scrinalia-daemon", version = scrinalia_shared::VERSION)]
struct Cli {
    /// The configuration file (default: $SCRINALIA_CONFIG, else built-in defaults and the environment).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Supervises one worker for the daemon (internal).
    #[command(hide = true)]
    Supervise(SuperviseArgs),
}

fn main() -> anyhow::Result<()> {
    // Before anything holds a secret: the daemon's environment and the supervisor's (reset by exec).
    scrinalia_daemon::not_dumpable()?;
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Supervise(args)) => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the runtime")?;
            runtime.block_on(supervise(args))
        }
        None => {
            let settings = Settings::load(cli.config.as_deref()).context("load the configuration")?;
            let runtime =
                tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")?;
            let telemetry =
                scrinalia_shared::telemetry::init(&settings.telemetry, "scrinalia-daemon", runtime.handle());
            let result = runtime.block_on(async {
                let shutdown = scrinalia_daemon::Shutdown::on_signals()?;
                scrinalia_daemon::run(settings, &telemetry, shutdown).await
            });
            // The last spans and metrics leave while the runtime still runs.
            telemetry.shutdown();
            result
        }
    }
}
