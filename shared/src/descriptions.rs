//! What workers say about themselves, kept in the database so that every API process and every run sees the
//! same thing: each worker's last `describe` (what its code declares), its last `check` (whether it has what it
//! needs), and the chores that produce them and the queue counts, which daemons take turns doing.

use std::{collections::HashMap, time::Duration};

use uuid::Uuid;

use crate::{
    Catalogue, Chore, ChoreKind, Database, DbError, Description, EffectiveWorker, Readiness, WorkerDescription,
    db::{self, retrying},
};

/// An attempt to describe a worker, as a daemon stores it.
#[derive(Debug, Clone)]
pub struct NewDescription {
    /// The worker.
    pub worker: String,
    /// What it answered, or why the attempt failed (a sentence).
    pub outcome: Result<Description, String>,
    /// The daemon that asked.
    pub described_by: Uuid,
    /// The command that answered.
    pub command: Vec<String>,
    /// How long it took.
    pub took_ms: i64,
}

/// What a worker's `check` answered, as a daemon stores it.
#[derive(Debug, Clone)]
pub struct NewReadiness {
    /// The worker.
    pub worker: String,
    /// Ready or not; `None` when the check failed.
    pub ready: Option<bool>,
    /// What is missing, as the worker said it.
    pub reason: Option<String>,
    /// Why the check failed.
    pub error: Option<String>,
    /// How long it took.
    pub took_ms: i64,
    /// The daemon that checked.
    pub checked_by: Uuid,
}

/// How often a daemon's chores come due.
#[derive(Debug, Clone, Copy)]
pub struct ChoreIntervals {
    /// A count is due this long after the last one started.
    pub count: Duration,
    /// A check is due this long after the last one started.
    pub check: Duration,
    /// A chore asked for is not started again sooner than this after its last start.
    pub min_gap: Duration,
    /// A request waits this long before its chore starts, so that requests made together (runs ending
    /// together, an operator's clicks, several API processes) are answered by one start.
    pub settle: Duration,
}

impl Database {
    /// Stores an attempt to describe a worker (a failure keeps the last description that succeeded).
    pub async fn store_description(&self, description: &NewDescription) -> Result<(), DbError> {
        let _own = self.own_writes().begin();
        db::descriptions::store(self, description).await
    }

    /// Every worker's stored description.
    pub async fn descriptions(&self) -> Result<Vec<WorkerDescription>, DbError> {
        retrying!(self, db::descriptions::list(self).await)
    }

    /// One worker's stored description.
    pub async fn description(&self, worker: &str) -> Result<Option<WorkerDescription>, DbError> {
        retrying!(self, db::descriptions::get(self, worker).await)
    }

    /// Stores what a worker's `check` answered.
    pub async fn store_readiness(&self, readiness: &NewReadiness) -> Result<(), DbError> {
        let _own = self.own_writes().begin();
        db::descriptions::store_readiness(self, readiness).await
    }

    /// Every worker's last readiness.
    pub async fn readiness(&self) -> Result<Vec<Readiness>, DbError> {
        retrying!(self, db::descriptions::readiness(self).await)
    }

    /// The worker called `name` as runs see it now (its catalogue entry merged with its stored description);
    /// `None` when the catalogue has no such worker.
    pub async fn effective_worker(
        &self,
        catalogue: &Catalogue,
        name: &str,
    ) -> Result<Option<EffectiveWorker>, DbError> {
        let Some(spec) = catalogue.worker(name) else { return Ok(None) };
        let stored = self.description(name).await?;
        Ok(Some(EffectiveWorker::of(catalogue, spec, stored.as_ref().and_then(|d| d.description.as_ref()))))
    }

    /// Every worker of the catalogue as runs see it now, in catalogue order.
    pub async fn effective_workers(&self, catalogue: &Catalogue) -> Result<Vec<EffectiveWorker>, DbError> {
        let mut stored: HashMap<String, WorkerDescription> =
            self.descriptions().await?.into_iter().map(|d| (d.worker.clone(), d)).collect();
        Ok(catalogue
            .workers
            .iter()
            .map(|spec| {
                let described = stored.remove(&spec.name).and_then(|d| d.description);
                EffectiveWorker::of(catalogue, spec, described.as_ref())
            })
            .collect())
    }

    /// Makes sure the chores of `workers` exist, so that the end of a run can ask for a count.
    pub async fn prepare_chores(&self, workers: &[String]) -> Result<(), DbError> {
        retrying!(self, db::chores::prepare(self, workers).await)
    }

    /// Asks for `chore` of `workers` now. Requests made before the chore's next start are answered by that one
    /// start, so a burst of requests costs one describe or count.
    pub async fn request_chore(&self, workers: &[String], chore: ChoreKind) -> Result<Vec<Chore>, DbError> {
        retrying!(self, db::chores::request(self, workers, chore).await)
    }

    /// Takes up to `limit` due chores of `workers` for `daemon`, each leased for `lease` (database clock).
    pub async fn claim_chores(
        &self,
        daemon: Uuid,
        workers: &[String],
        intervals: &ChoreIntervals,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<Chore>, DbError> {
        if limit == 0 || workers.is_empty() {
            return Ok(Vec::new());
        }
        let _own = self.own_writes().begin();
        db::chores::claim(self, daemon, workers, intervals, lease, limit).await
    }

    /// How long until a chore of `workers` may come due, on the database clock (zero when one is due now);
    /// `None` when none will until asked for.
    pub async fn next_chore_in(
        &self,
        workers: &[String],
        intervals: &ChoreIntervals,
    ) -> Result<Option<Duration>, DbError> {
        let (now, next) = retrying!(self, db::chores::next_due(self, workers, intervals).await)?;
        Ok(next.map(|at| (at - now).to_std().unwrap_or(Duration::ZERO)))
    }

    /// Ends `daemon`'s lease of a chore.
    pub async fn finish_chore(&self, daemon: Uuid, worker: &str, chore: ChoreKind) -> Result<(), DbError> {
        let _own = self.own_writes().begin();
        retrying!(self, db::chores::finish(self, daemon, worker, chore).await)
    }

    /// Every chore of `worker`.
    pub async fn chores(&self, worker: &str) -> Result<Vec<Chore>, DbError> {
        retrying!(self, db::chores::of(self, worker).await)
    }
}
