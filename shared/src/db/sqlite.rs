//! The SQLite statements. SQLite serialises writers, so a claim is one atomic `UPDATE … RETURNING`; times are
//! ISO-8601 text written by the database clock (`strftime(… 'now')`), which sorts correctly as text.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;
use sqlx::{SqlitePool, types::Json};
use uuid::Uuid;

use super::{
    AuditEntry, Daemon, Finish, NewDaemon, NewQueueCount, NewRun, Override, OverrideRow, ProgressEntry, QueueCount,
    Result, Run, RunFilter, is_in_flight_violation,
};
use crate::resolve::{OverrideValues, ResolveError};

/// The database clock as stored text.
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    };
}

/// Milliseconds from the run's start (or claim) until now.
macro_rules! elapsed_ms {
    () => {
        "cast(round((julianday('now') - julianday(coalesce(started_at, claimed_at))) * 86400000) as integer)"
    };
}

/// Times bound from Rust use the same text form as the database clock, so comparisons stay textual.
fn text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(super) async fn ping(pool: &SqlitePool) -> Result<()> {
    sqlx::query("select 1").execute(pool).await?;
    Ok(())
}

pub(super) async fn now(pool: &SqlitePool) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar(concat!("select ", now!())).fetch_one(pool).await?)
}

pub(super) async fn open_watcher(pool: &SqlitePool) -> Result<sqlx::SqliteConnection> {
    use sqlx::ConnectOptions;
    Ok(pool.connect_options().connect().await?)
}

pub(super) async fn data_version(conn: &mut sqlx::SqliteConnection) -> Result<i64> {
    Ok(sqlx::query_scalar("pragma data_version").fetch_one(conn).await?)
}

pub(super) async fn any_queued(conn: &mut sqlx::SqliteConnection) -> Result<bool> {
    Ok(sqlx::query_scalar("select exists (select 1 from worker_runs where state = 'queued')").fetch_one(conn).await?)
}

/// Inserts a request; `None` when the one-in-flight index refuses it.
pub(super) async fn try_insert_run(pool: &SqlitePool, new: &NewRun) -> Result<Option<Run>> {
    let inserted = sqlx::query_as::<_, Run>(concat!(
        "insert into worker_runs (id, worker, requested_by, arguments, config, trace_context) \
         values (?1, ?2, ?3, ?4, ?5, ?6) returning ",
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

pub(super) async fn in_flight_of(pool: &SqlitePool, worker: &str) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs where worker = ?1 and state in ('queued', 'running')"
    ))
    .bind(worker)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn claim_runs(
    pool: &SqlitePool,
    daemon: Uuid,
    lease: Duration,
    limit: u32,
    workers: Option<&[String]>,
) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set state = 'running', claimed_by = ?1, claimed_at = ",
        now!(),
        ", lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || ?2 || ' seconds') \
         where id in (select id from worker_runs where state = 'queued' \
             and (?4 is null or worker in (select value from json_each(?4))) \
             order by requested_at, id limit ?3) \
         returning ",
        run_columns!()
    ))
    .bind(daemon)
    .bind(lease.as_secs_f64())
    .bind(i64::from(limit))
    .bind(workers.map(Json))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn mark_started(pool: &SqlitePool, run: Uuid, daemon: Uuid, log_key: &str) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set started_at = ",
        now!(),
        ", log_key = ?3 where id = ?1 and claimed_by = ?2 and state = 'running' returning ",
        run_columns!()
    ))
    .bind(run)
    .bind(daemon)
    .bind(log_key)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn renew_lease(
    pool: &SqlitePool,
    run: Uuid,
    daemon: Uuid,
    lease: Duration,
) -> Result<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar(concat!(
        "update worker_runs set lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || ?3 || ' seconds') \
         where id = ?1 and claimed_by = ?2 and state = 'running' and lease_expires_at > ",
        now!(),
        " returning lease_expires_at"
    ))
    .bind(run)
    .bind(daemon)
    .bind(lease.as_secs_f64())
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn record_progress(pool: &SqlitePool, run: Uuid, daemon: Uuid, progress: &Value) -> Result<bool> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let updated =
        sqlx::query("update worker_runs set progress = ?3 where id = ?1 and claimed_by = ?2 and state = 'running'")
            .bind(run)
            .bind(daemon)
            .bind(Json(progress))
            .execute(&mut *tx)
            .await?;
    if updated.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query(
        "insert into run_progress (run_id, seq, progress) \
         values (?1, coalesce((select max(seq) from run_progress where run_id = ?1), 0) + 1, ?2)",
    )
    .bind(run)
    .bind(Json(progress))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn finish_run(pool: &SqlitePool, run: Uuid, daemon: Uuid, finish: &Finish) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set state = ?3, finished_at = ",
        now!(),
        ", lease_expires_at = null, duration_ms = ",
        elapsed_ms!(),
        ", exit_code = ?4, error = ?5, result = ?6 \
         where id = ?1 and claimed_by = ?2 and state = 'running' returning ",
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

pub(super) async fn request_cancel(pool: &SqlitePool, run: Uuid, actor: &str) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set \
             finished_at = case when state = 'queued' then ",
        now!(),
        " else finished_at end, \
             duration_ms = case when state = 'queued' then 0 else duration_ms end, \
             error = case when state = 'queued' then 'cancelled by ' || ?2 || ' before a daemon claimed it' else error end, \
             state = case when state = 'queued' then 'cancelled' else state end, \
             cancel_requested_at = coalesce(cancel_requested_at, ",
        now!(),
        "), cancel_requested_by = coalesce(cancel_requested_by, ?2) \
         where id = ?1 and state in ('queued', 'running') returning ",
        run_columns!()
    ))
    .bind(run)
    .bind(actor)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn cancel_requests(pool: &SqlitePool, daemon: Uuid) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "select id from worker_runs where claimed_by = ?1 and state = 'running' and cancel_requested_at is not null",
    )
    .bind(daemon)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn next_lease_expiry(pool: &SqlitePool) -> Result<Option<f64>> {
    Ok(sqlx::query_scalar(
        "select (julianday(min(lease_expires_at)) - julianday('now')) * 86400.0 from worker_runs where state = 'running'",
    )
    .fetch_one(pool)
    .await?)
}

pub(super) async fn recover_expired(pool: &SqlitePool) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "update worker_runs set state = 'interrupted', finished_at = ",
        now!(),
        ", duration_ms = ",
        elapsed_ms!(),
        ", error = 'owner lost: daemon ' || coalesce(lower(hex(claimed_by)), '?') \
             || ' stopped renewing its lease, which expired at ' || lease_expires_at, \
             lease_expires_at = null \
         where state = 'running' and lease_expires_at < ",
        now!(),
        " returning ",
        run_columns!()
    ))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn get_run(pool: &SqlitePool, id: Uuid) -> Result<Option<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!("select ", run_columns!(), " from worker_runs where id = ?1"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub(super) async fn run_progress(pool: &SqlitePool, id: Uuid) -> Result<Vec<ProgressEntry>> {
    Ok(sqlx::query_as("select seq, at, progress from run_progress where run_id = ?1 order by seq")
        .bind(id)
        .fetch_all(pool)
        .await?)
}

pub(super) async fn list_runs(pool: &SqlitePool, filter: &RunFilter, limit: u32) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs \
         where (?1 is null or worker = ?1) and (?2 is null or state = ?2) \
           and (?3 is null or requested_at >= ?3) and (?4 is null or requested_at < ?4) \
           and (?5 is null or (requested_at, id) < (?5, ?6)) \
         order by requested_at desc, id desc limit ?7"
    ))
    .bind(&filter.worker)
    .bind(filter.state.map(|s| s.as_str()))
    .bind(filter.from.map(text))
    .bind(filter.to.map(text))
    .bind(filter.after.map(|c| text(c.requested_at)))
    .bind(filter.after.map(|c| c.id))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn runs_in_flight(pool: &SqlitePool) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs where state in ('queued', 'running') order by requested_at"
    ))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn last_finished(pool: &SqlitePool, workers: &[String]) -> Result<Vec<Run>> {
    Ok(sqlx::query_as::<_, Run>(concat!(
        "select ",
        run_columns!(),
        " from worker_runs where id in (select (select id from worker_runs where worker = w.value \
             and finished_at is not null order by finished_at desc limit 1) from json_each(?1) w)"
    ))
    .bind(Json(workers))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn get_override(pool: &SqlitePool, worker: &str) -> Result<Option<Override>> {
    let row: Option<OverrideRow> = sqlx::query_as(
        "select worker, engine, preset, options, updated_by, updated_at from worker_overrides where worker = ?1",
    )
    .bind(worker)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Override::from))
}

pub(super) async fn list_overrides(pool: &SqlitePool) -> Result<Vec<Override>> {
    let rows: Vec<OverrideRow> = sqlx::query_as(
        "select worker, engine, preset, options, updated_by, updated_at from worker_overrides order by worker",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Override::from).collect())
}

pub(super) async fn change_override(
    pool: &SqlitePool,
    worker: &str,
    actor: &str,
    reason: &str,
    next: &(dyn Fn(Option<&OverrideValues>) -> Result<OverrideValues, ResolveError> + Sync),
) -> Result<Result<Option<Override>, ResolveError>> {
    // IMMEDIATE takes the write lock before the read, so the read-modify-write cannot interleave.
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let current: Option<OverrideRow> = sqlx::query_as(
        "select worker, engine, preset, options, updated_by, updated_at from worker_overrides where worker = ?1",
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
        sqlx::query("delete from worker_overrides where worker = ?1").bind(worker).execute(&mut *tx).await?;
        None
    } else {
        let row: OverrideRow = sqlx::query_as(concat!(
            "insert into worker_overrides (worker, engine, preset, options, updated_by, updated_at) \
             values (?1, ?2, ?3, ?4, ?5, ",
            now!(),
            ") on conflict (worker) do update set engine = excluded.engine, preset = excluded.preset, \
                 options = excluded.options, updated_by = excluded.updated_by, updated_at = excluded.updated_at \
             returning worker, engine, preset, options, updated_by, updated_at"
        ))
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
        "insert into worker_override_audit (worker, actor, action, before, after, reason) values (?1, ?2, ?3, ?4, ?5, ?6)",
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

pub(super) async fn audit_trail(pool: &SqlitePool, worker: &str, limit: u32) -> Result<Vec<AuditEntry>> {
    Ok(sqlx::query_as(
        "select id, worker, actor, at, action, before, after, reason from worker_override_audit \
         where worker = ?1 order by id desc limit ?2",
    )
    .bind(worker)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn last_override_changes(pool: &SqlitePool) -> Result<Vec<AuditEntry>> {
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

pub(super) async fn register_daemon(pool: &SqlitePool, d: &NewDaemon) -> Result<Daemon> {
    Ok(sqlx::query_as(concat!(
        "insert into daemons (id, host, pid, version, capacity, workers) values (?1, ?2, ?3, ?4, ?5, ?6) returning ",
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

pub(super) async fn heartbeat(pool: &SqlitePool, id: Uuid) -> Result<Option<Daemon>> {
    Ok(sqlx::query_as(concat!(
        "update daemons set heartbeat_at = ",
        now!(),
        ", stopped_at = null, state = case when drain_requested_at is null then 'active' else 'draining' end \
         where id = ?1 returning ",
        daemon_columns!()
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn request_drain(pool: &SqlitePool, id: Uuid, actor: &str) -> Result<Option<Daemon>> {
    Ok(sqlx::query_as(concat!(
        "update daemons set drain_requested_at = coalesce(drain_requested_at, ",
        now!(),
        "), drain_requested_by = coalesce(drain_requested_by, ?2), state = 'draining' \
         where id = ?1 and state <> 'gone' returning ",
        daemon_columns!()
    ))
    .bind(id)
    .bind(actor)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn mark_daemon_stopped(pool: &SqlitePool, id: Uuid) -> Result<()> {
    sqlx::query(concat!("update daemons set state = 'gone', stopped_at = ", now!(), " where id = ?1"))
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn mark_gone_daemons(pool: &SqlitePool, after: Duration) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(concat!(
        "update daemons set state = 'gone', stopped_at = coalesce(stopped_at, ",
        now!(),
        ") where state <> 'gone' and heartbeat_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ?1 || ' seconds') \
         returning id"
    ))
    .bind(after.as_secs_f64())
    .fetch_all(pool)
    .await?)
}

pub(super) async fn list_daemons(pool: &SqlitePool) -> Result<Vec<Daemon>> {
    Ok(sqlx::query_as(concat!(
        "select ",
        daemon_columns!(),
        " from daemons where state <> 'gone' \
             or coalesce(stopped_at, heartbeat_at) > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day') \
         order by started_at desc"
    ))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn get_daemon(pool: &SqlitePool, id: Uuid) -> Result<Option<Daemon>> {
    Ok(sqlx::query_as(concat!("select ", daemon_columns!(), " from daemons where id = ?1"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub(super) async fn store_queue_count(pool: &SqlitePool, c: &NewQueueCount) -> Result<()> {
    sqlx::query(concat!(
        "insert into queue_counts (worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by) \
         values (?1, ?2, ?3, ?4, ?5, ",
        now!(),
        ", ?6, ?7) on conflict (worker) do update set pending = excluded.pending, \
             unmeasurable = excluded.unmeasurable, done = excluded.done, error = excluded.error, \
             measured_at = excluded.measured_at, took_ms = excluded.took_ms, measured_by = excluded.measured_by"
    ))
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

pub(super) async fn queue_counts(pool: &SqlitePool) -> Result<Vec<QueueCount>> {
    Ok(sqlx::query_as(
        "select worker, pending, unmeasurable, done, error, measured_at, took_ms, measured_by from queue_counts order by worker",
    )
    .fetch_all(pool)
    .await?)
}
