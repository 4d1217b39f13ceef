//! Which queued runs a daemon may take: those of workers whose required labels it advertises, and, for a worker
//! that holds shared resources, only when every one of them has room across all daemons. Computed once from the
//! catalogue and the daemon's labels; the claim itself is decided by the database.

use std::{collections::BTreeSet, time::Duration};

use uuid::Uuid;

use crate::{
    Catalogue, Database, DbError, Run, Store,
    db::{self, Tx},
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

impl Store {
    /// Claims up to `limit` of the oldest queued requests this daemon may place (of `workers` only, when given),
    /// with a lease of `lease`: first, in one statement, those of workers that hold no resource; then, when
    /// slots are left, one read of which workers that hold resources have a run due, and one short transaction
    /// for each of those (in catalogue order) while a resource has room. Runs of workers the daemon's catalogue does
    /// not know are claimed as before (and fail, naming the daemon).
    pub(crate) async fn claim_placed(
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
        let mut runs = db::runs::claim(&self.db, daemon, lease, limit, workers, exclude).await?;
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
        let queued = db::resources::queued_among(&self.db, &holding).await?;
        for (worker, resources) in placement.holding.iter().filter(|(w, _)| queued.contains(w)) {
            if runs.len() >= limit as usize {
                break;
            }
            match claim_holding(&self.db, daemon, lease, worker, resources).await? {
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
    pub(crate) async fn resource_holders(&self) -> Result<Vec<(String, Uuid)>, DbError> {
        db::resources::holders(&self.db).await
    }
}

/// How often, and how far apart, a claim tries a resource that another transaction holds locked: a claim holds
/// it for milliseconds, so a few short waits nearly always get through, and a daemon frozen mid-claim holds the
/// others back this long at most.
const BUSY_TRIES: u32 = 4;
const BUSY_PAUSE: Duration = Duration::from_millis(25);

/// What a claim of a run that holds resources found.
#[derive(Debug)]
enum Held {
    /// Claimed, with a slot of every resource.
    Claimed(Box<Run>),
    /// Nothing of the worker was queued and due.
    NothingQueued,
    /// A resource was at capacity: its name and its holders.
    Full { resource: String, holders: Vec<Uuid> },
    /// Another transaction was claiming a slot of the resource, or changing its capacity, at that moment.
    Busy { resource: String },
}

/// The capacity a claim counts against: the stored override when there is one, else the catalogue's.
fn capacity(overridden: Option<i32>, catalogue: u32) -> usize {
    overridden.and_then(|c| usize::try_from(c).ok()).unwrap_or(catalogue as usize)
}

/// Whether a resource of `capacity` slots held by `holders` runs has room for one more.
fn has_room(holders: usize, capacity: usize) -> bool {
    holders < capacity
}

/// [`claim_holding_once`], tried again a few times while the resource is locked by another claim.
async fn claim_holding(
    db: &Database,
    daemon: Uuid,
    lease: Duration,
    worker: &str,
    resources: &[(String, u32)],
) -> Result<Held, DbError> {
    let mut tries = 1;
    loop {
        let mut tx = db.begin_write().await?;
        let held = claim_holding_once(&mut tx, daemon, lease, worker, resources).await?;
        match held {
            Held::Claimed(_) => tx.commit().await?,
            _ => tx.rollback().await?,
        }
        match held {
            Held::Busy { .. } if tries < BUSY_TRIES => {
                tries += 1;
                tokio::time::sleep(BUSY_PAUSE).await;
            }
            held => return Ok(held),
        }
    }
}

/// In the transaction `tx`, claims the oldest queued, due run of `worker` for `daemon` if every one of
/// `resources` (name, catalogue capacity) has a free slot, taking one of each; the caller commits only a claim.
/// The run is locked first (PostgreSQL: `skip locked`, so a daemon never waits for another's claim of it); then
/// each resource, in name order (so two claims never deadlock), under a transaction-scoped advisory lock, so
/// that the count of its holders and the insert of the new one cannot interleave with another daemon's (SQLite
/// serialises writers anyway). The lock is only tried: a daemon never waits for another's claim (one frozen
/// mid-claim would hold every claim round of the others, and the runs they claimed before it would lose their
/// leases before their workers start); the worker is tried again at the next claim round. A resource's
/// capacity is read under that lock, which a change of capacity also takes.
async fn claim_holding_once(
    tx: &mut Tx,
    daemon: Uuid,
    lease: Duration,
    worker: &str,
    resources: &[(String, u32)],
) -> Result<Held, DbError> {
    let mut sorted: Vec<&(String, u32)> = resources.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let Some(id) = db::resources::first_due(&mut *tx, worker).await? else { return Ok(Held::NothingQueued) };
    for (resource, catalogue_capacity) in &sorted {
        if !tx.try_lock(&db::resource_overrides::lock_key(resource)).await? {
            return Ok(Held::Busy { resource: resource.clone() });
        }
        let capacity = capacity(db::resource_overrides::capacity(&mut *tx, resource).await?, *catalogue_capacity);
        let holders = db::resources::holders_of(&mut *tx, resource).await?;
        if !has_room(holders.len(), capacity) {
            return Ok(Held::Full { resource: resource.clone(), holders });
        }
    }
    let Some(run) = db::resources::claim_one(&mut *tx, id, daemon, lease).await? else {
        return Ok(Held::NothingQueued);
    };
    for (resource, _) in &sorted {
        db::resources::hold(&mut *tx, run.id, resource).await?;
    }
    Ok(Held::Claimed(Box::new(run)))
}

#[cfg(test)]
mod tests {
    use super::{capacity, has_room};

    #[test]
    fn a_stored_capacity_wins_over_the_catalogues_and_a_full_resource_has_no_room() {
        assert_eq!(capacity(None, 2), 2);
        assert_eq!(capacity(Some(5), 2), 5);
        assert_eq!(capacity(Some(0), 2), 0, "an override of zero stops every claim");
        assert_eq!(capacity(Some(-1), 2), 2, "a value the column's check refuses never counts");
        assert!(has_room(1, 2));
        assert!(!has_room(2, 2));
        assert!(!has_room(0, 0));
    }
}
