//! Continuing a run that ended, as a new run linked to it: *resume* (from its last checkpoint, with its
//! configuration), *restart* (from nothing, with its configuration) and *rerun* (its explicit arguments resolved
//! with today's overrides and defaults; a rerun of the failures is one scoped to the items the run reported
//! failed). A run is resumed or restarted at most once (the database refuses a
//! second), so two people, or a person and the retry policy, cannot both continue it. A rerun may be given other
//! arguments, which replace the earlier run's field by field (see [`merged`]).

use uuid::Uuid;

use super::{Refused, RequestError};
use crate::{Catalogue, DbError, ExplicitArgs, FollowKind, Run, RunState, Store, db};

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
    /// The run is one shard of a sharded run, which is continued as a whole.
    #[error(
        "Run {run_id} is one shard of run {parent}; continue that run instead (a resume or restart of it \
         continues only the shards that did not succeed)."
    )]
    Shard {
        /// The run.
        run_id: Uuid,
        /// Its parent.
        parent: Uuid,
    },
    /// Arguments were given to a resume or a restart, which run with the earlier run's configuration as it was.
    #[error("A {how} runs with run {run_id}'s configuration as it was, so it takes no arguments; rerun it instead.")]
    TakesNoArguments {
        /// The run.
        run_id: Uuid,
        /// How it was to be continued.
        how: FollowKind,
    },
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
        self.continue_run_with(catalogue, id, how, requested_by, &ExplicitArgs::default()).await
    }

    /// As [`Store::continue_run`], a rerun with `changes` over the earlier run's explicit arguments (see
    /// [`merged`]): the new run records the merged arguments, resolved and checked as a fresh request's are. No
    /// changes is a plain rerun; a resume or a restart takes none ([`FollowError::TakesNoArguments`]).
    pub(crate) async fn continue_run_with(
        &self,
        catalogue: &Catalogue,
        id: Uuid,
        how: FollowKind,
        requested_by: &str,
        changes: &ExplicitArgs,
    ) -> Result<Run, FollowError> {
        self.continue_run_as(catalogue, id, how, requested_by, changes, Uuid::now_v7()).await
    }

    /// As [`Store::continue_run_with`], the new run requested with the id `new_id` chosen beforehand: whoever
    /// asks again with the same id (a bulk action taken over by another daemon) cannot make a second run, since
    /// the ledger's primary key refuses it.
    pub(crate) async fn continue_run_as(
        &self,
        catalogue: &Catalogue,
        id: Uuid,
        how: FollowKind,
        requested_by: &str,
        changes: &ExplicitArgs,
        new_id: Uuid,
    ) -> Result<Run, FollowError> {
        if matches!(how, FollowKind::Resume | FollowKind::Restart) && !changes.is_empty() {
            return Err(FollowError::TakesNoArguments { run_id: id, how });
        }
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
        if let Some(parent) = original.parent_id {
            return Err(FollowError::Shard { run_id: id, parent });
        }
        let checkpoint = match how {
            // A sharded run resumes shard by shard, each child from its own checkpoint (see `shards::insert`).
            FollowKind::Resume if original.is_parent() => None,
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
        let arguments = merged(&original.arguments, changes);
        let config = match how {
            FollowKind::Rerun | FollowKind::RerunFailed => self.resolve_run(catalogue, spec, &arguments).await?,
            FollowKind::Resume | FollowKind::Restart => original.config.clone(),
        };
        let new = db::runs::NewRun {
            id: new_id,
            worker: &spec.name,
            requested_by,
            arguments: &arguments,
            config: &config,
            trace_context: None,
            override_version: None,
            // A resume, a restart or a rerun carries what the earlier run carried: it is found with it.
            tags: &original.tags,
            links: db::runs::Links { follows: Some((id, how)), checkpoint, ..db::runs::Links::default() },
        };
        let inserted = match how {
            FollowKind::RerunFailed => self.insert_scoped(&new, id).await?,
            _ => self.insert_request(&new).await?,
        };
        match inserted {
            Ok(run) => Ok(run),
            Err(Refused::Continued(by, how)) => Err(FollowError::AlreadyContinued { run_id: id, by, how }),
            Err(Refused::Blocked(e)) => Err(e.into()),
        }
    }
}

/// The arguments of a rerun of a run asked for with `earlier`, given `changes`: each field given replaces the
/// earlier one (an option replaces that option; the earlier run's other options are kept). Nothing else is
/// inferred: an engine given without a preset keeps the earlier preset, and when that preset is not the new
/// engine's the resolution refuses it with a sentence naming its presets, rather than a preset picked silently.
pub(crate) fn merged(earlier: &ExplicitArgs, changes: &ExplicitArgs) -> ExplicitArgs {
    let mut options = earlier.options.clone();
    options.extend(changes.options.iter().map(|(name, value)| (name.clone(), value.clone())));
    ExplicitArgs {
        engine: changes.engine.clone().or_else(|| earlier.engine.clone()),
        preset: changes.preset.clone().or_else(|| earlier.preset.clone()),
        options,
        retry: changes.retry.clone().or_else(|| earlier.retry.clone()),
        // Arguments cannot set a limit: given here, the resolution refuses them with a sentence.
        memory_max: changes.memory_max.clone().or_else(|| earlier.memory_max.clone()),
        cpu_max: changes.cpu_max.or(earlier.cpu_max),
        stall_seconds: changes.stall_seconds.or(earlier.stall_seconds),
        shards: changes.shards.or(earlier.shards),
        priority: changes.priority.or(earlier.priority),
        expires_after_seconds: changes.expires_after_seconds.or(earlier.expires_after_seconds),
        pause_after_failures: changes.pause_after_failures.or(earlier.pause_after_failures),
        // Worker settings, not arguments: given here, the resolution refuses them with a sentence.
        when_pending_at_least: changes.when_pending_at_least.or(earlier.when_pending_at_least),
        quiet_seconds: changes.quiet_seconds.or(earlier.quiet_seconds),
        max_delay_seconds: changes.max_delay_seconds.or(earlier.max_delay_seconds),
        fresh_within_seconds: changes.fresh_within_seconds.or(earlier.fresh_within_seconds),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(value: serde_json::Value) -> ExplicitArgs {
        serde_json::from_value(value).expect("arguments")
    }

    #[test]
    fn given_fields_replace_the_earlier_ones_and_options_merge_by_name() {
        let earlier = args(json!({"engine": "local", "preset": "fast", "options": {"items": 100, "note": "a"}}));
        assert_eq!(merged(&earlier, &ExplicitArgs::default()), earlier, "no changes: the earlier arguments");
        let changes = args(json!({"preset": "thorough", "options": {"note": "b", "output_lines": 3}}));
        let expected = json!({
            "engine": "local", "preset": "thorough", "options": {"items": 100, "note": "b", "output_lines": 3}
        });
        assert_eq!(merged(&earlier, &changes), args(expected));
        let retry = args(json!({"retry": {"max_attempts": 2}}));
        assert_eq!(merged(&earlier, &retry).retry, retry.retry);
        assert_eq!(merged(&ExplicitArgs::default(), &changes), changes, "a run asked for with nothing");
    }
}
