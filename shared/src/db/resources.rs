//! The statements of `run_resources`: claiming a run of a worker that holds shared resources, atomically across
//! daemons, and releasing what a run held when it ends.

use std::time::Duration;

use uuid::Uuid;

use super::{
    Database, Dialect, Result,
    dialect::{Sql, sql},
    on_pool, resource_overrides,
    runs::run_columns,
};
use crate::Run;

/// Releases every resource `$run` held, in the transaction `$tx` (of `$db`) that ends it.
pub(crate) const RELEASE: Sql = sql!("delete from run_resources where run_id = $1");

/// What a claim of a run that holds resources found.
#[derive(Debug)]
pub(crate) enum Held {
    /// Claimed, with a slot of every resource.
    Claimed(Box<Run>),
    /// Nothing of the worker was queued and due.
    NothingQueued,
    /// A resource was at capacity: its name and its holders.
    Full { resource: String, holders: Vec<Uuid> },
    /// Another transaction was claiming a slot of the resource, or changing its capacity, at that moment.
    Busy { resource: String },
}

/// Claims the oldest queued, due run of `worker` for `daemon` if every one of `resources` (name, catalogue
/// capacity) has a free slot, taking one of each, in one transaction. The run is locked first (PostgreSQL: `skip
/// locked`, so a daemon never waits for another's claim of it); then each resource, in name order, under a
/// transaction-scoped advisory lock, so that the count of its holders and the insert of the new one cannot
/// interleave with another daemon's (SQLite serialises writers anyway). The lock is only tried: a daemon never
/// waits for another's claim (one frozen mid-claim would hold every claim round of the others, and the runs
/// they claimed before it would lose their leases before their workers start); the worker is tried again at
/// the next claim round. The lease is counted from the statement's clock, not the transaction's start. A resource's capacity is its stored
/// override when it has one, read under that lock, else the catalogue's. Ends release the slots in the
/// transaction that ends the run.
pub(crate) async fn claim_holding(
    db: &Database,
    daemon: Uuid,
    lease: Duration,
    worker: &str,
    resources: &[(String, u32)],
) -> Result<Held> {
    const CANDIDATE: Sql = sql!(
        "select id from worker_runs where state = 'queued' and worker = $1 and (not_before is null or not_before <= ",
        now,
        ") order by requested_at, id limit 1",
        skip_locked
    );
    const HOLDERS: Sql = sql!("select run_id from run_resources where resource = $1 order by held_since, run_id");
    const CLAIM: Sql = sql!(
        "update worker_runs set state = 'running', claimed_by = $2, claimed_at = ",
        now,
        ", lease_expires_at = ",
        clock_plus(3),
        " where id = $1 and state = 'queued' returning ",
        run_columns!()
    );
    const HOLD: Sql = sql!("insert into run_resources (run_id, resource) values ($1, $2)");
    let mut sorted: Vec<&(String, u32)> = resources.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let candidate: Option<Uuid> =
            sqlx::query_scalar(db.text(CANDIDATE)).bind(worker).fetch_optional(&mut *tx).await?;
        let Some(id) = candidate else {
            tx.rollback().await?;
            return Ok(Held::NothingQueued);
        };
        for (resource, catalogue_capacity) in &sorted {
            if !Dialect::try_lock(&mut tx, &resource_overrides::lock_key(resource)).await? {
                tx.rollback().await?;
                return Ok(Held::Busy { resource: resource.clone() });
            }
            // Read under the lock a change of capacity also takes, so the count below is against the capacity
            // in force now; the catalogue's applies when no override is stored.
            let overridden: Option<i32> = sqlx::query_scalar(db.text(resource_overrides::CAPACITY))
                .bind(resource)
                .fetch_optional(&mut *tx)
                .await?;
            let capacity = overridden.and_then(|c| usize::try_from(c).ok()).unwrap_or(*catalogue_capacity as usize);
            let holders: Vec<Uuid> = sqlx::query_scalar(db.text(HOLDERS)).bind(resource).fetch_all(&mut *tx).await?;
            if holders.len() >= capacity {
                tx.rollback().await?;
                return Ok(Held::Full { resource: resource.clone(), holders });
            }
        }
        let run: Option<Run> = sqlx::query_as(db.text(CLAIM))
            .bind(id)
            .bind(daemon)
            .bind(lease.as_secs_f64())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(run) = run else {
            tx.rollback().await?;
            return Ok(Held::NothingQueued);
        };
        for (resource, _) in &sorted {
            sqlx::query(db.text(HOLD)).bind(run.id).bind(resource).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(Held::Claimed(Box::new(run)))
    })
}

/// Which of `workers` have a queued run that is due now, in one statement, so that a claim opens a transaction
/// only for the workers with something to claim.
pub(crate) async fn queued_among(db: &Database, workers: &[String]) -> Result<Vec<String>> {
    const QUEUED: Sql = sql!(
        "select distinct worker from worker_runs where state = 'queued' and worker in (select value from ",
        json_list(1, w),
        ") and (not_before is null or not_before <= ",
        now,
        ")"
    );
    Ok(on_pool!(db, QUEUED, |pool, sql| sqlx::query_scalar(sql)
        .bind(sqlx::types::Json(workers))
        .fetch_all(pool)
        .await)?)
}

/// Every resource held now: (resource, run), oldest hold first.
pub(crate) async fn holders(db: &Database) -> Result<Vec<(String, Uuid)>> {
    const ALL: Sql = sql!("select resource, run_id from run_resources order by resource, held_since, run_id");
    Ok(on_pool!(db, ALL, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)?)
}
