//! What workers say about themselves, kept in the database so that every API process and every run sees the
//! same thing: each worker's last `describe` (what its code declares), its last `check` (whether it has what it
//! needs), and the chores that produce them and the queue counts, which daemons take turns doing.

use std::{collections::HashMap, time::Duration};

use uuid::Uuid;

use crate::{Catalogue, Chore, ChoreKind, DbError, EffectiveWorker, Readiness, Store, WorkerDescription, db};

pub use crate::db::{
    chores::ChoreIntervals,
    descriptions::{NewDescription, NewReadiness},
};

impl Store {
    /// Stores an attempt to describe a worker (a failure keeps the last description that succeeded).
    pub(crate) async fn store_description(&self, description: &NewDescription) -> Result<(), DbError> {
        let _own = self.db.own_write();
        db::descriptions::store(&self.db, description).await
    }

    /// Every worker's stored description.
    pub(crate) async fn descriptions(&self) -> Result<Vec<WorkerDescription>, DbError> {
        self.db.retrying(|| db::descriptions::list(&self.db)).await
    }

    /// One worker's stored description.
    pub(crate) async fn description(&self, worker: &str) -> Result<Option<WorkerDescription>, DbError> {
        self.db.retrying(|| db::descriptions::get(&self.db, worker)).await
    }

    /// Stores what a worker's `check` answered.
    pub(crate) async fn store_readiness(&self, readiness: &NewReadiness) -> Result<(), DbError> {
        let _own = self.db.own_write();
        db::descriptions::store_readiness(&self.db, readiness).await
    }

    /// Every worker's last readiness.
    pub(crate) async fn readiness(&self) -> Result<Vec<Readiness>, DbError> {
        self.db.retrying(|| db::descriptions::readiness(&self.db)).await
    }

    /// The worker called `name` as runs see it now (its catalogue entry merged with its stored description);
    /// `None` when the catalogue has no such worker.
    pub(crate) async fn effective_worker(
        &self,
        catalogue: &Catalogue,
        name: &str,
    ) -> Result<Option<EffectiveWorker>, DbError> {
        let Some(spec) = catalogue.worker(name) else { return Ok(None) };
        let stored = self.description(name).await?;
        Ok(Some(EffectiveWorker::of(catalogue, spec, stored.as_ref().and_then(|d| d.description.as_ref()))))
    }

    /// Every worker of the catalogue as runs see it now, in catalogue order.
    pub(crate) async fn effective_workers(&self, catalogue: &Catalogue) -> Result<Vec<EffectiveWorker>, DbError> {
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
    pub(crate) async fn prepare_chores(&self, workers: &[String]) -> Result<(), DbError> {
        self.db.retrying(|| db::chores::prepare(&self.db, workers)).await
    }

    /// Asks for `chore` of `workers` now. Requests made before the chore's next start are answered by that one
    /// start, so a burst of requests costs one describe or count.
    pub async fn request_chore(&self, workers: &[String], chore: ChoreKind) -> Result<Vec<Chore>, DbError> {
        self.db.retrying(|| db::chores::request(&self.db, workers, chore)).await
    }

    /// Takes up to `limit` due chores of `workers` for `daemon`, each leased for `lease` (database clock).
    pub(crate) async fn claim_chores(
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
        let _own = self.db.own_write();
        db::chores::claim(&self.db, daemon, workers, intervals, lease, limit).await
    }

    /// How long until a chore of `workers` may come due, on the database clock (zero when one is due now);
    /// `None` when none will until asked for.
    pub(crate) async fn next_chore_in(
        &self,
        workers: &[String],
        intervals: &ChoreIntervals,
    ) -> Result<Option<Duration>, DbError> {
        let (now, next) = self.db.retrying(|| db::chores::next_due(&self.db, workers, intervals)).await?;
        Ok(next.map(|at| (at - now).to_std().unwrap_or(Duration::ZERO)))
    }

    /// Ends `daemon`'s lease of a chore.
    pub(crate) async fn finish_chore(&self, daemon: Uuid, worker: &str, chore: ChoreKind) -> Result<(), DbError> {
        let _own = self.db.own_write();
        self.db.retrying(|| db::chores::finish(&self.db, daemon, worker, chore)).await
    }

    /// Every chore of `worker`.
    pub(crate) async fn chores(&self, worker: &str) -> Result<Vec<Chore>, DbError> {
        self.db.retrying(|| db::chores::of(&self.db, worker)).await
    }
}
