//! Keeps one run's lease alive from a task of its own, so nothing the worker does (or a busy run loop) can
//! delay a renewal. Each renewal hands the supervisor a new deadline measured from before the query was sent;
//! when the lease is refused, or cannot be renewed before it runs out, the supervisor is told to kill.

use std::{sync::Arc, time::Duration};

use scrinalia_shared::{DbError, Run};
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::{Context, clock, frame::Control, metrics::Renewal};

/// The renewal task of a run.
pub struct Lease {
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// Resolves with a sentence when the lease is lost.
    pub lost: oneshot::Receiver<String>,
}

impl Lease {
    /// Starts renewing `run`, whose current deadline is `deadline_ns`, in the current (the run's) span.
    pub fn spawn(ctx: Arc<Context>, run: &Run, supervisor: mpsc::Sender<Control>, deadline_ns: u64) -> Self {
        let stop = CancellationToken::new();
        let (tx, lost) = oneshot::channel();
        let renewer = Renewer { ctx, run: run.id, worker: run.worker.clone(), supervisor, deadline_ns };
        let token = stop.clone();
        let task = tokio::spawn(
            async move {
                if let Some(reason) = renewer.renew_until_lost(token).await {
                    renewer.ctx.metrics.renewal(&renewer.worker, Renewal::Lost);
                    let _ = renewer.supervisor.send(Control::Kill).await;
                    let _ = tx.send(reason);
                }
            }
            .in_current_span(),
        );
        Self { stop, task, lost }
    }

    /// Stops renewing (the run is over and its ledger entry written).
    pub async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Lease {
    /// A run task that ends abnormally must not leave a renewal behind: the lease then expires and the run is
    /// recovered.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Renewer {
    ctx: Arc<Context>,
    run: Uuid,
    worker: String,
    supervisor: mpsc::Sender<Control>,
    deadline_ns: u64,
}

impl Renewer {
    /// Renews every third of the lease; retries quickly while the database fails. Returns why the lease was
    /// lost, or `None` when stopped.
    async fn renew_until_lost(&self, stop: CancellationToken) -> Option<String> {
        let lease = self.ctx.settings.daemon.lease();
        let every = lease / 3;
        let retry = (lease / 12).clamp(Duration::from_millis(100), Duration::from_secs(1));
        let mut deadline = self.deadline_ns;
        let mut next = Instant::now() + every;
        loop {
            tokio::select! {
                () = stop.cancelled() => return None,
                () = sleep_until(next) => {}
            }
            let sent = clock::monotonic_ns();
            if sent >= deadline {
                return Some(
                    "the lease could not be renewed before it ran out (the database did not answer)".to_owned(),
                );
            }
            let renewal = self.ctx.db.renew_lease(self.run, self.ctx.daemon_id, lease);
            match tokio::time::timeout(clock::until(deadline), renewal).await {
                Ok(Ok(_)) => {
                    self.ctx.metrics.renewal(&self.worker, Renewal::Renewed);
                    deadline = clock::lease_deadline(sent, lease);
                    let _ = self.supervisor.send(Control::Deadline(deadline)).await;
                    next = Instant::now() + every;
                }
                Ok(Err(DbError::LeaseLost { .. })) => {
                    return Some(
                        "the database refused the renewal: the lease had expired or another daemon recovered the run"
                            .to_owned(),
                    );
                }
                Ok(Err(e)) => {
                    self.ctx.metrics.renewal(&self.worker, Renewal::Failed);
                    tracing::warn!(error = %e, left_ms = clock::until(deadline).as_millis(), "lease renewal failed; retrying");
                    next = Instant::now() + retry;
                }
                Err(_) => {
                    self.ctx.metrics.renewal(&self.worker, Renewal::Failed);
                    next = Instant::now();
                }
            }
        }
    }
}
