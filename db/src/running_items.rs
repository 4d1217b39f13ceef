//! The statement behind a worker card's "412 items · 38/min": for every running run that has reported items,
//! how many item lines it has stored so far and how long it has been running, read from the runs' counts in one
//! statement for all workers.

use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{Sql, sql},
    run,
};

/// For each running run with items stored: its id, its item lines (succeeded, failed and skipped; refused lines
/// and the count of cut errors left out) and the seconds on the database clock since it started (since its
/// claim, before it started). Runs without items are left out. The index of the runs in flight finds the
/// running runs, the counts' primary key their counts.
pub async fn list(on: impl Into<On<'_>>) -> Result<Vec<(Uuid, i64, Option<f64>)>> {
    const RUNNING_ITEMS: Sql = sql!(
        "select r.id, cast(sum(c.count) as bigint), ",
        seconds_since(coalesce(r.started_at, r.claimed_at)),
        " from worker_runs r join run_item_counts c on c.run_id = r.id \
         where r.state = 'running' and c.outcome in ('succeeded', 'failed', 'skipped') \
         group by r.id, r.started_at, r.claimed_at"
    );
    run!(on, RUNNING_ITEMS, |pool, sql| sqlx::query_as(sql).fetch_all(pool).await)
}
