//! How the daemon is told to stop: the first SIGTERM or SIGINT asks for a graceful stop (stop claiming, let runs
//! finish within `daemon.drain_seconds`), the second for an immediate one (stop the runs now). `main` wires the
//! signals ([`Shutdown::on_signals`]); a program or a test that runs the daemon in-process cancels the tokens of
//! a [`Shutdown::default`] itself. The tokens are passed explicitly to whoever needs them; nothing is global.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};

/// The two stages of shutdown.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    /// Cancelled by the first signal.
    pub graceful: CancellationToken,
    /// Cancelled by the second signal.
    pub immediate: CancellationToken,
    /// The listener, stopped when the last copy of this is dropped.
    listener: Option<Arc<AbortOnDropHandle<()>>>,
}

impl Shutdown {
    /// Starts listening for SIGTERM and SIGINT; the listener ends after the second signal.
    pub fn on_signals() -> anyhow::Result<Self> {
        let mut term = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("listen for SIGINT")?;
        let mut shutdown = Self::default();
        let tokens = shutdown.clone();
        let listener = tokio::spawn(async move {
            for stage in [&tokens.graceful, &tokens.immediate] {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                tracing::info!(signal = name, "signal received");
                stage.cancel();
            }
        });
        shutdown.listener = Some(Arc::new(AbortOnDropHandle::new(listener)));
        Ok(shutdown)
    }
}
