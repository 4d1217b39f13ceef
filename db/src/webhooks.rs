//! The statements of webhooks: the outbox write in a run's end transaction, the fan-out of events into one
//! delivery per webhook, the claim of due deliveries (`skip locked` on PostgreSQL; SQLite's one writer
//! serialises the single-statement claim), each attempt's record, and the reads of the API.

use std::time::Duration;

use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::RunState;

use crate::{
    Database, On, Result,
    dialect::{DbTime, Sql, sql},
    run,
};

/// The previous run of `worker` before `run` that ended with an outcome (cancellations are not one): its id and
/// state.
pub async fn previous_outcome(on: impl Into<On<'_>>, worker: &str, run: Uuid) -> Result<Option<(Uuid, RunState)>> {
    const PREVIOUS: Sql = sql!(
        "select id, state from worker_runs where worker = $1 and id <> $2 and finished_at is not null \
         and state in ('succeeded', 'failed', 'interrupted') and coalesce(end_reason, '') <> 'preempted' \
         and not (state = 'interrupted' and preempt_requested_at is not null) order by finished_at desc limit 1"
    );
    run!(on, PREVIOUS, |pool, sql| sqlx::query_as(sql).bind(worker).bind(run).fetch_optional(pool).await)
}

/// An event of the outbox, as written in the transaction that ended its run.
#[derive(Debug, Clone, Copy)]
pub struct NewEvent<'a> {
    /// Its id, which every delivery of it carries.
    pub id: Uuid,
    /// What happened (`failed`, `interrupted`, `recovered`, `test`).
    pub kind: &'a str,
    /// The run it is about.
    pub run: Option<Uuid>,
    /// That run's worker.
    pub worker: Option<&'a str>,
    /// The body every delivery sends.
    pub payload: &'a str,
}

/// Writes an event to the outbox.
pub async fn insert_event(on: impl Into<On<'_>>, event: &NewEvent<'_>) -> Result<()> {
    const INSERT: Sql =
        sql!("insert into webhook_events (id, kind, run_id, worker, payload) values ($1, $2, $3, $4, $5)");
    run!(on, INSERT, |pool, sql| sqlx::query(sql)
        .bind(event.id)
        .bind(event.kind)
        .bind(event.run)
        .bind(event.worker)
        .bind(event.payload)
        .execute(pool)
        .await
        .map(drop))
}

/// Whether events wait for their fan-out, and how long ago the earliest pending delivery of `names` came due
/// (negative: how long until it does).
pub async fn due(on: impl Into<On<'_>>, names: &[String]) -> Result<(bool, Option<f64>)> {
    const DUE: Sql = sql!(
        "select exists (select 1 from webhook_events where fanned_out_at is null), (select ",
        seconds_since(min(next_attempt_at)),
        " from webhook_deliveries where state = 'pending' and webhook in (select value from ",
        json_list(1, k),
        "))"
    );
    Ok(run!(on, DUE, |pool, sql| sqlx::query_as(sql).bind(Json(names)).fetch_one(pool).await)?)
}

/// An event waiting for its fan-out: id, kind, worker, and whether it is older than the fan-out's horizon.
pub type Unfanned = (Uuid, String, Option<String>, bool);

/// Up to `limit` events waiting for their fan-out, oldest first, each with whether it is older than
/// `horizon_secs`. PostgreSQL skips (and, in a transaction, locks) the events another daemon is fanning out.
pub async fn unfanned(on: impl Into<On<'_>>, horizon_secs: f64, limit: i64) -> Result<Vec<Unfanned>> {
    const UNFANNED: Sql = sql!(
        "select id, kind, worker, created_at < ",
        now_minus(1),
        " from webhook_events where fanned_out_at is null order by created_at limit $2",
        skip_locked
    );
    run!(on, UNFANNED, |pool, sql| sqlx::query_as(sql).bind(horizon_secs).bind(limit).fetch_all(pool).await)
}

/// Makes a pending delivery of `event` to `webhook` (none when it has one already).
pub async fn insert_delivery(on: impl Into<On<'_>>, event: Uuid, webhook: &str) -> Result<()> {
    const DELIVERY: Sql =
        sql!("insert into webhook_deliveries (event_id, webhook) values ($1, $2) on conflict do nothing");
    run!(on, DELIVERY, |pool, sql| sqlx::query(sql).bind(event).bind(webhook).execute(pool).await.map(drop))
}

/// Marks `event` fanned out.
pub async fn mark_fanned_out(on: impl Into<On<'_>>, event: Uuid) -> Result<()> {
    const FANNED: Sql = sql!("update webhook_events set fanned_out_at = ", now, " where id = $1");
    run!(on, FANNED, |pool, sql| sqlx::query(sql).bind(event).execute(pool).await.map(drop))
}

/// A claimed delivery: id, event id, webhook, the attempt it is (1-based), when it was claimed.
pub type Claimed = (i64, Uuid, String, i32, DbTime);

/// Claims up to `limit` due deliveries of `names` for `daemon`: each attempt is counted, and the delivery is not
/// due again for `lease_secs` (so another daemon takes it over if this one dies before recording the attempt).
pub async fn claim(
    db: &Database,
    daemon: Uuid,
    names: &[String],
    lease_secs: f64,
    limit: i64,
) -> Result<Vec<(Claimed, String)>> {
    const CLAIM: Sql = sql!(
        "update webhook_deliveries set attempts = attempts + 1, claimed_by = $1, next_attempt_at = ",
        now_plus(2),
        " where id in (select id from webhook_deliveries where state = 'pending' and next_attempt_at <= ",
        now,
        " and webhook in (select value from ",
        json_list(4, k),
        ") order by next_attempt_at limit $3",
        skip_locked,
        ") returning id, event_id, webhook, attempts, ",
        now
    );
    const PAYLOAD: Sql = sql!("select payload from webhook_events where id = $1");
    let claimed: Vec<Claimed> = run!(db, CLAIM, |pool, sql| sqlx::query_as(sql)
        .bind(daemon)
        .bind(lease_secs)
        .bind(limit)
        .bind(Json(names))
        .fetch_all(pool)
        .await)?;
    let mut with_payloads = Vec::with_capacity(claimed.len());
    for c in claimed {
        let payload: String = run!(db, PAYLOAD, |pool, sql| sqlx::query_scalar(sql).bind(c.1).fetch_one(pool).await)?;
        with_payloads.push((c, payload));
    }
    Ok(with_payloads)
}

/// What one attempt got: status code, the start of the answer's body, the error, its duration.
pub struct Attempt<'a> {
    pub status: Option<i32>,
    pub response: Option<&'a str>,
    pub error: Option<&'a str>,
    pub duration_ms: i64,
}

/// Records attempt `attempt` of delivery `id`, made by `daemon` from `started` (once: a second record of the
/// same attempt is dropped).
pub async fn insert_attempt(
    on: impl Into<On<'_>>,
    (id, attempt, started, daemon): (i64, i32, DbTime, Uuid),
    outcome: &Attempt<'_>,
) -> Result<()> {
    const INSERT: Sql = sql!(
        "insert into webhook_attempts (delivery_id, attempt, daemon_id, started_at, duration_ms, status_code, \
         response, error) values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict do nothing"
    );
    run!(on, INSERT, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(attempt)
        .bind(daemon)
        .bind(started)
        .bind(outcome.duration_ms)
        .bind(outcome.status)
        .bind(outcome.response)
        .bind(outcome.error)
        .execute(pool)
        .await
        .map(drop))
}

/// Moves delivery `id` to `state` (`pending` again after `retry_secs`, `delivered` or `failed`) if no attempt
/// after `attempt` was claimed meanwhile; whether it was moved.
pub async fn move_delivery(on: impl Into<On<'_>>, id: i64, attempt: i32, state: &str, retry_secs: f64) -> Result<bool> {
    const MOVE: Sql = sql!(
        "update webhook_deliveries set state = $3, finished_at = case when $3 = 'pending' then null else ",
        now,
        " end, next_attempt_at = case when $3 = 'pending' then ",
        now_plus(4),
        " else next_attempt_at end where id = $1 and attempts = $2 and state = 'pending'"
    );
    let moved = run!(on, MOVE, |pool, sql| sqlx::query(sql)
        .bind(id)
        .bind(attempt)
        .bind(state)
        .bind(retry_secs)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(moved == 1)
}

/// Writes a test event for one webhook, fanned out already (its one delivery is made beside it).
pub async fn insert_test_event(on: impl Into<On<'_>>, id: Uuid, payload: &str) -> Result<()> {
    const EVENT: Sql =
        sql!("insert into webhook_events (id, kind, payload, fanned_out_at) values ($1, 'test', $2, ", now, ")");
    run!(on, EVENT, |pool, sql| sqlx::query(sql).bind(id).bind(payload).execute(pool).await.map(drop))
}

/// A delivery as listed: id, event id, kind, webhook, run, worker, state, attempts, created, next attempt,
/// finished, payload.
pub type Listed =
    (i64, Uuid, String, String, Option<Uuid>, Option<String>, String, i32, DbTime, DbTime, Option<DbTime>, String);

/// An attempt as listed: delivery, attempt, daemon, start, duration, status, response, error.
pub type ListedAttempt = (i64, i32, Option<Uuid>, DbTime, i64, Option<i32>, Option<String>, Option<String>);

/// The newest `limit` deliveries (of `webhook`, of events of `run`, when given) and their attempts.
pub async fn list(
    db: &Database,
    webhook: Option<&str>,
    run: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Listed>, Vec<ListedAttempt>)> {
    const LIST: Sql = sql!(
        "select d.id, d.event_id, e.kind, d.webhook, e.run_id, e.worker, d.state, d.attempts, d.created_at, \
             d.next_attempt_at, d.finished_at, e.payload \
         from webhook_deliveries d join webhook_events e on e.id = d.event_id \
         where ($1 is null or d.webhook = $1) and ($2 is null or e.run_id = $2) order by d.id desc limit $3"
    );
    const ATTEMPTS: Sql = sql!(
        "select a.delivery_id, a.attempt, a.daemon_id, a.started_at, a.duration_ms, a.status_code, a.response, \
             a.error from webhook_attempts a \
         where a.delivery_id in (select d.id from webhook_deliveries d join webhook_events e on e.id = d.event_id \
             where ($1 is null or d.webhook = $1) and ($2 is null or e.run_id = $2) order by d.id desc limit $3) \
         order by a.delivery_id, a.attempt"
    );
    let listed: Vec<Listed> =
        run!(db, LIST, |pool, sql| sqlx::query_as(sql).bind(webhook).bind(run).bind(limit).fetch_all(pool).await)?;
    let attempts: Vec<ListedAttempt> =
        run!(db, ATTEMPTS, |pool, sql| sqlx::query_as(sql).bind(webhook).bind(run).bind(limit).fetch_all(pool).await)?;
    Ok((listed, attempts))
}

/// Deletes the test events (with their deliveries and attempts) older than `age`; how many.
pub async fn prune_tests(on: impl Into<On<'_>>, age: Duration) -> Result<u64> {
    const PRUNE: Sql = sql!("delete from webhook_events where run_id is null and created_at < ", now_minus(1));
    Ok(run!(on, PRUNE, |pool, sql| sqlx::query(sql)
        .bind(age.as_secs_f64())
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?)
}
