//! Continuing a run that ended, as a new run linked to it: *resume* (from its last checkpoint, with its
//! configuration), *restart* (from nothing, with its configuration) and *rerun* (its explicit arguments resolved
//! with today's overrides and defaults; a rerun of the failures is one scoped to the items the run reported
//! failed). A run is resumed or restarted at most once (the database refuses a
//! second), so two people, or a person and the retry policy, cannot both continue it.

use uuid::Uuid;

use super::{Refused, RequestError};
use crate::{Catalogue, DbError, FollowKind, Run, RunState, Store, db};

/// Why a run could not be continued; each displays as a sentence for people.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// No such run.
    #[error("There is no run {0}.")]
    NotFound(Uuid),
    /// The run is not in a state this way of continuing takes.
    #[error("Run {run_id} is {state}; {}", allowed(*how))]
    WrongState {
        /// The run.
        run_id: Uuid,
        /// Its state.
        state: RunState,
        /// How it was to be continued.
        how: FollowKind,
    },
    /// The run has no checkpoint to resume from.
    #[error("Run {0} has no checkpoint to resume from (its worker never reported one); restart it instead.")]
    NoCheckpoint(Uuid),
    /// The run was resumed or restarted already.
    #[error("Run {run_id} was already {} by run {by}; continue that one instead.", done(*how))]
    AlreadyContinued {
        /// The run.
        run_id: Uuid,
        /// The run that continues it.
        by: Uuid,
        /// How.
        how: FollowKind,
    },
    /// The run reported no failed items, so a rerun of its failures has nothing to do.
    #[error("Run {0} reported no failed items, so there are no failures to rerun.")]
    NoFailures(Uuid),
    /// The worker cannot be given a scope.
    #[error("{0}")]
    NoScope(String),
    /// The new run could not be requested (its worker is gone from the catalogue, has a run in flight, or its
    /// arguments no longer resolve).
    #[error(transparent)]
    Request(#[from] RequestError),
}

impl From<DbError> for FollowError {
    fn from(e: DbError) -> Self {
        Self::Request(RequestError::Database(e))
    }
}

fn done(how: FollowKind) -> &'static str {
    match how {
        FollowKind::Resume => "resumed",
        FollowKind::Restart => "restarted",
        FollowKind::Rerun | FollowKind::RerunFailed => "rerun",
    }
}

fn allowed(how: FollowKind) -> &'static str {
    match how {
        FollowKind::Resume | FollowKind::Restart => "only an interrupted or failed run can be resumed or restarted.",
        FollowKind::Rerun | FollowKind::RerunFailed => "only a run that ended can be rerun.",
    }
}

impl Store {
    /// Requests a run that continues run `id` as `how`, for `requested_by`. A resume starts from the run's last
    /// checkpoint (handed to its worker) and a restart from nothing, both with the run's configuration; a rerun
    /// resolves the run's explicit arguments again. The new run is queued like any other: refused while its
    /// worker has a run in flight ([`RequestError::InFlight`]).
    pub(crate) async fn continue_run(
        &self,
        catalogue: &Catalogue,
        id: Uuid,
        how: FollowKind,
        requested_by: &str,
    ) -> Result<Run, FollowError> {
        let original = self.get_run(id).await?.ok_or(FollowError::NotFound(id))?;
        let takes = match how {
            FollowKind::Resume | FollowKind::Restart => {
                matches!(original.state, RunState::Interrupted | RunState::Failed)
            }
            FollowKind::Rerun | FollowKind::RerunFailed => original.state.is_terminal(),
        };
        if !takes {
            return Err(FollowError::WrongState { run_id: id, state: original.state, how });
        }
        let checkpoint = match how {
            FollowKind::Resume => {
                Some(original.checkpoint.as_ref().zip(original.checkpoint_at).ok_or(FollowError::NoCheckpoint(id))?)
            }
            FollowKind::Restart | FollowKind::Rerun | FollowKind::RerunFailed => None,
        };
        let spec = catalogue
            .worker(&original.worker)
            .ok_or_else(|| RequestError::UnknownWorker { worker: original.worker.clone() })?;
        if how == FollowKind::RerunFailed {
            self.check_scope(&original).await?;
        }
        let config = match how {
            FollowKind::Rerun | FollowKind::RerunFailed => {
                self.resolve_run(catalogue, spec, &original.arguments).await?
            }
            FollowKind::Resume | FollowKind::Restart => original.config.clone(),
        };
        let new = db::runs::NewRun {
            id: Uuid::now_v7(),
            worker: &spec.name,
            requested_by,
            arguments: &original.arguments,
            config: &config,
            trace_context: None,
            override_version: None,
            links: db::runs::Links { follows: Some((id, how)), checkpoint, ..db::runs::Links::default() },
        };
        let inserted = match how {
            FollowKind::RerunFailed => self.insert_scoped(&new, id).await?,
            _ => self.insert_request(&new).await?,
        };
        match inserted {
            Ok(run) => Ok(run),
            Err(Refused::Continued(by, how)) => Err(FollowError::AlreadyContinued { run_id: id, by, how }),
            Err(Refused::InFlight(e)) => Err(e.into()),
        }
    }
}
