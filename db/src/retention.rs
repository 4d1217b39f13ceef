//! The statements of retention: the lease that lets one daemon at a time prune, the policy's selection of
//! prunable runs (shared by the prune and the export, so the export writes exactly what a prune would remove),
//! the batched deletes, the thinning of progress histories, and the pending log deletes.
//!
//! Every batch is one short statement or transaction on terminal rows only: claims read queued rows, so a prune
//! never waits on them nor makes them wait.

use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::Run;

use crate::{
    Database, On, Result,
    dialect::{DbTime, Sql, sql},
    lease, run,
    runs::run_columns,
    tx::Exec,
};

/// The one lease row.
const LEASE: &str = "prune";

/// The policy's ages and counts, bound as `$1`–`$4` of [`prunable!`].
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub succeeded_secs: f64,
    pub failed_secs: f64,
    pub cancelled_secs: f64,
    pub keep_last: i64,
}

/// The condition on a run `r` that the policy prunes now: terminal, older than its state's age, not among the
/// newest `$4` finished runs of its worker (ties with the last kept one are kept), not the run that a run still
/// queued or running retries or continues (it may need its checkpoint), and not a step of a pipeline run still
/// going. Nothing here depends on what else is pruned, so the export lists exactly what a pass deletes.
macro_rules! prunable {
    ($d:ident;) => {
        concat!(
            "r.finished_at is not null and r.state in ('succeeded', 'failed', 'interrupted', 'cancelled') \
             and r.finished_at < case r.state when 'succeeded' then ",
            $crate::dialect::fragment!($d; now_minus(1)),
            " when 'cancelled' then ",
            $crate::dialect::fragment!($d; now_minus(3)),
            " else ",
            $crate::dialect::fragment!($d; now_minus(2)),
            " end \
             and r.finished_at < (select k.finished_at from worker_runs k where k.worker = r.worker \
                 and k.finished_at is not null order by k.finished_at desc limit 1 offset $4 - 1) \
             and not exists (select 1 from worker_runs c where c.follows = r.id and c.state in ('queued', 'running')) \
             and not exists (select 1 from worker_runs c where c.retry_of = r.id and c.state in ('queued', 'running')) \
             and (r.pipeline_run_id is null or not exists (select 1 from pipeline_runs p \
                 where p.id = r.pipeline_run_id and p.state = 'running'))"
        )
    };
}

macro_rules! bind_policy {
    ($query:expr, $p:expr) => {{
        let p: &Policy = $p;
        $query.bind(p.succeeded_secs).bind(p.failed_secs).bind(p.cancelled_secs).bind(p.keep_last)
    }};
}

/// Takes the prune lease for `ttl_secs` if no live holder has it and the last pass ended `interval_secs` ago or
/// more; whether it was taken.
pub async fn acquire(on: impl Into<On<'_>>, holder: Uuid, ttl_secs: f64, interval_secs: f64) -> Result<bool> {
    const ACQUIRE: Sql = sql!(
        "insert into retention_lease (name, holder, expires_at) values ($4, $1, ",
        clock_plus(2),
        ") on conflict (name) do update set holder = excluded.holder, expires_at = excluded.expires_at \
         where (retention_lease.expires_at < ",
        clock,
        " or retention_lease.holder = excluded.holder) \
           and (retention_lease.last_finished_at is null or retention_lease.last_finished_at <= ",
        now_minus(3),
        ")"
    );
    let taken = run!(on, ACQUIRE, |pool, sql| sqlx::query(sql)
        .bind(holder)
        .bind(ttl_secs)
        .bind(interval_secs)
        .bind(LEASE)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(taken == 1)
}

/// Extends the lease `holder` still holds by `ttl`; whether it still does.
pub async fn renew(on: impl Into<On<'_>>, holder: Uuid, ttl: std::time::Duration) -> Result<bool> {
    let renewed = lease::renew(on, &lease::RETENTION, lease::Key::Name(LEASE), holder, ttl).await?;
    Ok(renewed.is_some())
}

/// Ends the lease: the next pass may start an interval from now, on any daemon.
pub async fn release(on: impl Into<On<'_>>, holder: Uuid) -> Result<()> {
    lease::release(on, &lease::RETENTION, lease::Key::Name(LEASE), holder).await.map(drop)
}

/// Records the start of a pass; its id.
pub async fn begin_pass(on: impl Into<On<'_>>, holder: Uuid) -> Result<i64> {
    const BEGIN: Sql = sql!("insert into retention_passes (holder, started_at) values ($1, ", clock, ") returning id");
    Ok(run!(on, BEGIN, |pool, sql| sqlx::query_scalar(sql).bind(holder).fetch_one(pool).await)?)
}

/// Records the end of a pass with its counts, and forgets all but the last thousand passes.
pub async fn finish_pass(db: &Database, id: i64, counts: [i64; 4]) -> Result<()> {
    const FINISH: Sql = sql!(
        "update retention_passes set finished_at = ",
        clock,
        ", runs = $2, progress = $3, daemons = $4, logs = $5 where id = $1"
    );
    const TRIM: Sql = sql!("delete from retention_passes where id <= $1 - 1000");
    run!(db, FINISH, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(counts[0])
        .bind(counts[1])
        .bind(counts[2])
        .bind(counts[3])
        .execute(pool)
        .await
        .map(drop))?;
    run!(db, TRIM, |pool, sql| sqlx::query(sql).bind(id).execute(pool).await.map(drop))?;
    Ok(())
}

/// Deletes up to `limit` prunable runs, oldest finished first (their progress and resource rows go with them,
/// by cascade): each one's id and log prefix.
pub async fn delete_prunable(
    on: impl Into<On<'_>>,
    policy: &Policy,
    limit: i64,
) -> Result<Vec<(Uuid, Option<String>)>> {
    const DELETE: Sql = sql!(
        "delete from worker_runs where id in (select r.id from worker_runs r where ",
        prunable!(),
        " order by r.finished_at, r.id limit $5) returning id, log_key"
    );
    run!(on, DELETE, |pool, sql| bind_policy!(sqlx::query_as(sql), policy).bind(limit).fetch_all(pool).await)
}

/// Sets to null the links (`follows`, `retry_of`) of the finished runs that retried or continued the runs `ids`.
/// Index-served (`worker_runs_follows`, `worker_runs_one_retry`); only terminal rows match, since a run linked by
/// one in flight is not prunable.
pub async fn unlink(on: impl Into<On<'_>>, ids: &[Uuid]) -> Result<()> {
    const UNLINK_PG: &str = "update worker_runs set follows = case when follows = any($1) then null else follows end, \
         retry_of = case when retry_of = any($1) then null else retry_of end \
         where follows = any($1) or retry_of = any($1)";
    // SQLite has no arrays: two statements per run, each served by its index.
    const UNFOLLOW_SQLITE: &str = "update worker_runs set follows = null where follows = $1";
    const UNRETRY_SQLITE: &str = "update worker_runs set retry_of = null where retry_of = $1";
    if ids.is_empty() {
        return Ok(());
    }
    match on.into().exec() {
        Exec::PgPool(pool) => sqlx::query(UNLINK_PG).bind(ids).execute(pool).await.map(drop)?,
        Exec::PgTx(conn) => sqlx::query(UNLINK_PG).bind(ids).execute(conn).await.map(drop)?,
        Exec::SqlitePool(pool) => {
            for id in ids {
                sqlx::query(UNFOLLOW_SQLITE).bind(id).execute(pool).await?;
                sqlx::query(UNRETRY_SQLITE).bind(id).execute(pool).await?;
            }
        }
        Exec::SqliteTx(conn) => {
            for id in ids {
                sqlx::query(UNFOLLOW_SQLITE).bind(id).execute(&mut *conn).await?;
                sqlx::query(UNRETRY_SQLITE).bind(id).execute(&mut *conn).await?;
            }
        }
    }
    Ok(())
}

/// Records the log prefixes `keys` as pending deletes from the object store.
pub async fn pend_log_deletes(on: impl Into<On<'_>>, keys: &[String]) -> Result<()> {
    const PENDING: Sql = sql!(
        "insert into retention_log_deletes (log_key) select value from ",
        json_list(1, k),
        // `where true`: SQLite reads `on conflict` after a bare `select … from` as a join's.
        " where true on conflict do nothing"
    );
    if keys.is_empty() {
        return Ok(());
    }
    run!(on, PENDING, |pool, sql| sqlx::query(sql).bind(Json(keys)).execute(pool).await.map(drop))
}

/// Up to `limit` runs the policy prunes now, oldest finished first, after the keyset `after` (finished time,
/// id), finished before `before` and of `worker` when given.
pub async fn prunable_runs(
    on: impl Into<On<'_>>,
    policy: &Policy,
    before: Option<chrono::DateTime<chrono::Utc>>,
    worker: Option<&str>,
    after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Run>> {
    const LIST: Sql = sql!(
        "select ",
        run_columns!(),
        " from worker_runs r where ",
        prunable!(),
        " and ($6 is null or r.finished_at < $6) and ($7 is null or r.worker = $7) \
         and ($8 is null or (r.finished_at, r.id) > ($8, $9)) order by r.finished_at, r.id limit $5"
    );
    Ok(run!(on, LIST, |pool, sql| bind_policy!(sqlx::query_as(sql), policy)
        .bind(limit)
        .bind(before.map(DbTime))
        .bind(worker)
        .bind(after.map(|a| DbTime(a.0)))
        .bind(after.map(|a| a.1))
        .fetch_all(pool)
        .await)?)
}

/// Up to `limit` pending log prefixes.
pub async fn pending_logs(on: impl Into<On<'_>>, limit: i64) -> Result<Vec<String>> {
    const PENDING: Sql = sql!("select log_key from retention_log_deletes order by log_key limit $1");
    Ok(run!(on, PENDING, |pool, sql| sqlx::query_scalar(sql).bind(limit).fetch_all(pool).await)?)
}

/// Forgets pending log prefixes whose objects are gone.
pub async fn forget_logs(on: impl Into<On<'_>>, keys: &[String]) -> Result<()> {
    const FORGET: Sql =
        sql!("delete from retention_log_deletes where log_key in (select value from ", json_list(1, k), ")");
    run!(on, FORGET, |pool, sql| sqlx::query(sql).bind(Json(keys)).execute(pool).await.map(drop))?;
    Ok(())
}

/// Where the thinning of progress histories has got to: after this (finished time, run), or from the start;
/// `None` when `holder` does not hold the lease.
pub async fn thinned_after(on: impl Into<On<'_>>, holder: Uuid) -> Result<Option<(Option<DbTime>, Option<Uuid>)>> {
    const MARK: Sql =
        sql!("select thinned_after_at, thinned_after_id from retention_lease where name = $1 and holder = $2");
    run!(on, MARK, |pool, sql| sqlx::query_as(sql).bind(LEASE).bind(holder).fetch_optional(pool).await)
}

/// The next `limit` finished runs after `(after_at, after_id)` that ended a minute ago or more (so that none is
/// still committing its end): their (finished time, id).
pub async fn next_to_thin(
    on: impl Into<On<'_>>,
    (after_at, after_id): (Option<DbTime>, Option<Uuid>),
    limit: i64,
) -> Result<Vec<(DbTime, Uuid)>> {
    const NEXT: Sql = sql!(
        "select finished_at, id from worker_runs where finished_at is not null and finished_at < ",
        now_minus(4),
        " and ($1 is null or (finished_at, id) > ($1, $2)) order by finished_at, id limit $3"
    );
    run!(on, NEXT, |pool, sql| sqlx::query_as(sql)
        .bind(after_at)
        .bind(after_id)
        .bind(limit)
        .bind(60.0_f64)
        .fetch_all(pool)
        .await)
}

/// Thins the progress history of the finished runs after `after` up to `last` to at most `points` reports each,
/// keeping the first and the last and spacing the others evenly; how many reports were deleted.
pub async fn thin(
    on: impl Into<On<'_>>,
    (after_at, after_id): (Option<DbTime>, Option<Uuid>),
    (last_at, last_id): (DbTime, Uuid),
    points: i64,
) -> Result<u64> {
    const THIN: Sql = sql!(
        "delete from run_progress where (run_id, seq) in (select run_id, seq from (\
             select p.run_id, p.seq, row_number() over (partition by p.run_id order by p.seq) as rn, \
                 count(*) over (partition by p.run_id) as n \
             from run_progress p join worker_runs r on r.id = p.run_id \
             where r.finished_at is not null and ($1 is null or (r.finished_at, r.id) > ($1, $2)) \
                 and (r.finished_at, r.id) <= ($3, $4)) t \
         where n > $5 and rn > 1 and ((rn - 1) * ($5 - 1)) / (n - 1) = ((rn - 2) * ($5 - 1)) / (n - 1))"
    );
    run!(on, THIN, |pool, sql| sqlx::query(sql)
        .bind(after_at)
        .bind(after_id)
        .bind(last_at)
        .bind(last_id)
        .bind(points)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))
}

/// Moves the thinning's watermark of `holder`'s lease to `(at, id)`.
pub async fn move_thinned_after(on: impl Into<On<'_>>, holder: Uuid, (at, id): (DbTime, Uuid)) -> Result<()> {
    const MOVE: Sql =
        sql!("update retention_lease set thinned_after_at = $3, thinned_after_id = $4 where name = $1 and holder = $2");
    run!(on, MOVE, |pool, sql| sqlx::query(sql)
        .bind(LEASE)
        .bind(holder)
        .bind(at)
        .bind(id)
        .execute(pool)
        .await
        .map(drop))
}

/// Deletes up to `limit` gone daemons last heard of more than `after_secs` ago that hold no running run (their
/// finished runs keep the id in `claimed_by`; there is no foreign key); how many.
pub async fn prune_daemons(on: impl Into<On<'_>>, after_secs: f64, limit: i64) -> Result<u64> {
    const DELETE: Sql = sql!(
        "delete from daemons where id in (select d.id from daemons d where d.state = 'gone' \
             and coalesce(d.stopped_at, d.heartbeat_at) < ",
        now_minus(1),
        " and not exists (select 1 from worker_runs w where w.state = 'running' and w.claimed_by = d.id) limit $2)"
    );
    Ok(run!(on, DELETE, |pool, sql| sqlx::query(sql)
        .bind(after_secs)
        .bind(limit)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?)
}
