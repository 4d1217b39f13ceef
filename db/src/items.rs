//! Items: the per-document outcomes a worker reports, written a batch at a time, and read back as counts and as
//! pages of one outcome. Which items a batch holds, and what is counted, is decided by the daemon
//! (`scrinalia_shared::items`); this module only stores and reads.

use sqlx::types::Json;
use uuid::Uuid;

use crate::{
    Backend, On, Result,
    dialect::{Sql, sql},
    ledger::case_insensitive_like,
    tx::run,
};

pub use scrinalia_wire::{ItemCount, RunItem};

/// One batch of a run's items: its sequence number (1, 2, … per run), how many item lines it stands for, the
/// items kept individually and the counts it adds.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// The daemon's sequence number of the batch within the run.
    pub seq: i64,
    /// How many item lines (refused ones included) the batch stands for.
    pub lines: i64,
    /// The items kept individually; one row per id (the last report of an id wins).
    pub items: &'a [RunItem],
    /// What the batch adds to the run's counts; one entry per (outcome, class).
    pub counts: &'a [ItemCount],
}

/// What became of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchWrite {
    /// Stored now.
    Written,
    /// Stored before (the batch was sent again after a connection was lost): nothing changed.
    AlreadyWritten,
    /// The run is no longer running under this daemon: nothing was stored.
    LeaseLost,
}

/// Writes `batch` of `run`, fenced by ownership (running under `daemon`). On PostgreSQL one statement; on SQLite,
/// which has no writing CTE, three statements in the caller's transaction (or one of their own on a pool).
pub async fn write_batch(on: impl Into<On<'_>>, run: Uuid, daemon: Uuid, batch: Batch<'_>) -> Result<BatchWrite> {
    let on = on.into();
    match (on.backend(), on) {
        (Backend::Postgres, on) => write_postgres(on, run, daemon, batch).await,
        (Backend::Sqlite, On::Tx(tx)) => write_sqlite(tx, run, daemon, batch).await,
        (Backend::Sqlite, On::Pool(db)) => {
            let mut tx = db.begin_write().await?;
            let written = write_sqlite(&mut tx, run, daemon, batch).await?;
            tx.commit().await?;
            Ok(written)
        }
    }
}

/// The batch's row first: when it exists already, or the run is not this daemon's, nothing else is written.
async fn write_postgres(on: On<'_>, run: Uuid, daemon: Uuid, batch: Batch<'_>) -> Result<BatchWrite> {
    const WRITE: Sql = sql!(
        "with owner as (select id from worker_runs where id = $1 and claimed_by = $2 and state = 'running'), \
         batch as (insert into run_item_batches (run_id, seq, lines) select id, $3, $4 from owner \
             on conflict do nothing returning run_id), \
         stored as (insert into run_items (run_id, item_id, outcome, class, error) \
             select b.run_id, i.id, i.outcome, i.class, i.error \
             from batch b cross join jsonb_to_recordset($5::jsonb) as i(id text, outcome text, class text, error text) \
             on conflict (run_id, item_id) do update \
             set outcome = excluded.outcome, class = excluded.class, error = excluded.error), \
         counted as (insert into run_item_counts (run_id, outcome, class, count) \
             select b.run_id, c.outcome, c.class, c.count \
             from batch b cross join jsonb_to_recordset($6::jsonb) as c(outcome text, class text, count bigint) \
             on conflict (run_id, outcome, class) do update set count = run_item_counts.count + excluded.count) \
         select (select count(*) from owner), (select count(*) from batch)"
    );
    let (owned, written): (i64, i64) = run!(on, WRITE, |exec, sql| sqlx::query_as(sql)
        .bind(run)
        .bind(daemon)
        .bind(batch.seq)
        .bind(batch.lines)
        .bind(Json(batch.items))
        .bind(Json(batch.counts))
        .fetch_one(exec)
        .await)?;
    Ok(outcome(owned > 0, written > 0))
}

async fn write_sqlite(tx: &mut crate::Tx, run: Uuid, daemon: Uuid, batch: Batch<'_>) -> Result<BatchWrite> {
    const CLAIM_SEQ: Sql = sql!(
        "insert into run_item_batches (run_id, seq, lines) select id, $3, $4 from worker_runs \
         where id = $1 and claimed_by = $2 and state = 'running' on conflict do nothing"
    );
    const OWNED: Sql = sql!("select count(*) from worker_runs where id = $1 and claimed_by = $2 and state = 'running'");
    // `where true`: SQLite's grammar needs it before an upsert's `on conflict` after a `select`.
    const STORE: Sql = sql!(
        "insert into run_items (run_id, item_id, outcome, class, error) \
         select $1, json_extract(value, '$.id'), json_extract(value, '$.outcome'), json_extract(value, '$.class'), \
             json_extract(value, '$.error') from json_each($2) where true \
         on conflict (run_id, item_id) do update \
         set outcome = excluded.outcome, class = excluded.class, error = excluded.error"
    );
    const COUNT: Sql = sql!(
        "insert into run_item_counts (run_id, outcome, class, count) \
         select $1, json_extract(value, '$.outcome'), json_extract(value, '$.class'), json_extract(value, '$.count') \
         from json_each($2) where true \
         on conflict (run_id, outcome, class) do update set count = run_item_counts.count + excluded.count"
    );
    let claimed = run!(&mut *tx, CLAIM_SEQ, |exec, sql| sqlx::query(sql)
        .bind(run)
        .bind(daemon)
        .bind(batch.seq)
        .bind(batch.lines)
        .execute(exec)
        .await
        .map(|r| r.rows_affected()))?;
    if claimed == 0 {
        let owned: i64 =
            run!(&mut *tx, OWNED, |exec, sql| sqlx::query_scalar(sql).bind(run).bind(daemon).fetch_one(exec).await)?;
        return Ok(outcome(owned > 0, false));
    }
    if !batch.items.is_empty() {
        run!(&mut *tx, STORE, |exec, sql| sqlx::query(sql)
            .bind(run)
            .bind(Json(batch.items))
            .execute(exec)
            .await
            .map(drop))?;
    }
    if !batch.counts.is_empty() {
        run!(&mut *tx, COUNT, |exec, sql| sqlx::query(sql)
            .bind(run)
            .bind(Json(batch.counts))
            .execute(exec)
            .await
            .map(drop))?;
    }
    Ok(BatchWrite::Written)
}

fn outcome(owned: bool, written: bool) -> BatchWrite {
    match (owned, written) {
        (_, true) => BatchWrite::Written,
        (true, false) => BatchWrite::AlreadyWritten,
        (false, false) => BatchWrite::LeaseLost,
    }
}

/// The resume chain of the run bound as `root`: the run and every run it resumes, transitively (at most 1,000
/// deep), each with its depth (0 for the run itself). Items of a chain are counted once by id: a run resumed
/// from a checkpoint may report again the items its predecessor reported after that checkpoint.
macro_rules! resume_chain {
    ($d:ident; $root:literal) => {
        concat!(
            "with recursive chain (id, depth) as (select id, 0 from worker_runs where id = ",
            $root,
            " union all select w.follows, c.depth + 1 from chain c join worker_runs w on w.id = c.id \
             where w.follows_as = 'resume' and w.follows is not null and c.depth < 1000) "
        )
    };
}
pub(crate) use resume_chain;

/// The failed and skipped items of `run`'s resume chain, counted once by id (an id failed in two runs of the
/// chain counts once, with the class of the latest report), and how many runs the chain has.
pub async fn chain_counts(on: impl Into<On<'_>>, run: Uuid) -> Result<(i64, Vec<ItemCount>)> {
    const COUNTS: Sql = sql!(
        resume_chain!("$1"),
        ", latest as (select i.outcome, i.class, \
         row_number() over (partition by i.item_id, i.outcome order by c.depth) as nth \
         from run_items i join chain c on c.id = i.run_id where i.outcome in ('failed', 'skipped')) \
         select outcome, coalesce(class, '') as class, count(*) as count, (select count(*) from chain) as runs \
         from latest where nth = 1 group by outcome, class \
         union all select '', '', 0, (select count(*) from chain) order by 1, 2"
    );
    let rows: Vec<(String, String, i64, i64)> =
        run!(on, COUNTS, |exec, sql| sqlx::query_as(sql).bind(run).fetch_all(exec).await)?;
    let runs = rows.first().map_or(1, |r| r.3);
    let counts = rows
        .into_iter()
        .filter(|r| !r.0.is_empty())
        .map(|(outcome, class, count, _)| ItemCount { outcome, class, count })
        .collect();
    Ok((runs, counts))
}

/// A run's counts by outcome and class, in that order.
pub async fn counts(on: impl Into<On<'_>>, run: Uuid) -> Result<Vec<ItemCount>> {
    const COUNTS: Sql =
        sql!("select outcome, class, count from run_item_counts where run_id = $1 order by outcome, class");
    run!(on, COUNTS, |exec, sql| sqlx::query_as(sql).bind(run).fetch_all(exec).await)
}

/// Which of a run's items to list: of one outcome (all when `None`), whose id matches `pattern` (a `LIKE` pattern
/// escaped with `\`, e.g. [`crate::ledger::contains_pattern`], without regard to case), after the id `after` (the last one of the previous page), at most `limit`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ItemPage<'a> {
    /// Only this outcome.
    pub outcome: Option<&'a str>,
    /// Only ids matching this `LIKE` pattern (escape character `\`).
    pub pattern: Option<&'a str>,
    /// Only ids after this one.
    pub after: Option<&'a str>,
    /// At most this many.
    pub limit: i64,
}

/// One page of a run's items, in id order (served by `run_items_by_outcome` or the primary key).
pub async fn list(on: impl Into<On<'_>>, run: Uuid, page: ItemPage<'_>) -> Result<Vec<RunItem>> {
    const LIST: Sql = sql!(
        "select item_id, outcome, class, error from run_items where run_id = $1 \
         and ($2 is null or outcome = $2) and ($3 is null or item_id ",
        case_insensitive_like!(),
        " $3 escape '\\') \
         and ($4 is null or item_id > $4) order by item_id limit $5"
    );
    run!(on, LIST, |exec, sql| sqlx::query_as(sql)
        .bind(run)
        .bind(page.outcome)
        .bind(page.pattern)
        .bind(page.after)
        .bind(page.limit)
        .fetch_all(exec)
        .await)
}

/// How many batches of a run were written (each one statement on PostgreSQL): what the benchmark and the tests
/// count writes by.
pub async fn batches(on: impl Into<On<'_>>, run: Uuid) -> Result<i64> {
    const BATCHES: Sql = sql!("select count(*) from run_item_batches where run_id = $1");
    run!(on, BATCHES, |exec, sql| sqlx::query_scalar(sql).bind(run).fetch_one(exec).await)
}
