//! Quarantine: each worker's failure streaks of items, updated when a run ends; the items whose streak reached
//! the worker's `quarantine_after`; their releases; and the scope of a rerun of a run's failures. Which streak
//! counts as quarantined is the caller's threshold: this module stores and reads.

use scrinalia_wire::{ItemError, QuarantineRelease, QuarantinedItem};
use uuid::Uuid;

use crate::{
    DbTime, On, Result, Tx,
    dialect::{Sql, sql},
    items::resume_chain,
    tx::run,
};

/// Settles the streaks of `worker` after run `run` ended, in the transaction that ended it: its succeeded items
/// end their streaks; each failed item adds one to its streak, unless the run resumes `resumed` and that run
/// already counted it (a resume continues the same work). Skipped items, and items the run did not report, are
/// left as they were.
pub async fn settle(tx: &mut Tx, run: Uuid, worker: &str, resumed: Option<Uuid>) -> Result<()> {
    const ENDED: Sql = sql!(
        "delete from item_streaks where worker = $2 and item_id in \
         (select item_id from run_items where run_id = $1 and outcome = 'succeeded')"
    );
    // `where true`: SQLite's grammar needs it before an upsert's `on conflict` after a `select`.
    const FAILED: Sql = sql!(
        "insert into item_streaks (worker, item_id, failures, last_run, last_failed_at, run_1, class_1, error_1) \
         select $2, item_id, 1, $1, ",
        now,
        ", $1, class, error from run_items where run_id = $1 and outcome = 'failed' and true \
         on conflict (worker, item_id) do update set \
         failures = item_streaks.failures + case when item_streaks.last_run = $3 then 0 else 1 end, \
         last_run = excluded.last_run, last_failed_at = excluded.last_failed_at, \
         run_3 = item_streaks.run_2, class_3 = item_streaks.class_2, error_3 = item_streaks.error_2, \
         run_2 = item_streaks.run_1, class_2 = item_streaks.class_1, error_2 = item_streaks.error_1, \
         run_1 = excluded.run_1, class_1 = excluded.class_1, error_1 = excluded.error_1"
    );
    run!(&mut *tx, ENDED, |exec, sql| sqlx::query(sql).bind(run).bind(worker).execute(exec).await.map(drop))?;
    run!(&mut *tx, FAILED, |exec, sql| sqlx::query(sql)
        .bind(run)
        .bind(worker)
        .bind(resumed)
        .execute(exec)
        .await
        .map(drop))?;
    Ok(())
}

/// The items of `worker` with a streak under way (at least one failure): a run of it keeps their successes one
/// by one, so that its end can close their streaks.
pub async fn watched(on: impl Into<On<'_>>, worker: &str) -> Result<Vec<String>> {
    const WATCHED: Sql = sql!("select item_id from item_streaks where worker = $1 and failures > 0");
    run!(on, WATCHED, |exec, sql| sqlx::query_scalar(sql).bind(worker).fetch_all(exec).await)
}

/// The ids of `worker`'s items failed in at least `after` runs in a row, in id order.
pub async fn quarantined_ids(on: impl Into<On<'_>>, worker: &str, after: i64) -> Result<Vec<String>> {
    const IDS: Sql = sql!("select item_id from item_streaks where worker = $1 and failures >= $2 order by item_id");
    run!(on, IDS, |exec, sql| sqlx::query_scalar(sql).bind(worker).bind(after).fetch_all(exec).await)
}

/// How many of `worker`'s items failed in at least `after` runs in a row.
pub async fn count(on: impl Into<On<'_>>, worker: &str, after: i64) -> Result<i64> {
    const COUNT: Sql = sql!("select count(*) from item_streaks where worker = $1 and failures >= $2");
    run!(on, COUNT, |exec, sql| sqlx::query_scalar(sql).bind(worker).bind(after).fetch_one(exec).await)
}

/// How many items of each worker have each streak length (at least one failure): (worker, failures, items).
pub async fn streaks(on: impl Into<On<'_>>) -> Result<Vec<(String, i64, i64)>> {
    const STREAKS: Sql =
        sql!("select worker, failures, count(*) from item_streaks where failures > 0 group by worker, failures");
    run!(on, STREAKS, |exec, sql| sqlx::query_as(sql).fetch_all(exec).await)
}

#[derive(sqlx::FromRow)]
struct Row {
    item_id: String,
    failures: i64,
    last_failed_at: DbTime,
    run_1: Option<Uuid>,
    class_1: Option<String>,
    error_1: Option<String>,
    run_2: Option<Uuid>,
    class_2: Option<String>,
    error_2: Option<String>,
    run_3: Option<Uuid>,
    class_3: Option<String>,
    error_3: Option<String>,
}

impl From<Row> for QuarantinedItem {
    fn from(row: Row) -> Self {
        let errors = [
            (row.run_1, row.class_1, row.error_1),
            (row.run_2, row.class_2, row.error_2),
            (row.run_3, row.class_3, row.error_3),
        ]
        .into_iter()
        .filter_map(|(run, class, error)| Some(ItemError { run_id: run?, class, error }))
        .collect();
        Self { id: row.item_id, failures: row.failures, last_failed_at: row.last_failed_at.0, errors }
    }
}

/// Up to `limit` of `worker`'s quarantined items (a streak of at least `after`), in id order, each with its last
/// three errors, newest first.
pub async fn list(on: impl Into<On<'_>>, worker: &str, after: i64, limit: i64) -> Result<Vec<QuarantinedItem>> {
    const LIST: Sql = sql!(
        "select item_id, failures, last_failed_at, run_1, class_1, error_1, run_2, class_2, error_2, \
         run_3, class_3, error_3 from item_streaks where worker = $1 and failures >= $2 order by item_id limit $3"
    );
    let rows: Vec<Row> =
        run!(on, LIST, |exec, sql| sqlx::query_as(sql).bind(worker).bind(after).bind(limit).fetch_all(exec).await)?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Releases `worker`'s quarantined item `item` (its streak starts again from nothing), or every quarantined item
/// when `item` is `None`; how many were released.
pub async fn release(tx: &mut Tx, worker: &str, item: Option<&str>, after: i64) -> Result<u64> {
    const RELEASE: Sql = sql!(
        "update item_streaks set failures = 0 where worker = $1 and failures >= $2 and ($3 is null or item_id = $3)"
    );
    run!(&mut *tx, RELEASE, |exec, sql| sqlx::query(sql)
        .bind(worker)
        .bind(after)
        .bind(item)
        .execute(exec)
        .await
        .map(|r| r.rows_affected()))
}

/// Records a release in the audit trail.
pub async fn record_release(
    tx: &mut Tx,
    worker: &str,
    item: Option<&str>,
    released: u64,
    actor: &str,
    reason: &str,
) -> Result<()> {
    const RECORD: Sql =
        sql!("insert into quarantine_releases (worker, item_id, released, actor, reason) values ($1, $2, $3, $4, $5)");
    run!(&mut *tx, RECORD, |exec, sql| sqlx::query(sql)
        .bind(worker)
        .bind(item)
        .bind(i64::try_from(released).unwrap_or(i64::MAX))
        .bind(actor)
        .bind(reason)
        .execute(exec)
        .await
        .map(drop))
}

#[derive(sqlx::FromRow)]
struct ReleaseRow {
    worker: String,
    item_id: Option<String>,
    released: i64,
    actor: String,
    reason: String,
    at: DbTime,
}

/// The last `limit` releases of `worker`'s quarantine, newest first.
pub async fn releases(on: impl Into<On<'_>>, worker: &str, limit: i64) -> Result<Vec<QuarantineRelease>> {
    const RELEASES: Sql = sql!(
        "select worker, item_id, released, actor, reason, at from quarantine_releases where worker = $1 \
         order by id desc limit $2"
    );
    let rows: Vec<ReleaseRow> =
        run!(on, RELEASES, |exec, sql| sqlx::query_as(sql).bind(worker).bind(limit).fetch_all(exec).await)?;
    Ok(rows
        .into_iter()
        .map(|r| QuarantineRelease {
            worker: r.worker,
            item: r.item_id,
            released: r.released,
            actor: r.actor,
            reason: r.reason,
            at: r.at.0,
        })
        .collect())
}

/// Stores as the scope of run `run` the items run `of` reported failed, with those its resume chain reported
/// failed (a resumed run never sees what its predecessors failed before their checkpoint), each once; how many.
pub async fn store_scope(tx: &mut Tx, run: Uuid, of: Uuid) -> Result<u64> {
    const SCOPE: Sql = sql!(
        resume_chain!("$2"),
        "insert into run_scopes (run_id, item_id) select distinct $1, i.item_id from run_items i \
         join chain c on c.id = i.run_id where i.outcome = 'failed'"
    );
    run!(&mut *tx, SCOPE, |exec, sql| sqlx::query(sql)
        .bind(run)
        .bind(of)
        .execute(exec)
        .await
        .map(|r| r.rows_affected()))
}

/// Gives run `to` the scope of run `from` (a retry of a scoped run keeps its scope); nothing when `from` has none.
pub async fn copy_scope(tx: &mut Tx, from: Uuid, to: Uuid) -> Result<()> {
    const COPY: Sql =
        sql!("insert into run_scopes (run_id, item_id) select $2, item_id from run_scopes where run_id = $1");
    run!(&mut *tx, COPY, |exec, sql| sqlx::query(sql).bind(from).bind(to).execute(exec).await.map(drop))
}

/// The item ids a run is scoped to, in id order (none for a run without a scope).
pub async fn scope(on: impl Into<On<'_>>, run: Uuid) -> Result<Vec<String>> {
    const SCOPE: Sql = sql!("select item_id from run_scopes where run_id = $1 order by item_id");
    run!(on, SCOPE, |exec, sql| sqlx::query_scalar(sql).bind(run).fetch_all(exec).await)
}

/// How many items a run and the runs it resumes reported failed, once each, as their stored rows say.
pub async fn failed_items(on: impl Into<On<'_>>, run: Uuid) -> Result<i64> {
    const FAILED: Sql = sql!(
        resume_chain!("$1"),
        "select count(distinct i.item_id) from run_items i join chain c on c.id = i.run_id \
         where i.outcome = 'failed'"
    );
    run!(on, FAILED, |exec, sql| sqlx::query_scalar(sql).bind(run).fetch_one(exec).await)
}
