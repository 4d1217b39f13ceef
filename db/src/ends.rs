//! The statements that end a run: its daemon finishes it, a person cancels it while queued (or flags it while
//! running), recovery interrupts it after its lease expired. Each returns the run as it ended, so that the
//! caller can request what follows in the same transaction (see `scrinalia_shared::runs`).

use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use scrinalia_wire::{EndReason, Run, RunState};

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
    runs::run_columns,
};

/// How a run ended, as its daemon writes it.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// The terminal state.
    pub state: RunState,
    /// Why it ended.
    pub reason: EndReason,
    /// The worker's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// Why it did not succeed, as a sentence.
    pub error: Option<&'a str>,
    /// The final result (work counts).
    pub result: Option<&'a Value>,
    /// What the run cost.
    pub usage: Option<&'a scrinalia_wire::RunUsage>,
}

/// Ends a run held by `daemon` as `ending` says; `None` when it is no longer its own (fenced).
pub async fn finish(on: impl Into<On<'_>>, run: Uuid, daemon: Uuid, ending: &Ending<'_>) -> Result<Option<Run>> {
    const FINISH: Sql = sql!(
        "update worker_runs set state = $3, end_reason = $4, finished_at = ",
        now,
        ", lease_expires_at = null, \
             duration_ms = ",
        ms_since(coalesce(started_at, claimed_at)),
        ", exit_code = $5, error = $6, result = $7, usage = $8 \
         where id = $1 and claimed_by = $2 and state = 'running' returning ",
        run_columns!()
    );
    run!(on, FINISH, |pool, sql| sqlx::query_as(sql)
        .bind(run)
        .bind(daemon)
        .bind(ending.state)
        .bind(ending.reason)
        .bind(ending.exit_code)
        .bind(ending.error)
        .bind(ending.result.map(Json))
        .bind(ending.usage.map(Json))
        .fetch_optional(pool)
        .await)
}

/// Every `case` of a cancellation reads the row as it was before the update, so they agree on whether it was
/// queued.
macro_rules! cancel_set {
    ($d:ident;) => {
        $crate::dialect::sql_text!($d; []
            "state = case when state = 'queued' then 'cancelled' else state end, \
             end_reason = case when state = 'queued' then 'cancelled' else end_reason end, \
             finished_at = case when state = 'queued' then ", now, " else finished_at end, \
             duration_ms = case when state = 'queued' then 0 else duration_ms end, \
             error = case when state = 'queued' then 'cancelled by ' || $2 || ' before a daemon claimed it' \
                 else error end, \
             cancel_requested_at = coalesce(cancel_requested_at, ", now, "), \
             cancel_requested_by = coalesce(cancel_requested_by, $2)"
        )
    };
}

/// Cancels a queued run at once, or flags a running one for its daemon, as `actor`; the run as changed, or
/// `None` when it is not in flight or is a sharded run's parent (see `crate::shards::flag_cancel`).
pub async fn cancel(on: impl Into<On<'_>>, run: Uuid, actor: &str) -> Result<Option<Run>> {
    const CANCEL: Sql = sql!(
        "update worker_runs set ",
        cancel_set!(),
        " where id = $1 and state in ('queued', 'running') and (shards is null or parent_id is not null) returning ",
        run_columns!()
    );
    run!(on, CANCEL, |pool, sql| sqlx::query_as(sql).bind(run).bind(actor).fetch_optional(pool).await)
}

/// What recovery writes on a run whose owner stopped renewing its lease. The sentence names the daemon (its id
/// hyphenated, as everywhere else) and when the lease expired (RFC 3339, UTC, milliseconds) on both backends.
macro_rules! owner_lost {
    ($d:ident;) => {
        $crate::dialect::sql_text!($d; []
            "state = 'interrupted', end_reason = 'owner_lost', finished_at = ", now, ", \
             duration_ms = ", ms_since(coalesce(started_at, claimed_at)), ", \
             error = 'owner lost: daemon ' || coalesce(", uuid_text(claimed_by), ", '?') \
                 || ' stopped renewing its lease, which expired at ' || ", time_text(lease_expires_at), ", \
             lease_expires_at = null"
        )
    };
}

/// What an expiry writes on a queued request that no daemon claimed in time.
macro_rules! expired {
    ($d:ident;) => {
        $crate::dialect::sql_text!($d; []
            "state = 'cancelled', end_reason = 'expired', finished_at = ", now, ", duration_ms = 0, \
             error = 'expired: no daemon claimed it by ' || ", time_text(expires_at), " || ' (its \
                 expires_after_seconds)'"
        )
    };
}

/// Ends one queued request whose `expires_at` has passed (the one expired longest) as `cancelled` with end
/// reason `expired`; `None` when there is none. The parent of a sharded run is left alone: it follows its
/// children, which expire themselves. PostgreSQL skips a row another daemon holds rather than waiting for it.
/// `seconds` is the request's `expires_after_seconds` as the sentence gives it (read from its configuration).
pub async fn expire_one(on: impl Into<On<'_>>) -> Result<Option<Run>> {
    const POSTGRES: Sql = sql!(
        "update worker_runs set ",
        expired!(),
        " where id = (select id from worker_runs where state = 'queued' and expires_at < now() \
             and (shards is null or parent_id is not null) \
             order by expires_at limit 1 for update skip locked) \
         returning ",
        run_columns!()
    );
    const SQLITE: Sql = sql!(
        "update worker_runs set ",
        expired!(),
        " where id = (select id from worker_runs where state = 'queued' and expires_at < ",
        now,
        " and (shards is null or parent_id is not null) order by expires_at limit 1) returning ",
        run_columns!()
    );
    const EXPIRE: Sql = Sql { postgres: POSTGRES.postgres, sqlite: SQLITE.sqlite };
    run!(on, EXPIRE, |pool, sql| sqlx::query_as(sql).fetch_optional(pool).await)
}

/// Interrupts one running run whose lease has expired (the one expired longest), as recovery writes it; `None`
/// when there is none. A run with a live lease is never touched. PostgreSQL skips a row another recoverer holds
/// (it is ending it already) rather than waiting for it.
pub async fn interrupt_one_expired(on: impl Into<On<'_>>) -> Result<Option<Run>> {
    const POSTGRES: Sql = sql!(
        "update worker_runs set ",
        owner_lost!(),
        " where id = (select id from worker_runs where state = 'running' and lease_expires_at < now() \
             order by lease_expires_at limit 1 for update skip locked) \
         returning ",
        run_columns!()
    );
    const SQLITE: Sql = sql!(
        "update worker_runs set ",
        owner_lost!(),
        " where id = (select id from worker_runs where state = 'running' and lease_expires_at < ",
        now,
        " order by lease_expires_at limit 1) returning ",
        run_columns!()
    );
    const RECOVER: Sql = Sql { postgres: POSTGRES.postgres, sqlite: SQLITE.sqlite };
    run!(on, RECOVER, |pool, sql| sqlx::query_as(sql).fetch_optional(pool).await)
}
