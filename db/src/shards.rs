//! The statements of sharded runs: a parent's children, the parent taken to `running` when its first child is
//! claimed, and the parent's state written from its children's (the rule is `scrinalia_shared::runs::shards`).

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

/// Every child of parent run `parent`, retries included, by shard then oldest first.
pub async fn children(on: impl Into<On<'_>>, parent: Uuid) -> Result<Vec<Run>> {
    const CHILDREN: Sql =
        sql!("select ", run_columns!(), " from worker_runs where parent_id = $1 order by shard, requested_at, id");
    Ok(run!(on, CHILDREN, |pool, sql| sqlx::query_as(sql).bind(parent).fetch_all(pool).await)?)
}

/// Takes parent run `parent` from `queued` to `running` (its first child was claimed); nothing when it runs or
/// ended already.
pub async fn start_parent(on: impl Into<On<'_>>, parent: Uuid) -> Result<()> {
    const START: Sql = sql!(
        "update worker_runs set state = 'running', claimed_at = coalesce(claimed_at, ",
        now,
        "), started_at = coalesce(started_at, ",
        now,
        ") where id = $1 and state = 'queued' and shards is not null and parent_id is null"
    );
    run!(on, START, |pool, sql| sqlx::query(sql).bind(parent).execute(pool).await.map(drop))
}

/// A parent's state as its children make it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// Its state.
    pub state: RunState,
    /// Why it ended (the deciding child's reason), once it has.
    pub reason: Option<EndReason>,
    /// The deciding child's exit status.
    pub exit_code: Option<i32>,
    /// Which children did not succeed, as a sentence.
    pub error: Option<String>,
    /// The children's results: numeric fields summed, the others listed per child.
    pub result: Option<Value>,
    /// The children's last progress, summed the same way.
    pub progress: Option<Value>,
}

/// Writes parent run `parent`'s state from its children's, while it is in flight; the parent as written, or
/// `None` when it had ended already (nothing is written then). An end stamps `finished_at` and the duration
/// from the first child's start.
pub async fn settle(on: impl Into<On<'_>>, parent: Uuid, settled: &Settled) -> Result<Option<Run>> {
    const SETTLE: Sql = sql!(
        "update worker_runs set state = $2, end_reason = $3, exit_code = $4, error = $5, result = $6, progress = $7, \
             started_at = case when $2 = 'queued' then started_at else coalesce(started_at, ",
        now,
        ") end, \
             claimed_at = case when $2 = 'queued' then claimed_at else coalesce(claimed_at, ",
        now,
        ") end, \
             finished_at = case when $2 in ('queued', 'running') then null else ",
        now,
        " end, \
             duration_ms = case when $2 in ('queued', 'running') then null else ",
        ms_since(coalesce(started_at, requested_at)),
        " end \
         where id = $1 and state in ('queued', 'running') and shards is not null and parent_id is null returning ",
        run_columns!()
    );
    run!(on, SETTLE, |pool, sql| sqlx::query_as(sql)
        .bind(parent)
        .bind(settled.state)
        .bind(settled.reason)
        .bind(settled.exit_code)
        .bind(settled.error.as_deref())
        .bind(settled.result.as_ref().map(Json))
        .bind(settled.progress.as_ref().map(Json))
        .fetch_optional(pool)
        .await)
}

/// Flags parent run `parent` as asked to be cancelled by `actor` (its children are cancelled one by one; it
/// ends when they have); `None` when it is not in flight or not a parent.
pub async fn flag_cancel(on: impl Into<On<'_>>, parent: Uuid, actor: &str) -> Result<Option<Run>> {
    const FLAG: Sql = sql!(
        "update worker_runs set cancel_requested_at = coalesce(cancel_requested_at, ",
        now,
        "), cancel_requested_by = coalesce(cancel_requested_by, $2) \
         where id = $1 and state in ('queued', 'running') and shards is not null and parent_id is null returning ",
        run_columns!()
    );
    run!(on, FLAG, |pool, sql| sqlx::query_as(sql).bind(parent).bind(actor).fetch_optional(pool).await)
}
