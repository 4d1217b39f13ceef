//! Runs, the domain: requesting one (resolve its configuration, check it, insert it; the database allows one
//! run in flight per worker), what the daemon holding a run writes (start, lease, progress, end; each fenced by
//! ownership), cancellation, recovery of runs whose owner stopped renewing, and reading the ledger.

use std::{collections::HashMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use scrinalia_wire::worker::view::RunningItems;
use serde_json::Value;
use uuid::Uuid;

mod diff;
mod end;
mod follow;
mod placement;
mod preemption;
mod resolved;
mod resolver;
mod scoped;
pub(crate) mod shards;
mod waiting;

pub use diff::config_changes;
pub(crate) use end::{expire_requests, follow as follow_end, was_preempted};
pub use follow::FollowError;
pub use placement::Placement;
pub use preemption::not_preemptible;
pub use resolved::ResolveCache;
use resolved::Resolved;
pub(crate) use resolver::Resolver;
pub use scrinalia_db::ledger::{Cursor, IdRange, RunFilter, contains_pattern};
pub use shards::live_progress;

use crate::{
    Catalogue, DbError, EndReason, ExplicitArgs, ProgressEntry, ProgressPage, ResolveError, Run, RunPage, RunState,
    Store, db,
};

/// A run request as a person or a program makes it.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The worker.
    pub worker: String,
    /// Who asks (recorded in the ledger).
    pub requested_by: String,
    /// Arguments for this run.
    pub arguments: ExplicitArgs,
    /// The caller's W3C trace context, continued by the daemon and the worker.
    pub trace_context: Option<String>,
    /// Short words the run carries (at most [`crate::tag::MAX_TAGS`]; see [`crate::tag::check_tags`]).
    pub tags: Vec<String>,
}

/// What the recovery sweep has to do, as of one read of the database clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryDue {
    /// How long until the first lease of a running run expires (zero when one has: a run to interrupt), or
    /// `None` when nothing runs.
    pub next_lease_expiry: Option<Duration>,
    /// Whether a daemon not marked gone has sent no heartbeat for the time asked (one to mark gone).
    pub daemons_gone: bool,
}

/// Why the insert of a request was refused by a unique index.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Another run of the worker is in flight, or the worker is paused ([`RequestError::InFlight`],
    /// [`RequestError::Paused`]).
    Blocked(RequestError),
    /// A run continues the same earlier run already: that run, and how.
    Continued(Uuid, crate::FollowKind),
}

/// Why a run request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The catalogue has no such worker.
    #[error("There is no worker {worker:?}.")]
    UnknownWorker {
        /// The name given.
        worker: String,
    },
    /// The arguments do not fit the worker (unknown option, wrong type, unknown engine or preset, …).
    #[error("{0}")]
    InvalidArguments(ResolveError),
    /// A tag is not a short word, or there are more than ten.
    #[error("{0}")]
    InvalidTags(String),
    /// The arguments are fine, but the worker's stored override no longer fits the catalogue.
    #[error("The stored override of worker {worker:?} no longer fits the catalogue: {error} Change or clear it.")]
    InvalidOverride {
        /// The worker.
        worker: String,
        /// What does not fit.
        error: ResolveError,
    },
    /// The worker already has a run queued or running.
    #[error(
        "Worker {worker} already has a run in flight (run {run_id}, {}); wait for it to finish or cancel it.",
        in_flight_where(*state, *daemon_id)
    )]
    InFlight {
        /// The worker.
        worker: String,
        /// The run in flight.
        run_id: Uuid,
        /// Its state.
        state: RunState,
        /// The daemon holding it, if running.
        daemon_id: Option<Uuid>,
    },
    /// The worker is paused: no run of it is requested until an operator resumes it.
    #[error("{}", crate::pauses::refusal(worker, pause))]
    Paused {
        /// The worker.
        worker: String,
        /// Its pause.
        pause: scrinalia_wire::WorkerPause,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

impl RequestError {
    /// The refusal of a request because `blocking`, a run of the same worker, is in flight.
    pub(crate) fn in_flight(blocking: Run) -> Self {
        Self::InFlight {
            worker: blocking.worker,
            run_id: blocking.id,
            state: blocking.state,
            daemon_id: blocking.daemon_id,
        }
    }
}

fn in_flight_where(state: RunState, daemon_id: Option<Uuid>) -> String {
    match daemon_id {
        Some(d) if state == RunState::Running => format!("running on daemon {d}"),
        _ => state.to_string(),
    }
}

/// How a run ended, as its daemon writes it. The terminal state follows from the reason (and, for
/// `exit_status`, the exit code): see [`EndReason::state`].
#[derive(Debug, Clone)]
pub struct Finish {
    /// Why it ended.
    pub reason: EndReason,
    /// The worker's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// Why it did not succeed, as a sentence.
    pub error: Option<String>,
    /// The final result (work counts).
    pub result: Option<Value>,
    /// What the run cost, when its worker ran.
    pub usage: Option<crate::usage::RunUsage>,
}

impl Finish {
    /// The terminal state this ending records.
    pub fn state(&self) -> RunState {
        self.reason.state(self.exit_code)
    }
}

/// What a cancellation request did.
#[derive(Debug, Clone)]
pub enum CancelOutcome {
    /// The run was queued and is now cancelled.
    Cancelled(Run),
    /// The run is running; its daemon has been asked to stop it.
    Requested(Run),
    /// The run had already ended; nothing changed.
    AlreadyFinished(Run),
}

impl Store {
    /// Requests a run: resolves the configuration it will run with (explicit argument > persisted override >
    /// catalogue default, the same resolution as the worker view's) and queues it, in one statement when `cache`
    /// knows the worker (see [`ResolveCache`]). A worker with a run in flight refuses it
    /// ([`RequestError::InFlight`], naming that run).
    pub(crate) async fn request_run(
        &self,
        catalogue: &Catalogue,
        request: RunRequest,
        cache: &ResolveCache,
    ) -> Result<Run, RequestError> {
        let spec = catalogue
            .worker(&request.worker)
            .ok_or_else(|| RequestError::UnknownWorker { worker: request.worker.clone() })?;
        let tags = crate::tag::check_tags(&request.tags).map_err(RequestError::InvalidTags)?;
        let id = Uuid::now_v7();
        let mut fresh = false;
        for _ in 0..3 {
            let resolved = self.resolved(cache, &spec.name, fresh).await?;
            let config = match resolver::resolve_with(
                catalogue,
                spec,
                &request.arguments,
                resolved.stored.as_ref(),
                resolved.described.as_ref(),
            ) {
                Ok(config) => config,
                // Refused against what was cached: judged again on what the database holds now.
                Err(_) if !fresh => {
                    fresh = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let new = db::runs::NewRun {
                id,
                worker: &spec.name,
                requested_by: &request.requested_by,
                arguments: &request.arguments,
                config: &config,
                trace_context: request.trace_context.as_deref(),
                links: db::runs::Links::default(),
                override_version: Some(resolved.version),
                tags: &tags,
            };
            if let Some(run) = self.db.retrying(|| self.insert(&new)).await? {
                return Ok(run);
            }
            if let Some(blocking) = self.db.retrying(|| db::runs::in_flight_of(&self.db, &spec.name)).await? {
                // A first attempt that committed before its connection was cut: the run found is ours.
                if blocking.id == id {
                    return Ok(blocking);
                }
                return Err(RequestError::in_flight(blocking));
            }
            if let Some(paused) = self.paused_refusal(&spec.name).await? {
                return Err(paused);
            }
            // Neither inserted nor blocked: the override changed since it was read (or the blocker ended in
            // between). Read it again.
            cache.forget_worker(&spec.name);
            fresh = true;
        }
        Err(DbError::Unexpected("the worker's override kept changing during the request".into()).into())
    }

    /// What a request of `worker` resolves against: `cache`'s entry, or (when there is none, or `fresh` is asked)
    /// the override's version, then the override and the description, read now and kept.
    async fn resolved(&self, cache: &ResolveCache, worker: &str, fresh: bool) -> Result<Arc<Resolved>, DbError> {
        if !fresh && let Some(known) = cache.get(worker) {
            return Ok(known);
        }
        let generation = cache.generation();
        // The version first: an override changed between the reads then fails the insert's check, instead of
        // passing it with the older override.
        let version = self.db.retrying(|| db::overrides::version(&self.db, worker)).await?;
        let (stored, described) = tokio::try_join!(self.get_override(worker), self.description(worker))?;
        let entry = Arc::new(Resolved { version, stored, described });
        cache.keep(worker, entry.clone(), generation);
        Ok(entry)
    }

    /// Inserts the request `new`. A refusal by a unique index is explained: a run that continues the same earlier
    /// run already (for a resume or a restart), or another run of the worker in flight. When the blocker ended in
    /// between, the insert is tried again; when the first attempt committed before its connection was cut, the
    /// run found is ours.
    pub(crate) async fn insert_request(&self, new: &db::runs::NewRun<'_>) -> Result<Result<Run, Refused>, DbError> {
        let continues = new.links.follows.filter(|(_, how)| *how != crate::FollowKind::Rerun).map(|(id, _)| id);
        for _ in 0..3 {
            if let Some(run) = self.db.retrying(|| self.insert(new)).await? {
                return Ok(Ok(run));
            }
            if let Some(earlier) = continues
                && let Some((by, how)) = self.db.retrying(|| db::runs::continued_by(&self.db, earlier)).await?
            {
                if by != new.id {
                    return Ok(Err(Refused::Continued(by, how)));
                }
                if let Some(run) = self.get_run(by).await? {
                    return Ok(Ok(run));
                }
            }
            if let Some(blocking) = self.db.retrying(|| db::runs::in_flight_of(&self.db, new.worker)).await? {
                if blocking.id == new.id {
                    return Ok(Ok(blocking));
                }
                return Ok(Err(Refused::Blocked(RequestError::in_flight(blocking))));
            }
            if let Some(paused) = self.paused_refusal(new.worker).await? {
                return Ok(Err(Refused::Blocked(paused)));
            }
        }
        Err(DbError::Unexpected("the in-flight run kept changing during the insert".into()))
    }

    /// The refusal of a request of `worker` because it is paused, if it is: read only once an insert was
    /// refused, so a request that is accepted costs no read of it.
    pub(crate) async fn paused_refusal(&self, worker: &str) -> Result<Option<RequestError>, DbError> {
        let pause = self.worker_pause(worker).await?;
        Ok(pause.map(|pause| RequestError::Paused { worker: worker.to_owned(), pause }))
    }

    /// Inserts a request: one autocommitted statement, or for a run split into shards, its parent and its
    /// children in one transaction.
    async fn insert(&self, new: &db::runs::NewRun<'_>) -> Result<Option<Run>, DbError> {
        if new.config.shards.is_none() {
            return db::runs::insert(&self.db, new).await;
        }
        let mut tx = self.db.begin_write().await?;
        let inserted = shards::insert(&mut tx, new).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    /// The configuration a run of `spec` with `arguments` resolves to now: explicit argument > persisted override >
    /// the worker's default (its code's description over the catalogue's), as the worker view shows it.
    pub(crate) async fn resolve_run(
        &self,
        catalogue: &Catalogue,
        spec: &crate::WorkerSpec,
        arguments: &ExplicitArgs,
    ) -> Result<crate::ResolvedConfig, RequestError> {
        let (stored, described) = tokio::try_join!(self.get_override(&spec.name), self.description(&spec.name))?;
        resolver::resolve_with(catalogue, spec, arguments, stored.as_ref(), described.as_ref())
    }

    /// The overrides and descriptions of every worker, read now, to resolve many runs with.
    pub(crate) async fn resolver(&self) -> Result<Resolver, DbError> {
        let (overrides, descriptions) = tokio::try_join!(self.list_overrides(), self.descriptions())?;
        Ok(Resolver::new(overrides, descriptions))
    }

    /// Claims up to `limit` queued requests, highest priority then oldest first, for `daemon`, with a lease of `lease` from now
    /// (database clock), optionally only for `workers`. Committed at once; no transaction is held for the run.
    pub(crate) async fn claim_runs(
        &self,
        daemon: Uuid,
        lease: Duration,
        limit: u32,
        workers: Option<&[String]>,
    ) -> Result<Vec<Run>, DbError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut runs = db::runs::claim(&self.db, daemon, lease, limit, workers, None, None).await?;
        runs.sort_by_key(db::runs::QueueKey::of);
        Ok(runs)
    }

    /// Records that the worker process of a claimed run started, and where its log goes.
    /// Safe to repeat, so it is tried again on a cut connection (a dedicated one is never pinged before use).
    /// A child's start also takes its parent from `queued` to `running`.
    pub(crate) async fn mark_started(&self, run: Uuid, daemon: Uuid, log_key: &str) -> Result<Run, DbError> {
        let started = self
            .db
            .retrying(|| db::runs::mark_started(&self.db, run, daemon, log_key))
            .await?
            .ok_or(DbError::LeaseLost { run_id: run, daemon_id: daemon })?;
        if let Some(parent) = started.parent_id {
            self.db.retrying(|| db::shards::start_parent(&self.db, parent)).await?;
        }
        Ok(started)
    }

    /// Stores the configuration the worker of a run held by `daemon` reported it uses (fenced like every owner
    /// write: refused with [`DbError::LeaseLost`] when the run is no longer this daemon's).
    pub(crate) async fn report_config(
        &self,
        run: Uuid,
        daemon: Uuid,
        config: &serde_json::Value,
    ) -> Result<(), DbError> {
        if db::runs::report_config(&self.db, run, daemon, config).await? {
            Ok(())
        } else {
            Err(DbError::LeaseLost { run_id: run, daemon_id: daemon })
        }
    }

    /// Stores the latest checkpoint a run's worker reported (fenced: refused with [`DbError::LeaseLost`] when the
    /// run is no longer running under `daemon`). The caller checks its size ([`crate::MAX_CHECKPOINT_BYTES`]).
    pub(crate) async fn store_checkpoint(&self, run: Uuid, daemon: Uuid, checkpoint: &Value) -> Result<(), DbError> {
        if db::runs::store_checkpoint(&self.db, run, daemon, checkpoint).await? {
            Ok(())
        } else {
            Err(DbError::LeaseLost { run_id: run, daemon_id: daemon })
        }
    }

    /// Extends the lease of a run held by `daemon` to `lease` from now. Refused ([`DbError::LeaseLost`]) when the
    /// run is no longer running under this daemon or its lease already expired.
    pub(crate) async fn renew_lease(&self, run: Uuid, daemon: Uuid, lease: Duration) -> Result<DateTime<Utc>, DbError> {
        let renewed = db::runs::renew(&self.db, run, daemon, lease).await?;
        renewed.map(|l| l.expires_at).ok_or(DbError::LeaseLost { run_id: run, daemon_id: daemon })
    }

    /// Stores a progress report of a run held by `daemon`, and appends it to the run's progress history.
    pub(crate) async fn record_progress(&self, run: Uuid, daemon: Uuid, progress: &Value) -> Result<(), DbError> {
        if db::runs::record_progress(&self.db, run, daemon, progress).await? {
            Ok(())
        } else {
            Err(DbError::LeaseLost { run_id: run, daemon_id: daemon })
        }
    }

    /// Ends a run held by `daemon`. Refused ([`DbError::LeaseLost`]) when the daemon no longer holds it, so a
    /// zombie cannot overwrite the ledger.
    pub(crate) async fn finish_run(&self, run: Uuid, daemon: Uuid, finish: &Finish) -> Result<Run, DbError> {
        end::finish(&self.db, run, daemon, finish).await?.ok_or(DbError::LeaseLost { run_id: run, daemon_id: daemon })
    }

    /// Asks for a run to be cancelled by `actor`: a queued run is cancelled at once; a running one is flagged
    /// for its daemon. `None` if there is no such run.
    pub(crate) async fn request_cancel(&self, run: Uuid, actor: &str) -> Result<Option<CancelOutcome>, DbError> {
        if let Some(changed) = self.db.retrying(|| end::cancel(&self.db, run, actor)).await? {
            return Ok(Some(if changed.state == RunState::Cancelled {
                CancelOutcome::Cancelled(changed)
            } else {
                CancelOutcome::Requested(changed)
            }));
        }
        Ok(self.get_run(run).await?.map(CancelOutcome::AlreadyFinished))
    }

    /// Runs held by `daemon` whose cancellation was requested.
    pub(crate) async fn cancel_requests(&self, daemon: Uuid) -> Result<Vec<Uuid>, DbError> {
        self.db.retrying(|| db::runs::cancel_requests(&self.db, daemon)).await
    }

    /// Moves every running run whose lease expired to `interrupted` ([`EndReason::OwnerLost`]), with a sentence
    /// naming the daemon and the lease's expiry. A run with a live lease is never touched, whoever holds it.
    pub(crate) async fn recover_expired(&self) -> Result<Vec<Run>, DbError> {
        end::recover_expired(&self.db).await
    }

    /// What the recovery sweep has to do now, read in one statement (a sweep that finds nothing costs no more).
    pub(crate) async fn recovery_due(&self, gone_after: Duration) -> Result<RecoveryDue, DbError> {
        let (seconds, daemons_gone) = db::runs::recovery_due(&self.db, gone_after).await?;
        let next_lease_expiry = crate::store::wait_of(seconds);
        Ok(RecoveryDue { next_lease_expiry, daemons_gone })
    }

    /// One run.
    pub async fn get_run(&self, id: Uuid) -> Result<Option<Run>, DbError> {
        self.db.retrying(|| db::runs::get(&self.db, id)).await
    }

    /// The retry chain `id` belongs to, first attempt first (just the run when it was never retried; empty
    /// when there is no such run).
    pub(crate) async fn run_chain(&self, id: Uuid) -> Result<Vec<Run>, DbError> {
        self.db.retrying(|| db::runs::chain(&self.db, id)).await
    }

    /// The run that resumed or restarted run `id` (by a person, or by itself after a preemption), and how.
    pub(crate) async fn run_continued_by(&self, id: Uuid) -> Result<Option<(Uuid, crate::FollowKind)>, DbError> {
        self.db.retrying(|| db::runs::continued_by(&self.db, id)).await
    }

    /// The children of a sharded run's parent, by shard then oldest first (none for any other run).
    pub(crate) async fn run_children(&self, id: Uuid) -> Result<Vec<Run>, DbError> {
        self.db.retrying(|| db::shards::children(&self.db, id)).await
    }

    /// A run's progress history, oldest first.
    pub(crate) async fn run_progress(&self, id: Uuid) -> Result<Vec<ProgressEntry>, DbError> {
        self.db.retrying(|| db::runs::progress_of(&self.db, id)).await
    }

    /// A page of `limit` of a run's progress reports, oldest first: the newest, or those before the report `before`
    /// (a `seq`), with the run's count of reports and the `before` of the page before it.
    pub(crate) async fn run_progress_page(
        &self,
        id: Uuid,
        before: Option<i32>,
        limit: u32,
    ) -> Result<ProgressPage, DbError> {
        let limit = limit.max(1);
        let (mut progress, total) = tokio::try_join!(
            self.db.retrying(|| db::runs::progress_before(&self.db, id, before.unwrap_or(i32::MAX), limit + 1)),
            self.db.retrying(|| db::runs::progress_count(&self.db, id)),
        )?;
        // One more than asked says whether a page comes before this one.
        let more = progress.len() > limit as usize;
        progress.truncate(limit as usize);
        progress.reverse();
        let before = if more { progress.first().map(|p| p.seq) } else { None };
        Ok(ProgressPage { progress, total: u64::try_from(total).unwrap_or(0), before })
    }

    /// A page of the ledger, newest first.
    pub(crate) async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, DbError> {
        let limit = filter.limit.clamp(1, 500);
        let mut runs = self.db.retrying(|| db::ledger::list(&self.db, filter, limit + 1)).await?;
        let next = (runs.len() > limit as usize).then(|| {
            runs.truncate(limit as usize);
            runs.last().map(|r| Cursor { requested_at: r.requested_at, id: r.id }.encode())
        });
        Ok(RunPage { runs, next: next.flatten() })
    }

    /// Every run queued or running.
    pub(crate) async fn runs_in_flight(&self) -> Result<Vec<Run>, DbError> {
        self.db.retrying(|| db::runs::in_flight(&self.db)).await
    }

    /// The last finished run of each of `workers`.
    pub(crate) async fn last_finished(&self, workers: &[String]) -> Result<Vec<Run>, DbError> {
        self.db.retrying(|| db::runs::last_finished(&self.db, workers)).await
    }

    /// What each running run with items has reported so far, by run id: its item lines and their rate per minute
    /// since it started, on the database clock (one statement for every worker).
    pub(crate) async fn running_items(&self) -> Result<HashMap<Uuid, RunningItems>, DbError> {
        let rows = self.db.retrying(|| db::running_items::list(&self.db)).await?;
        Ok(rows
            .into_iter()
            .map(|(run, items, seconds)| {
                // A second at least: a run a moment old does not report an absurd rate.
                let minutes = seconds.unwrap_or(0.0).max(1.0) / 60.0;
                let per_minute = (items as f64 / minutes * 10.0).round() / 10.0;
                (run, RunningItems { items, per_minute })
            })
            .collect())
    }
}
