//! Which queued runs a daemon may take: those of workers whose required labels it advertises, and, for a worker
//! that holds shared resources, only when every one of them has room across all daemons. Computed once from the
//! catalogue and the daemon's labels; the claim itself is decided by the database.

use std::{collections::BTreeSet, time::Duration};

use uuid::Uuid;

use crate::{
    Catalogue, Database, DbError, Run,
    db::{self, resources::Held},
};

/// What one daemon may claim.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    labels: BTreeSet<String>,
    /// Workers claimed in the plain, batched claim: none of these.
    exclude: Vec<String>,
    /// Workers that hold resources, each with its resources' (name, catalogue capacity), claimed one by one; a
    /// capacity override stored in the database wins over the catalogue's at each claim.
    holding: Vec<(String, Vec<(String, u32)>)>,
}

impl Placement {
    /// The placement of a daemon with `labels` (its host name is one of them) over `catalogue`.
    pub fn of(catalogue: &Catalogue, labels: impl IntoIterator<Item = String>) -> Self {
        let labels: BTreeSet<String> = labels.into_iter().collect();
        let mut placement = Self { labels, ..Self::default() };
        for worker in &catalogue.workers {
            if !worker.labels.iter().all(|l| placement.labels.contains(l)) {
                placement.exclude.push(worker.name.clone());
            } else if !worker.resources.is_empty() {
                placement.exclude.push(worker.name.clone());
                let resources = worker
                    .resources
                    .iter()
                    .filter_map(|r| catalogue.resource(r).map(|spec| (spec.name.clone(), spec.capacity)))
                    .collect();
                placement.holding.push((worker.name.clone(), resources));
            }
        }
        placement
    }

    /// The labels this daemon advertises.
    pub fn labels(&self) -> &BTreeSet<String> {
        &self.labels
    }

    /// Whether this daemon may run `worker` (it has every label the worker requires).
    pub fn places(&self, catalogue: &Catalogue, worker: &str) -> bool {
        catalogue.worker(worker).is_none_or(|w| w.labels.iter().all(|l| self.labels.contains(l)))
    }
}

impl Database {
    /// Claims up to `limit` of the oldest queued requests this daemon may place (of `workers` only, when given),
    /// with a lease of `lease`: first, in one statement, those of workers that hold no resource; then, when
    /// slots are left, one read of which workers that hold resources have a run due, and one short transaction
    /// for each of those (in catalogue order) while a resource has room. Runs of workers the daemon's catalogue does
    /// not know are claimed as before (and fail, naming the daemon).
    pub async fn claim_placed(
        &self,
        daemon: Uuid,
        lease: Duration,
        limit: u32,
        workers: Option<&[String]>,
        placement: &Placement,
    ) -> Result<Vec<Run>, DbError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let exclude = (!placement.exclude.is_empty()).then_some(placement.exclude.as_slice());
        let mut runs = db::runs::claim(self, daemon, lease, limit, workers, exclude).await?;
        let holding: Vec<String> = placement
            .holding
            .iter()
            .map(|(worker, _)| worker.clone())
            .filter(|w| workers.is_none_or(|only| only.contains(w)))
            .collect();
        if runs.len() >= limit as usize || holding.is_empty() {
            runs.sort_by_key(|r| (r.requested_at, r.id));
            return Ok(runs);
        }
        // One read says which of them have something to claim; only those cost a transaction.
        let queued = db::resources::queued_among(self, &holding).await?;
        for (worker, resources) in placement.holding.iter().filter(|(w, _)| queued.contains(w)) {
            if runs.len() >= limit as usize {
                break;
            }
            match claim_holding(self, daemon, lease, worker, resources).await? {
                Held::Claimed(run) => {
                    tracing::info!(run_id = %run.id, worker = %run.worker, "claimed, holding its resources");
                    runs.push(*run);
                }
                Held::NothingQueued => {}
                Held::Full { resource, holders } => {
                    tracing::debug!(worker = %worker, resource = %resource, holders = ?holders, "a resource is full");
                }
                Held::Busy { resource } => {
                    tracing::info!(worker = %worker, resource = %resource, "a resource stayed locked by another claim; next round");
                }
            }
        }
        runs.sort_by_key(|r| (r.requested_at, r.id));
        Ok(runs)
    }

    /// Every resource held now: (resource, run), oldest hold first.
    pub async fn resource_holders(&self) -> Result<Vec<(String, Uuid)>, DbError> {
        db::resources::holders(self).await
    }
}

/// How often, and how far apart, a claim tries a resource that another transaction holds locked: a claim holds
/// it for milliseconds, so a few short waits nearly always get through, and a daemon frozen mid-claim holds the
/// others back this long at most.
const BUSY_TRIES: u32 = 4;
const BUSY_PAUSE: Duration = Duration::from_millis(25);

/// [`db::resources::claim_holding`], tried again a few times while the resource is locked by another claim.
async fn claim_holding(
    db: &Database,
    daemon: Uuid,
    lease: Duration,
    worker: &str,
    resources: &[(String, u32)],
) -> Result<Held, DbError> {
    let mut tries = 1;
    loop {
        match db::resources::claim_holding(db, daemon, lease, worker, resources).await? {
            Held::Busy { .. } if tries < BUSY_TRIES => {
                tries += 1;
                tokio::time::sleep(BUSY_PAUSE).await;
            }
            held => return Ok(held),
        }
    }
}
