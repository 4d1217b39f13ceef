//! The statements of webhooks: the outbox write in a run's end transaction ([`record_in_tx!`]), the fan-out of
//! events into one delivery per webhook, the claim of due deliveries (`skip locked` on PostgreSQL; SQLite's one
//! writer serialises the single-statement claim), each attempt's record, and the reads of the API.

use std::time::Duration;

use sqlx::types::Json;
use uuid::Uuid;

use super::{
    Database, Dialect, Result,
    dialect::{DbTime, Sql, sql},
    on_pool,
};

/// The previous run of the worker that ended with an outcome (cancellations are not one): `(id, state)`.
pub(crate) const PREVIOUS: Sql = sql!(
    "select id, state from worker_runs where worker = $1 and id <> $2 and finished_at is not null \
     and state in ('succeeded', 'failed', 'interrupted') order by finished_at desc limit 1"
);

/// One event of the outbox.
pub(crate) const INSERT_EVENT: Sql =
    sql!("insert into webhook_events (id, kind, run_id, worker, payload) values ($1, $2, $3, $4, $5)");

/// In the transaction `$tx` (of `$db`) that ended the run `$ended`, records the webhook event its outcome is, if
/// it is one: failed, interrupted, or succeeded after a failed or interrupted run of the same worker (recovered).
/// Written whatever the webhooks configured, since the transaction does not know them; the fan-out decides who
/// hears of it.
macro_rules! record_in_tx {
    ($tx:ident, $db:expr, $ended:expr) => {{
        let ended: &$crate::Run = $ended;
        let event = match ended.state {
            $crate::RunState::Failed => Some(($crate::config::WebhookEvent::Failed, None)),
            $crate::RunState::Interrupted => Some(($crate::config::WebhookEvent::Interrupted, None)),
            $crate::RunState::Succeeded => {
                let previous: Option<(uuid::Uuid, String)> = sqlx::query_as($db.text($crate::db::webhooks::PREVIOUS))
                    .bind(&ended.worker)
                    .bind(ended.id)
                    .fetch_optional(&mut *$tx)
                    .await?;
                previous
                    .filter(|p| p.1 == "failed" || p.1 == "interrupted")
                    .map(|p| ($crate::config::WebhookEvent::Recovered, Some(p)))
            }
            _ => None,
        };
        if let Some((event, previous)) = event {
            let id = uuid::Uuid::now_v7();
            let payload =
                $crate::webhooks::run_payload(id, event, ended, previous.as_ref().map(|p| (p.0, p.1.as_str())));
            sqlx::query($db.text($crate::db::webhooks::INSERT_EVENT))
                .bind(id)
                .bind(event.as_str())
                .bind(ended.id)
                .bind(&ended.worker)
                .bind(payload)
                .execute(&mut *$tx)
                .await?;
        }
    }};
}
pub(crate) use record_in_tx;

/// Whether events wait for their fan-out, and how long ago the earliest pending delivery of `names` came due
/// (negative: how long until it does).
pub(crate) async fn due(db: &Database, names: &[String]) -> Result<(bool, Option<f64>)> {
    const DUE: Sql = sql!(
        "select exists (select 1 from webhook_events where fanned_out_at is null), (select ",
        seconds_since(min(next_attempt_at)),
        " from webhook_deliveries where state = 'pending' and webhook in (select value from ",
        json_list(1, k),
        "))"
    );
    Ok(on_pool!(db, DUE, |pool, sql| sqlx::query_as(sql).bind(Json(names)).fetch_one(pool).await)?)
}

/// An event waiting for its fan-out: id, kind, worker, and whether it is older than the fan-out's horizon.
pub(crate) type Unfanned = (Uuid, String, Option<String>, bool);

/// Fans out up to `limit` events in one transaction: `route` says which webhooks each is for (none for an event
/// older than `horizon_secs`); each gets one pending delivery per webhook, and the event is marked fanned out.
/// PostgreSQL skips the events another daemon is fanning out. How many events.
pub(crate) async fn fan_out(
    db: &Database,
    horizon_secs: f64,
    limit: i64,
    route: &(dyn Fn(&Unfanned) -> Vec<String> + Sync),
) -> Result<u64> {
    const UNFANNED: Sql = sql!(
        "select id, kind, worker, created_at < ",
        now_minus(1),
        " from webhook_events where fanned_out_at is null order by created_at limit $2",
        skip_locked
    );
    const DELIVERY: Sql =
        sql!("insert into webhook_deliveries (event_id, webhook) values ($1, $2) on conflict do nothing");
    const FANNED: Sql = sql!("update webhook_events set fanned_out_at = ", now, " where id = $1");
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let events: Vec<Unfanned> =
            sqlx::query_as(db.text(UNFANNED)).bind(horizon_secs).bind(limit).fetch_all(&mut *tx).await?;
        for event in &events {
            for hook in route(event) {
                sqlx::query(db.text(DELIVERY)).bind(event.0).bind(hook).execute(&mut *tx).await?;
            }
            sqlx::query(db.text(FANNED)).bind(event.0).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(events.len() as u64)
    })
}

/// A claimed delivery: id, event id, webhook, the attempt it is (1-based), when it was claimed.
pub(crate) type Claimed = (i64, Uuid, String, i32, DbTime);

/// Claims up to `limit` due deliveries of `names` for `daemon`: each attempt is counted, and the delivery is not
/// due again for `lease_secs` (so another daemon takes it over if this one dies before recording the attempt).
pub(crate) async fn claim(
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
    let claimed: Vec<Claimed> = on_pool!(db, CLAIM, |pool, sql| sqlx::query_as(sql)
        .bind(daemon)
        .bind(lease_secs)
        .bind(limit)
        .bind(Json(names))
        .fetch_all(pool)
        .await)?;
    let mut with_payloads = Vec::with_capacity(claimed.len());
    for c in claimed {
        let payload: String =
            on_pool!(db, PAYLOAD, |pool, sql| sqlx::query_scalar(sql).bind(c.1).fetch_one(pool).await)?;
        with_payloads.push((c, payload));
    }
    Ok(with_payloads)
}

/// What one attempt got: status code, the start of the answer's body, the error, its duration.
pub(crate) struct Attempt<'a> {
    pub status: Option<i32>,
    pub response: Option<&'a str>,
    pub error: Option<&'a str>,
    pub duration_ms: i64,
}

/// Records attempt `attempt` of delivery `id` (started at `started`) and moves the delivery to `state`
/// (`pending` again after `retry_secs`, `delivered` or `failed`), in one transaction; the delivery is moved only
/// if no later attempt was claimed meanwhile. Whether it was.
pub(crate) async fn record(
    db: &Database,
    (id, attempt, started, daemon): (i64, i32, DbTime, Uuid),
    outcome: &Attempt<'_>,
    state: &str,
    retry_secs: f64,
) -> Result<bool> {
    const INSERT: Sql = sql!(
        "insert into webhook_attempts (delivery_id, attempt, daemon_id, started_at, duration_ms, status_code, \
         response, error) values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict do nothing"
    );
    const MOVE: Sql = sql!(
        "update webhook_deliveries set state = $3, finished_at = case when $3 = 'pending' then null else ",
        now,
        " end, next_attempt_at = case when $3 = 'pending' then ",
        now_plus(4),
        " else next_attempt_at end where id = $1 and attempts = $2 and state = 'pending'"
    );
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        sqlx::query(db.text(INSERT))
            .bind(id)
            .bind(attempt)
            .bind(daemon)
            .bind(started)
            .bind(outcome.duration_ms)
            .bind(outcome.status)
            .bind(outcome.response)
            .bind(outcome.error)
            .execute(&mut *tx)
            .await?;
        let moved = sqlx::query(db.text(MOVE))
            .bind(id)
            .bind(attempt)
            .bind(state)
            .bind(retry_secs)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(moved == 1)
    })
}

/// Queues a test event for `webhook` alone, already fanned out, in one transaction.
pub(crate) async fn queue_test(db: &Database, id: Uuid, webhook: &str, payload: &str) -> Result<()> {
    const EVENT: Sql =
        sql!("insert into webhook_events (id, kind, payload, fanned_out_at) values ($1, 'test', $2, ", now, ")");
    const DELIVERY: Sql = sql!("insert into webhook_deliveries (event_id, webhook) values ($1, $2)");
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        sqlx::query(db.text(EVENT)).bind(id).bind(payload).execute(&mut *tx).await?;
        sqlx::query(db.text(DELIVERY)).bind(id).bind(webhook).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    })
}

/// A delivery as listed: id, event id, kind, webhook, run, worker, state, attempts, created, next attempt,
/// finished, payload.
pub(crate) type Listed =
    (i64, Uuid, String, String, Option<Uuid>, Option<String>, String, i32, DbTime, DbTime, Option<DbTime>, String);

/// An attempt as listed: delivery, attempt, daemon, start, duration, status, response, error.
pub(crate) type ListedAttempt = (i64, i32, Option<Uuid>, DbTime, i64, Option<i32>, Option<String>, Option<String>);

/// The newest `limit` deliveries (of `webhook`, of events of `run`, when given) and their attempts.
pub(crate) async fn list(
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
        on_pool!(db, LIST, |pool, sql| sqlx::query_as(sql).bind(webhook).bind(run).bind(limit).fetch_all(pool).await)?;
    let attempts: Vec<ListedAttempt> = on_pool!(db, ATTEMPTS, |pool, sql| sqlx::query_as(sql)
        .bind(webhook)
        .bind(run)
        .bind(limit)
        .fetch_all(pool)
        .await)?;
    Ok((listed, attempts))
}

/// Deletes the test events (with their deliveries and attempts) older than `age`; how many.
pub(crate) async fn prune_tests(db: &Database, age: Duration) -> Result<u64> {
    const PRUNE: Sql = sql!("delete from webhook_events where run_id is null and created_at < ", now_minus(1));
    Ok(on_pool!(db, PRUNE, |pool, sql| sqlx::query(sql)
        .bind(age.as_secs_f64())
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?)
}
