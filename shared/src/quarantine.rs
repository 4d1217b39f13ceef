//! Quarantine: a document that failed in `quarantine_after` runs in a row of the worker that reported it is
//! given to that worker's later runs to skip, until an operator releases it with a reason. The streaks are kept
//! by the end of every run (`runs::end`); which streak is a quarantine is the catalogue's `quarantine_after`,
//! read here, so turning it on or changing it acts at once.

use std::collections::HashMap;

use uuid::Uuid;

use scrinalia_wire::QuarantineView;

use crate::{Catalogue, DbError, Store, db};

/// How many quarantined items a view lists.
const LISTED: i64 = 500;
/// How many releases a view lists.
const RELEASES_LISTED: i64 = 50;

/// Why a quarantine could not be read or released; each displays as a sentence for people.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    /// The catalogue has no such worker.
    #[error("There is no worker {0:?}.")]
    UnknownWorker(String),
    /// The worker has no quarantine.
    #[error("Worker {0} has no quarantine: its catalogue entry sets no quarantine_after.")]
    Off(String),
    /// The item is not quarantined.
    #[error("Item {item:?} of worker {worker} is not quarantined.")]
    NotQuarantined {
        /// The worker.
        worker: String,
        /// The item.
        item: String,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// The streak at which a worker's items are quarantined, if it has a quarantine.
fn threshold(catalogue: &Catalogue, worker: &str) -> Result<Option<i64>, QuarantineError> {
    let spec = catalogue.worker(worker).ok_or_else(|| QuarantineError::UnknownWorker(worker.to_owned()))?;
    Ok(spec.quarantine_after.map(i64::from))
}

impl Store {
    /// A worker's quarantined items, with their last errors, and the last releases.
    pub async fn quarantine(&self, catalogue: &Catalogue, worker: &str) -> Result<QuarantineView, QuarantineError> {
        let after = threshold(catalogue, worker)?;
        let releases = db::quarantine::releases(&self.db, worker, RELEASES_LISTED);
        let (quarantined, items, releases) = match after {
            Some(after) => tokio::try_join!(
                db::quarantine::count(&self.db, worker, after),
                db::quarantine::list(&self.db, worker, after, LISTED),
                releases
            )?,
            None => (0, Vec::new(), releases.await?),
        };
        Ok(QuarantineView {
            worker: worker.to_owned(),
            quarantine_after: after.and_then(|a| u32::try_from(a).ok()),
            quarantined,
            items,
            releases,
        })
    }

    /// How many of a worker's items are quarantined (0 for a worker without a quarantine).
    pub async fn quarantined_count(&self, catalogue: &Catalogue, worker: &str) -> Result<i64, QuarantineError> {
        match threshold(catalogue, worker)? {
            Some(after) => Ok(db::quarantine::count(&self.db, worker, after).await?),
            None => Ok(0),
        }
    }

    /// How many items of each worker with a quarantine are quarantined (workers with none are left out).
    pub async fn quarantined_counts(&self, catalogue: &Catalogue) -> Result<HashMap<String, i64>, DbError> {
        let mut counts = HashMap::new();
        for (worker, failures, items) in db::quarantine::streaks(&self.db).await? {
            let after = catalogue.worker(&worker).and_then(|w| w.quarantine_after).map(i64::from);
            if after.is_some_and(|after| failures >= after) {
                *counts.entry(worker).or_insert(0) += items;
            }
        }
        Ok(counts)
    }

    /// Releases `item` of `worker` from quarantine (every quarantined item when `None`), for `actor` with
    /// `reason`, in one transaction with its audit entry; how many were released.
    pub async fn release_quarantine(
        &self,
        catalogue: &Catalogue,
        worker: &str,
        item: Option<&str>,
        actor: &str,
        reason: &str,
    ) -> Result<u64, QuarantineError> {
        let after = threshold(catalogue, worker)?.ok_or_else(|| QuarantineError::Off(worker.to_owned()))?;
        let mut tx = self.db.begin_write().await?;
        let released = db::quarantine::release(&mut tx, worker, item, after).await?;
        if let (Some(item), 0) = (item, released) {
            return Err(QuarantineError::NotQuarantined { worker: worker.to_owned(), item: item.to_owned() });
        }
        db::quarantine::record_release(&mut tx, worker, item, released, actor, reason).await?;
        tx.commit().await?;
        Ok(released)
    }

    /// What a run of `worker` must skip: its quarantined items (none without a quarantine).
    pub(crate) async fn skip_list(&self, catalogue: &Catalogue, worker: &str) -> Result<Vec<String>, DbError> {
        match catalogue.worker(worker).and_then(|w| w.quarantine_after) {
            Some(after) => db::quarantine::quarantined_ids(&self.db, worker, i64::from(after)).await,
            None => Ok(Vec::new()),
        }
    }

    /// The items of `worker` with a failure streak under way: a run keeps their successes one by one, so that
    /// its end can close their streaks.
    pub(crate) async fn watched_items(&self, worker: &str) -> Result<Vec<String>, DbError> {
        db::quarantine::watched(&self.db, worker).await
    }

    /// The items a run is scoped to (a rerun of a run's failures); empty for any other run.
    pub(crate) async fn run_scope(&self, run: Uuid) -> Result<Vec<String>, DbError> {
        db::quarantine::scope(&self.db, run).await
    }
}
