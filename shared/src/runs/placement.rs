//! Which queued runs a daemon may take: those of workers whose required labels it advertises, and, for a worker
//! that holds shared resources, only when every one of them has room: a global resource across all daemons, a
//! daemon-scoped one (a GPU) on this daemon, which then gives the run the lowest free slot of it. Computed once
//! from the catalogue, the daemon's labels and its `daemon.resources`; the claim itself is decided by the database.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use uuid::Uuid;

use crate::{
    Catalogue, Database, DbError, ResourceScope, Run, Store,
    db::{self, Tx},
};

/// What one daemon may claim.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    labels: BTreeSet<String>,
    /// Workers claimed in the plain, batched claim: none of these.
    exclude: Vec<String>,
    /// Workers that hold resources, each with its resources, claimed one by one.
    holding: Vec<(String, Vec<Need>)>,
}

/// A resource a worker holds one slot of while it runs, as this daemon counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Need {
    /// Its name.
    resource: String,
    /// Global: the catalogue's capacity (a capacity override stored in the database wins at each claim). Daemon-
    /// scoped: this daemon's own (`daemon.resources`), at least 1.
    capacity: u32,
    /// Whether it is daemon-scoped: counted on this daemon only, under a lock of its own, with a numbered slot.
    per_daemon: bool,
    /// At most this many claims of it in any minute, across all daemons (a global resource only).
    starts_per_minute: Option<u32>,
}

impl Placement {
    /// The placement of a daemon with `labels` (its host name is one of them) over `catalogue`, with no
    /// daemon-scoped resource: it never claims a worker that holds one.
    pub fn of(catalogue: &Catalogue, labels: impl IntoIterator<Item = String>) -> Self {
        Self::of_daemon(catalogue, labels, &BTreeMap::new())
    }

    /// The placement of a daemon with `labels` and `resources` (its `daemon.resources`: its capacity of each
    /// daemon-scoped resource) over `catalogue`. A worker whose labels it lacks, or that holds a daemon-scoped
    /// resource of which it has no slot, it never claims.
    pub fn of_daemon(
        catalogue: &Catalogue,
        labels: impl IntoIterator<Item = String>,
        resources: &BTreeMap<String, u32>,
    ) -> Self {
        let labels: BTreeSet<String> = labels.into_iter().collect();
        let mut placement = Self { labels, ..Self::default() };
        for worker in &catalogue.workers {
            if !worker.labels.iter().all(|l| placement.labels.contains(l)) {
                placement.exclude.push(worker.name.clone());
            } else if !worker.resources.is_empty() {
                placement.exclude.push(worker.name.clone());
                let needs: Option<Vec<Need>> = worker
                    .resources
                    .iter()
                    .filter_map(|r| catalogue.resource(r))
                    .map(|spec| match spec.scope {
                        ResourceScope::Global => Some(Need {
                            resource: spec.name.clone(),
                            capacity: spec.capacity,
                            per_daemon: false,
                            starts_per_minute: spec.starts_per_minute.and_then(|n| u32::try_from(n).ok()),
                        }),
                        ResourceScope::Daemon => resources.get(&spec.name).filter(|n| **n > 0).map(|n| Need {
                            resource: spec.name.clone(),
                            capacity: *n,
                            per_daemon: true,
                            starts_per_minute: None,
                        }),
                    })
                    .collect();
                // A daemon-scoped resource this daemon has none of: excluded, like a missing label.
                if let Some(needs) = needs {
                    placement.holding.push((worker.name.clone(), needs));
                }
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
    /// Claims up to `limit` queued requests this daemon may place (of `workers` only, when given), with a lease of
    /// `lease`, in one order across workers: higher priority first, then the oldest request (see
    /// [`db::runs::QueueKey`]). Without workers that hold resources it is one statement. With them, one read
    /// first says which of those have a run due and where it stands; the plain claim takes only what goes ahead
    /// of the first of them; then each of those is claimed in that order, in a short transaction of its own,
    /// while its resources have room; and what slots are left go to the plain runs behind them. Runs of workers
    /// the daemon's catalogue does not know are claimed as before (and fail, naming the daemon).
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
        let holding: Vec<String> = placement
            .holding
            .iter()
            .map(|(worker, _)| worker.clone())
            .filter(|w| workers.is_none_or(|only| only.contains(w)))
            .collect();
        if holding.is_empty() {
            let mut runs = db::runs::claim(&self.db, daemon, lease, limit, workers, exclude, None).await?;
            runs.sort_by_key(db::runs::QueueKey::of);
            return Ok(runs);
        }
        let queued = db::resources::queued_among(&self.db, &holding).await?;
        let first_held = queued.first().map(|(_, key)| *key);
        let mut runs = db::runs::claim(&self.db, daemon, lease, limit, workers, exclude, first_held).await?;
        for (worker, _) in &queued {
            if runs.len() >= limit as usize {
                break;
            }
            let Some((_, resources)) = placement.holding.iter().find(|(w, _)| w == worker) else { continue };
            match claim_holding(&self.db, daemon, lease, worker, resources).await? {
                Held::Claimed(run) => {
                    tracing::info!(run_id = %run.id, worker = %run.worker, priority = run.priority, "claimed, holding its resources");
                    runs.push(*run);
                }
                Held::NothingQueued => {}
                Held::Full { resource, holders } => {
                    tracing::debug!(worker = %worker, resource = %resource, holders = ?holders, "a resource is full");
                }
                Held::Busy { resource } => {
                    tracing::info!(worker = %worker, resource = %resource, "a resource stayed locked by another claim; next round");
                }
                Held::RateLimited { resource } => {
                    tracing::debug!(worker = %worker, resource = %resource, "a resource's starts per minute are used up");
                }
            }
        }
        let left = limit.saturating_sub(u32::try_from(runs.len()).unwrap_or(u32::MAX));
        if first_held.is_some() && left > 0 {
            runs.extend(db::runs::claim(&self.db, daemon, lease, left, workers, exclude, None).await?);
        }
        runs.sort_by_key(db::runs::QueueKey::of);
        Ok(runs)
    }

    /// Every resource held now: (resource, run), oldest hold first.
    pub(crate) async fn resource_holders(&self) -> Result<Vec<(String, Uuid)>, DbError> {
        db::resources::holders(&self.db).await
    }

    /// The slots of daemon-scoped resources run `run` holds: (resource, slot), by resource.
    pub(crate) async fn resource_slots(&self, run: Uuid) -> Result<Vec<(String, u32)>, DbError> {
        self.db.retrying(|| db::resources::slots_of(&self.db, run)).await
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
    /// The resource's starts per minute were used up.
    RateLimited { resource: String },
}

/// The capacity a claim counts against: the stored override when there is one, else the catalogue's.
fn capacity(overridden: Option<i32>, catalogue: u32) -> usize {
    overridden.and_then(|c| usize::try_from(c).ok()).unwrap_or(catalogue as usize)
}

/// Whether a resource of `capacity` slots held by `holders` runs has room for one more.
fn has_room(holders: usize, capacity: usize) -> bool {
    holders < capacity
}

/// The slot a new holder of a daemon-scoped resource of `capacity` slots takes on a daemon where `taken` are held:
/// the lowest free one, from 0; `None` when all of 0..capacity are taken (slots above the capacity, held since
/// before it was lowered, leave no room either).
fn free_slot(taken: &[u32], capacity: u32) -> Option<u32> {
    if taken.len() >= capacity as usize {
        return None;
    }
    (0..capacity).find(|slot| !taken.contains(slot))
}

/// The key of the advisory lock of the daemon-scoped `resource` on `daemon`: claims of it on other daemons
/// never wait for one another.
fn daemon_lock_key(resource: &str, daemon: Uuid) -> String {
    format!("resource.{resource}.daemon.{daemon}")
}

/// [`claim_holding_once`], tried again a few times while the resource is locked by another claim.
async fn claim_holding(
    db: &Database,
    daemon: Uuid,
    lease: Duration,
    worker: &str,
    needs: &[Need],
) -> Result<Held, DbError> {
    let mut tries = 1;
    loop {
        let mut tx = db.begin_write().await?;
        let held = claim_holding_once(&mut tx, daemon, lease, worker, needs).await?;
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

/// In the transaction `tx`, claims the oldest queued, due run of `worker` for `daemon` if every one of `needs`
/// has a free slot, taking one of each; the caller commits only a claim. The run is locked first (PostgreSQL:
/// `skip locked`, so a daemon never waits for another's claim of it); then each resource, in name order (so two
/// claims never deadlock), under a transaction-scoped advisory lock, so that the count of its holders and the
/// insert of the new one cannot interleave with another claim's (SQLite serialises writers anyway): a global
/// resource's lock is one for all daemons, and its holders are counted everywhere; a daemon-scoped resource's
/// lock is one per (resource, daemon), its holders counted on `daemon` only, and the run takes the lowest free
/// slot there (the unique index on (daemon, resource, slot) is the last word). The lock is only tried: a daemon
/// never waits for another's claim (one frozen mid-claim would hold every claim round of the others, and the
/// runs they claimed before it would lose their leases before their workers start); the worker is tried again at
/// the next claim round. A global resource's capacity is read under that lock, which a change of capacity also
/// takes.
async fn claim_holding_once(
    tx: &mut Tx,
    daemon: Uuid,
    lease: Duration,
    worker: &str,
    needs: &[Need],
) -> Result<Held, DbError> {
    let mut sorted: Vec<&Need> = needs.iter().collect();
    sorted.sort_by(|a, b| a.resource.cmp(&b.resource));
    let Some(id) = db::resources::first_due(&mut *tx, worker).await? else { return Ok(Held::NothingQueued) };
    let mut slots: Vec<Option<u32>> = Vec::with_capacity(sorted.len());
    for need in &sorted {
        let resource = &need.resource;
        if need.per_daemon {
            if !tx.try_lock(&daemon_lock_key(resource, daemon)).await? {
                return Ok(Held::Busy { resource: resource.clone() });
            }
            let taken = db::resources::slots_on(&mut *tx, resource, daemon).await?;
            match free_slot(&taken, need.capacity) {
                Some(slot) => slots.push(Some(slot)),
                None => {
                    let holders = db::resources::holders_of(&mut *tx, resource).await?;
                    return Ok(Held::Full { resource: resource.clone(), holders });
                }
            }
        } else {
            if !tx.try_lock(&db::resource_overrides::lock_key(resource)).await? {
                return Ok(Held::Busy { resource: resource.clone() });
            }
            let capacity = capacity(db::resource_overrides::capacity(&mut *tx, resource).await?, need.capacity);
            let holders = db::resources::holders_of(&mut *tx, resource).await?;
            if !has_room(holders.len(), capacity) {
                return Ok(Held::Full { resource: resource.clone(), holders });
            }
            if let Some(most) = need.starts_per_minute
                && db::resources::starts_in_last_minute(&mut *tx, resource).await? >= u64::from(most)
            {
                return Ok(Held::RateLimited { resource: resource.clone() });
            }
            slots.push(None);
        }
    }
    let Some(run) = db::resources::claim_one(&mut *tx, id, daemon, lease).await? else {
        return Ok(Held::NothingQueued);
    };
    for (need, slot) in sorted.iter().zip(slots) {
        db::resources::hold(&mut *tx, run.id, &need.resource, slot.map(|s| (daemon, s))).await?;
        if need.starts_per_minute.is_some() {
            db::resources::record_start(&mut *tx, &need.resource, run.id).await?;
            db::resources::forget_starts(&mut *tx, &need.resource).await?;
        }
    }
    Ok(Held::Claimed(Box::new(run)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{Need, Placement, capacity, free_slot, has_room};
    use crate::{Catalogue, ResourceScope, ResourceSpec};

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

    #[test]
    fn a_daemon_slot_is_the_lowest_free_one_below_the_capacity() {
        assert_eq!(free_slot(&[], 1), Some(0));
        assert_eq!(free_slot(&[0], 1), None);
        assert_eq!(free_slot(&[0, 2], 4), Some(1), "a slot freed in the middle is taken again first");
        assert_eq!(free_slot(&[1], 2), Some(0));
        assert_eq!(free_slot(&[0, 1], 2), None);
        assert_eq!(free_slot(&[3], 2), Some(0), "a slot above a lowered capacity still leaves the lower ones");
        assert_eq!(free_slot(&[2, 3], 2), None, "but counts as a holder");
        assert_eq!(free_slot(&[], 0), None);
    }

    #[test]
    fn a_daemon_without_a_slot_of_a_daemon_scoped_resource_never_claims_its_workers() {
        let mut catalogue: Catalogue = serde_json::from_value::<Vec<crate::WorkerSpec>>(serde_json::json!([
            {"name": "embed", "command": ["e"], "resources": ["gpu", "model"]},
            {"name": "plain", "command": ["p"]}
        ]))
        .map(|workers| Catalogue { workers, ..Catalogue::default() })
        .expect("workers");
        catalogue.resources = vec![
            ResourceSpec {
                name: "gpu".into(),
                capacity: 0,
                description: None,
                scope: ResourceScope::Daemon,
                starts_per_minute: None,
                preempt_after_seconds: None,
                preempt_grace_seconds: None,
            },
            ResourceSpec {
                name: "model".into(),
                capacity: 3,
                description: None,
                scope: ResourceScope::Global,
                starts_per_minute: None,
                preempt_after_seconds: None,
                preempt_grace_seconds: None,
            },
        ];
        let none = Placement::of(&catalogue, Vec::new());
        assert_eq!((none.exclude.as_slice(), none.holding.len()), (["embed".to_owned()].as_slice(), 0));
        let zero: BTreeMap<String, u32> = [("gpu".into(), 0)].into();
        assert!(Placement::of_daemon(&catalogue, Vec::new(), &zero).holding.is_empty(), "0 is none");
        let two: BTreeMap<String, u32> = [("gpu".into(), 2)].into();
        let gpu = Placement::of_daemon(&catalogue, Vec::new(), &two);
        let needs = &gpu.holding[0].1;
        assert_eq!(
            needs,
            &[
                Need { resource: "gpu".into(), capacity: 2, per_daemon: true, starts_per_minute: None },
                Need { resource: "model".into(), capacity: 3, per_daemon: false, starts_per_minute: None },
            ]
        );
    }
}
