//! The claim: queued requests taken for a daemon in one autocommitted statement, in one order across workers
//! (priority, then the oldest request, then the id), with a lease from the database clock.

use std::time::Duration;

use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::Run;

use crate::{
    Database, Result,
    database::Pool,
    dialect::{DbTime, Sql, sql},
};

/// Where a queued run stands in the claim's order: higher priority first, then the oldest request, then the
/// lowest id (ids are UUIDv7, so a tie of times still goes by request order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueKey {
    /// The run's priority, 0 to 100.
    pub priority: i16,
    /// When it was requested.
    pub requested_at: chrono::DateTime<chrono::Utc>,
    /// The run.
    pub id: Uuid,
}

impl QueueKey {
    fn order(&self) -> (std::cmp::Reverse<i16>, chrono::DateTime<chrono::Utc>, Uuid) {
        (std::cmp::Reverse(self.priority), self.requested_at, self.id)
    }

    /// The key of `run`.
    pub fn of(run: &Run) -> Self {
        Self { priority: run.priority, requested_at: run.requested_at, id: run.id }
    }
}

impl Ord for QueueKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

impl PartialOrd for QueueKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Claims up to `limit` queued requests, first in the claim's order (see [`QueueKey`]; of `workers` only, when
/// given; never of `exclude`; only those ahead of `ahead_of`, when given) for `daemon`, with a lease of `lease`
/// from now. One autocommitted statement: no transaction is held for the run.
pub async fn claim(
    db: &Database,
    daemon: Uuid,
    lease: Duration,
    limit: u32,
    workers: Option<&[String]>,
    exclude: Option<&[String]>,
    ahead_of: Option<QueueKey>,
) -> Result<Vec<Run>> {
    let (lease, limit) = (lease.as_secs_f64(), i64::from(limit));
    let (priority, requested_at, id) =
        (ahead_of.map(|k| k.priority), ahead_of.map(|k| DbTime(k.requested_at)), ahead_of.map(|k| k.id));
    let claimed = match db.pool() {
        Pool::Postgres(pool) => {
            sqlx::query_as::<_, Run>(CLAIM_POSTGRES.postgres)
                .bind(daemon)
                .bind(lease)
                .bind(limit)
                .bind(workers)
                .bind(exclude)
                .bind(priority)
                .bind(requested_at)
                .bind(id)
                .fetch_all(pool)
                .await
        }
        Pool::Sqlite(pool) => {
            sqlx::query_as::<_, Run>(CLAIM_SQLITE.sqlite)
                .bind(daemon)
                .bind(lease)
                .bind(limit)
                .bind(workers.map(Json))
                .bind(exclude.map(Json))
                .bind(priority)
                .bind(requested_at)
                .bind(id)
                .fetch_all(pool)
                .await
        }
    };
    Ok(claimed?)
}

/// The claim on PostgreSQL. It locks the candidates with `skip locked`, so concurrent claimers take different
/// rows instead of waiting for each other; `= any(array(…))` evaluates the locking subquery exactly once. The
/// candidates come from the partial index of queued rows, never from the ledger.
pub(crate) const CLAIM_POSTGRES: Sql = sql!(
    "update worker_runs set state = 'running', claimed_by = $1, claimed_at = now(), \
             lease_expires_at = now() + make_interval(secs => $2) \
         where id = any(array(select id from worker_runs where state = 'queued' \
             and ($4::text[] is null or worker = any($4)) and ($5::text[] is null or worker <> all($5)) \
             and (not_before is null or not_before <= now()) and (shards is null or parent_id is not null) \
             and ($6::smallint is null or priority > $6 or (priority = $6 and (requested_at < $7 \
                 or (requested_at = $7 and id < $8)))) \
             order by priority desc, requested_at, id for update skip locked limit $3)) \
         returning ",
    run_columns!()
);
/// The claim on SQLite, which serialises writers: the same claim is one plain `update … returning`.
pub(crate) const CLAIM_SQLITE: Sql = sql!(
    "update worker_runs set state = 'running', claimed_by = $1, claimed_at = ",
    now,
    ", \
             lease_expires_at = ",
    now_plus(2),
    " \
         where id in (select id from worker_runs where state = 'queued' \
             and ($4 is null or worker in (select value from json_each($4))) \
             and ($5 is null or worker not in (select value from json_each($5))) \
             and (not_before is null or not_before <= ",
    now,
    ") and (shards is null or parent_id is not null) \
             and ($6 is null or priority > $6 or (priority = $6 and (requested_at < $7 \
                 or (requested_at = $7 and id < $8)))) \
             order by priority desc, requested_at, id limit $3) \
         returning ",
    run_columns!()
);
