//! Asking a running run to yield (docs/worker-protocol.md, "Yielding"): who may be asked, and why a request is
//! refused. The runner sends the request to the run's supervisor ([`crate::frame::Control::Yield`]), which
//! signals the worker; how the run then ends is told by [`crate::outcome::Outcome::yielded`].

use std::time::Duration;

use tokio::sync::oneshot;

use crate::Context;

/// Why a run was not asked to yield; each displays as a sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YieldRefused {
    /// The worker's stored description does not declare `yield`: SIGUSR1 would end it as a crash.
    #[error("worker {worker} does not declare the yield capability, so its run cannot be asked to yield")]
    NotDeclared {
        /// The worker.
        worker: String,
    },
    /// The worker's description could not be read, so whether it yields is not known.
    #[error("whether worker {worker} can yield is not known: its description could not be read ({error})")]
    Unknown {
        /// The worker.
        worker: String,
        /// What went wrong.
        error: String,
    },
    /// The run is being stopped already (a cancel, the daemon's shutdown, a stall, a lost lease).
    #[error("the run is being stopped already")]
    Stopping,
    /// The run was asked to yield already; it is asked once.
    #[error("the run was asked to yield already")]
    AlreadyAsked,
}

/// Where the runner says whether it asked the run to yield.
pub type YieldAnswer = oneshot::Sender<Result<(), YieldRefused>>;

/// What a run's requests to yield have come to so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// The supervisor was asked to make the worker yield.
    pub asked: bool,
    /// The run is being stopped (cancel, shutdown, stall, lost lease): too late to yield.
    pub stopping: bool,
}

impl Requests {
    /// Whether a yield may still be asked of this run, whatever its worker declares.
    pub fn may_ask(self) -> Result<(), YieldRefused> {
        if self.stopping {
            Err(YieldRefused::Stopping)
        } else if self.asked {
            Err(YieldRefused::AlreadyAsked)
        } else {
            Ok(())
        }
    }
}

/// Whether `worker` declared `yield`, as its stored description says now (the code a run executes was described
/// when it was deployed, so the latest description is the best knowledge of it). Read only when a yield is
/// asked, so that a run's start costs no query for it.
pub async fn declared(ctx: &Context, worker: &str) -> Result<(), YieldRefused> {
    let read = ctx.db.effective_worker(&ctx.settings.catalogue, worker);
    let unknown = |error: String| YieldRefused::Unknown { worker: worker.to_owned(), error };
    let effective = match tokio::time::timeout(Duration::from_secs(5), read).await {
        Ok(Ok(effective)) => effective,
        Ok(Err(e)) => return Err(unknown(e.to_string())),
        Err(_) => return Err(unknown("the database did not answer within 5 s".to_owned())),
    };
    let capabilities = effective.and_then(|w| w.described).and_then(|d| d.capabilities);
    match capabilities {
        Some(capabilities) if capabilities.yields => Ok(()),
        _ => Err(YieldRefused::NotDeclared { worker: worker.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_asked_once_and_never_while_it_is_stopped() {
        assert_eq!(Requests::default().may_ask(), Ok(()));
        assert_eq!(Requests { asked: true, stopping: false }.may_ask(), Err(YieldRefused::AlreadyAsked));
        assert_eq!(Requests { asked: false, stopping: true }.may_ask(), Err(YieldRefused::Stopping));
        assert_eq!(Requests { asked: true, stopping: true }.may_ask(), Err(YieldRefused::Stopping));
        let refused = YieldRefused::NotDeclared { worker: "probe-1".into() };
        assert_eq!(
            refused.to_string(),
            "worker probe-1 does not declare the yield capability, so its run cannot be asked to yield"
        );
    }
}
