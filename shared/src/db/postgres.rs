//! The PostgreSQL statements. Claims are one autocommitted statement with `FOR UPDATE SKIP LOCKED`; new
//! requests and cancellations wake daemons through a trigger's `NOTIFY` in the same transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, types::Json};
use uuid::Uuid;

use super::{
    AuditEntry, Daemon, Finish, NewDaemon, NewQueueCount, NewRun, Override, OverrideRow, ProgressEntry, QueueCount,
    Result, Run, RunFilter, is_in_flight_violation,
};
use crate::resolve::{OverrideValues, ResolveError};

pub(super) async fn ping(pool: &PgPool) -> Result<()> {
    sqlx::query("select 1").execute(pool).await?;
    Ok(())
}

pub(super) async fn now(pool: &PgPool) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar("select now()").fetch_one(pool).await?)
}

/// Begins a transaction, on another connection when the first one is found cut: nothing has happened yet, so
/// trying again is always safe (an API pool does not ping connections before use, see `Pings`).
async fn begin(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut attempt = 1;
    loop {
        match pool.begin().await.map_err(super::DbError::from) {
            Err(e) if e.is_connection_lost() && attempt <= pool.options().get_max_connections() => attempt += 1,
            other => return other,
        }
    }
}

/// Inserts a request; `None` when the one-in-flight index refuses it.
pub(super) async fn try_insert_run(pool: &PgPool, new: &NewRun) -> Result<Option<Run>> {
    let inserted = sqlx::query_as::<_, Run>(concat!(
        "insert into worker_runs (id, worker, requested_by, arguments, config, trace_context) \
         values ($1, $2, $3, $4, $5, $6) returning ",
        run_columns!()
    ))
    .bind(new.id)
    .bind(&new.worker)
    .bind(&new.requested_by)
    .bind(Json(&new.arguments))
    .bind(Json(&new.config))
    .bind(&new.trace_context)
    .fetch_one(pool)
    .await;
    match inserted {
        Ok(run) => Ok(Some(run)),
        Err(e) if is_in_flight_violation(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn in_flight_of(pool: &PgPool, worker: &str) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs where worker = $1 and state in ('queued', 'running')"
    ))
    .bind(worker)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn claim_runs(
    pool: &PgPool,
    daemon: Uuid,
    lease: Duration,
    limit: u32,
    workers: Option<&[String]>,
) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set state = 'running', claimed_by = $1, claimed_at = now(), \
             lease_expires_at = now() + make_interval(secs => $2) \
         where id = any(array(select id from worker_runs where state = 'queued' \
             and ($4::text[] is null or worker = any($4)) \
             order by requested_at, id for update skip locked limit $3)) \
         returning ",
        run_columns!()
    ))
    .bind(daemon)
    .bind(lease.as_secs_f64())
    .bind(i64::from(limit))
    .bind(workers)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn mark_started(pool: &PgPool, run: Uuid, daemon: Uuid, log_key: &str) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set started_at = now(), log_key = $3 \
         where id = $1 and claimed_by = $2 and state = 'running' returning ",
        run_columns!()
    ))
    .bind(run)
    .bind(daemon)
    .bind(log_key)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn renew_lease(
    pool: &PgPool,
    run: Uuid,
    daemon: Uuid,
    lease: Duration,
) -> Result<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar(
        "update worker_runs set lease_expires_at = now() + make_interval(secs => $3) \
         where id = $1 and claimed_by = $2 and state = 'running' and lease_expires_at > now() \
         returning lease_expires_at",
    )
    .bind(run)
    .bind(daemon)
    .bind(lease.as_secs_f64())
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn record_progress(pool: &PgPool, run: Uuid, daemon: Uuid, progress: &Value) -> Result<bool> {
    let rows = sqlx::query(
        "with updated as (update worker_runs set progress = $3 \
             where id = $1 and claimed_by = $2 and state = 'running' returning id) \
         insert into run_progress (run_id, seq, progress) \
         select id, coalesce((select max(seq) from run_progress where run_id = $1), 0) + 1, $3 from updated",
    )
    .bind(run)
    .bind(daemon)
    .bind(Json(progress))
    .execute(pool)
    .await?;
    Ok(rows.rows_affected() == 1)
}

pub(super) async fn finish_run(pool: &PgPool, run: Uuid, daemon: Uuid, finish: &Finish) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set state = $3, finished_at = now(), lease_expires_at = null, \
             duration_ms = (extract(epoch from now() - coalesce(started_at, claimed_at)) * 1000)::bigint, \
             exit_code = $4, error = $5, result = $6 \
         where id = $1 and claimed_by = $2 and state = 'running' returning ",
        run_columns!()
    ))
    .bind(run)
    .bind(daemon)
    .bind(finish.state.as_str())
    .bind(finish.exit_code)
    .bind(&finish.error)
    .bind(finish.result.as_ref().map(Json))
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn request_cancel(pool: &PgPool, run: Uuid, actor: &str) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set \
             state = case when state = 'queued' then 'cancelled' else state end, \
             finished_at = case when state = 'queued' then now() else finished_at end, \
             duration_ms = case when state = 'queued' then 0 else duration_ms end, \
             error = case when state = 'queued' then 'cancelled by ' || $2 || ' before a daemon claimed it' else error end, \
             cancel_requested_at = coalesce(cancel_requested_at, now()), \
             cancel_requested_by = coalesce(cancel_requested_by, $2) \
         where id = $1 and state in ('queued', 'running') returning ",
        run_columns!()
    ))
    .bind(run)
    .bind(actor)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn cancel_requests(pool: &PgPool, daemon: Uuid) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "select id from worker_runs where claimed_by = $1 and state = 'running' and cancel_requested_at is not null",
    )
    .bind(daemon)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn next_lease_expiry(pool: &PgPool) -> Result<Option<f64>> {
    Ok(sqlx::query_scalar(
        "select extract(epoch from min(lease_expires_at) - now())::float8 from worker_runs where state = 'running'",
    )
    .fetch_one(pool)
    .await?)
}

pub(super) async fn recover_expired(pool: &PgPool) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set state = 'interrupted', finished_at = now(), \
             duration_ms = (extract(epoch from now() - coalesce(started_at, claimed_at)) * 1000)::bigint, \
             error = 'owner lost: daemon ' || coalesce(claimed_by::text, '?') || ' stopped renewing its lease, which expired at ' \
                 || to_char(lease_expires_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), \
             lease_expires_at = null \
         where id = any(array(select id from worker_runs where state = 'running' and lease_expires_at < now() \
             for update skip locked)) \
         returning ",
        run_columns!()
    ))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn get_run(pool: &PgPool, id: Uuid) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!("select ", run_columns!(), " from worker_runs where id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub(super) async fn run_progress(pool: &PgPool, id: Uuid) -> Result<Vec<ProgressEntry>> {
    Ok(sqlx::query_as("select seq, at, progress from run_progress where run_id = $1 order by seq")
        .bind(id)
        .fetch_all(pool)
        .await?)
}

pub(super) async fn list_runs(pool: &PgPool, filter: &RunFilter, limit: u32) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs \
         where ($1::text is null or worker = $1) and ($2::text is null or state = $2) \
           and ($3::timestamptz is null or requested_at >= $3) and ($4::timestamptz is null or requested_at < $4) \
           and ($5::timestamptz is null or (requested_at, id) < ($5, $6)) \
         order by requested_at desc, id desc limit $7"
    ))
    .bind(&filter.worker)
    .bind(filter.state.map(|s| s.as_str()))
    .bind(filter.from)
    .bind(filter.to)
    .bind(filter.after.map(|c| c.requested_at))
    .bind(filter.after.map(|c| c.id))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn runs_in_flight(pool: &PgPool) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs where state in ('queued', 'running') order by requested_at"
    ))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn last_finished(pool: &PgPool, workers: &[String]) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select r.* from unnest($1::text[]) as w(name) cross join lateral (select ",
        run_columns!(),
        " from worker_runs where worker = w.name and finished_at is not null \
             order by finished_at desc limit 1) r"
    ))
    .bind(workers)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn get_override(pool: &PgPool, worker: &str) -> Result<Option<Override>> {
    let row: Option<OverrideRow> = sqlx::query_as(
        "select worker, engine, preset, options, updated_by, updated_at from worker_overrides where worker = $1",
    )
    .bind(worker)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Override::from))
}

pub(super) async fn list_overrides(pool: &PgPool) -> Result<Vec<Override>> {
    let rows: Vec<OverrideRow> = sqlx::query_as(
        "select worker, engine, preset, options, updated_by, updated_at from worker_overrides order by worker",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Override::from).collect())
}

pub(super) async fn change_override(
    pool: &PgPool,
    worker: &str,
    actor: &str,
    reason: &str,
    next: &(dyn Fn(Option<&OverrideValues>) -> Result<OverrideValues, ResolveError> + Sync),
) -> Result<Result<Option<Override>, ResolveError>> {
    let mut tx = begin(pool).await?;
    // Serialises edits of one worker even when it has no override row yet.
    sqlx::query("select pg_advisory_xact_lock(hashtext('scrinalia.override.' || $1))")
        .bind(worker)
        .execute(&mut *tx)
        .await?;
    let current: Option<OverrideRow> = sqlx::query_as(
        "select worker, engine, preset, options, updated_by, updated_at from worker_overrides where worker = $1",
    )
    .bind(worker)
    .fetch_optional(&mut *tx)
    .await?;
    let before = current.map(|r| Override::from(r).values);
    let after = match next(before.as_ref()) {
        Ok(after) => after,
        Err(e) => return Ok(Err(e)),
    };
    let stored = if after.is_empty() {
        sqlx::query("delete from worker_overrides where worker = $1").bind(worker).execute(&mut *tx).await?;
        None
    } else {
        let row: OverrideRow = sqlx::query_as(
            "insert into worker_overrides (worker, engine, preset, options, updated_by, updated_at) \
             values ($1, $2, $3, $4, $5, now()) \
             on conflict (worker) do update set engine = excluded.engine, preset = excluded.preset, \
                 options = excluded.options, updated_by = excluded.updated_by, updated_at = now() \
             returning worker, engine, preset, options, updated_by, updated_at",
        )
        .bind(worker)
        .bind(&after.engine)
        .bind(&after.preset)
        .bind(Json(&after.options))
        .bind(actor)
        .fetch_one(&mut *tx)
        .await?;
        Some(Override::from(row))
    };
    sqlx::query(
        "insert into worker_override_audit (worker, actor, action, before, after, reason) values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(worker)
    .bind(actor)
    .bind(if stored.is_some() { "set" } else { "clear" })
    .bind(before.as_ref().map(Json))
    .bind(stored.as_ref().map(|o| Json(&o.values)))
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(stored))
}

pub(super) async fn audit_trail(pool: &PgPool, worker: &str, limit: u32) -> Result<Vec<AuditEntry>> {
    Ok(sqlx::query_as(
        "select id, worker, actor, at, action, before, after, reason from worker_override_audit \
         where worker = $1 order by id desc limit $2",
    )
    .bind(worker)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn last_override_changes(pool: &PgPool) -> Result<Vec<AuditEntry>> {
    Ok(sqlx::query_as(
        "select id, worker, actor, at, action, before, after, reason from worker_override_audit \
         where id in (select max(id) from worker_override_audit group by worker) order by worker",
    )
    .fetch_all(pool)
    .await?)
}

macro_rules! daemon_columns {
    () => {
        "id, host, pid, version, capacity, workers, started_at, heartbeat_at, drain_requested_at, drain_requested_by, \
         stopped_at, state, (select count(*) from worker_runs r where r.state = 'running' and r.claimed_by = daemons.id) \
         as runs_in_flight"
    };
}

pub(super) async fn register_daemon(pool: &PgPool, d: &NewDaemon) -> Result<Daemon> {
    Ok(sqlx::query_as(concat!(
        "insert into daemons (id, host, pid, version, capacity, workers) values ($1, $2, $3, $4, $5, $6) returning ",
        daemon_columns!()
    ))
    .bind(d.id)
    .bind(&d.host)
    .bind(d.pid)
    .bind(&d.version)
    .bind(d.capacity)
    .bind(Json(&d.workers))
    .fetch_one(pool)
    .await?)
}

pub(super) async fn heartbeat(pool: &PgPool, id: Uuid) -> Result<Option<Daemon>> {
    Ok(sqlx::query_as(concat!(
        "update daemons set heartbeat_at = now(), stopped_at = null, \
             state = case when drain_requested_at is null then 'active' else 'draining' end \
         where id = $1 returning ",
        daemon_columns!()
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn request_drain(pool: &PgPool, id: Uuid, actor: &str) -> Result<Option<Daemon>> {
    Ok(sqlx::query_as(concat!(
        "update daemons set drain_requested_at = coalesce(drain_requested_at, now()), \
             drain_requested_by = coalesce(drain_requested_by, $2), state = 'draining' \
         where id = $1 and state <> 'gone' returning ",
        daemon_columns!()
    ))
    .bind(id)
    .bind(actor)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn mark_daemon_stopped(pool: &PgPool, id: Uuid) -> Result<()> {
    sqlx::query("update daemons set state = 'gone', stopped_at = now() where id = $1").bind(id).execute(pool).await?;
    Ok(())
}

pub(super) async fn mark_gone_daemons(pool: &PgPool, after: Duration) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "update daemons set state = 'gone', stopped_at = coalesce(stopped_at, now()) \
         where state <> 'gone' and heartbeat_at < now() - make_interval(secs => $1) returning id",
    )
    .bind(after.as_secs_f64())
    .fetch_all(pool)
    .await?)
}

pub(super) async fn list_daemons(pool: &PgPool) -> Result<Vec<Daemon>> {
    Ok(sqlx::query_as(concat!(
        "select ",
        daemon_columns!(),
        " from daemons where state <> 'gone' or coalesce(stopped_at, heartbeat_at) > now() - interval '1 day' \
         order by started_at desc"
    ))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn get_daemon(pool: &PgPool, id: Uuid) -> Result<Option<Daemon>> {
    Ok(sqlx::query_as(concat!("select ", daemon_columns!(), " from daemons where id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub(super) async fn store_queue_count(pool: &PgPool, c: &NewQueueCount) -> Result<()> {
    sqlx::query(
        "insert into queue_counts (worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by) \
         values ($1, $2, $3, $4, $5, now(), $6, $7) \
         on conflict (worker) do update set pending = excluded.pending, unmeasurable = excluded.unmeasurable, \
             done = excluded.done, error = excluded.error, measured_at = now(), took_ms = excluded.took_ms, \
             measured_by = excluded.measured_by",
    )
    .bind(&c.worker)
    .bind(c.pending)
    .bind(&c.unmeasurable)
    .bind(c.done)
    .bind(&c.error)
    .bind(c.took_ms)
    .bind(c.measured_by)
    .execute(pool)
    .await?;
    Ok(())
}

pub(super) async fn queue_counts(pool: &PgPool) -> Result<Vec<QueueCount>> {
    Ok(sqlx::query_as(
        "select worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by from queue_counts order by worker",
    )
    .fetch_all(pool)
    .await?)
}
