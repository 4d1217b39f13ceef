//! The statements of a worker's history: its ended runs of a window counted per day and state, with the items
//! they processed, and the durations of its successful runs (their percentiles computed by PostgreSQL; SQLite,
//! which has no `percentile_cont`, returns the ordered durations for the domain to compute them); and what its
//! runs cost, from each run's `usage` (docs/worker-protocol.md, "Usage"): CPU, tokens and money summed per day
//! and currency, with the items they processed, and the neighbours of the 95th percentile of their peak memory
//! per day. All read the index on `(worker, finished_at)`.

use scrinalia_wire::RunState;

use crate::{
    Database, On, Result,
    database::Pool,
    dialect::{DbTime, Sql, sql},
    run,
};

/// The UTC calendar day a run ended, as `YYYY-MM-DD`.
macro_rules! end_day {
    (postgres;) => {
        "to_char(finished_at at time zone 'UTC', 'YYYY-MM-DD')"
    };
    (sqlite;) => {
        "substr(finished_at, 1, 10)"
    };
}

/// The items a run processed: its result's `processed` when that is a number, else its last progress's `done`
/// when that is (a run that ended without a result), else none.
macro_rules! items {
    (postgres;) => {
        "coalesce(case when jsonb_typeof(result -> 'processed') = 'number' then (result ->> 'processed')::float8 end, \
         case when jsonb_typeof(progress -> 'done') = 'number' then (progress ->> 'done')::float8 end, 0)"
    };
    (sqlite;) => {
        "coalesce(case when json_type(result, '$.processed') in ('integer', 'real') \
             then json_extract(result, '$.processed') end, \
         case when json_type(progress, '$.done') in ('integer', 'real') then json_extract(progress, '$.done') end, 0)"
    };
}

/// A number of a run's `usage`, as a double (null when the run has none): `cpu`, `tokens_in`, `tokens_out`, `cost`
/// and `peak` (the run's peak memory: its tree's, else its largest single process's).
macro_rules! usage {
    (postgres; cpu) => {
        "(usage ->> 'cpu_seconds')::float8"
    };
    (sqlite; cpu) => {
        "json_extract(usage, '$.cpu_seconds')"
    };
    (postgres; tokens_in) => {
        "(usage -> 'reported' ->> 'tokens_in')::float8"
    };
    (sqlite; tokens_in) => {
        "json_extract(usage, '$.reported.tokens_in')"
    };
    (postgres; tokens_out) => {
        "(usage -> 'reported' ->> 'tokens_out')::float8"
    };
    (sqlite; tokens_out) => {
        "json_extract(usage, '$.reported.tokens_out')"
    };
    (postgres; cost) => {
        "(usage -> 'reported' ->> 'cost')::float8"
    };
    (sqlite; cost) => {
        "json_extract(usage, '$.reported.cost')"
    };
    (postgres; currency) => {
        "(usage -> 'reported' ->> 'currency')"
    };
    (sqlite; currency) => {
        "json_extract(usage, '$.reported.currency')"
    };
    (postgres; peak) => {
        "coalesce((usage ->> 'peak_memory_bytes')::float8, (usage ->> 'peak_rss_largest_process_bytes')::float8)"
    };
    (sqlite; peak) => {
        "coalesce(json_extract(usage, '$.peak_memory_bytes'), json_extract(usage, '$.peak_rss_largest_process_bytes'))"
    };
}

/// The ended runs of one day in one state.
#[derive(Debug, sqlx::FromRow)]
pub struct DayCount {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The state they ended in.
    pub state: RunState,
    /// How many.
    pub runs: i64,
    /// The items they processed.
    pub items: f64,
}

/// The runs of `worker` that ended at `from` or later, counted per UTC day and state, with their items.
pub async fn per_day(
    on: impl Into<On<'_>>,
    worker: &str,
    from: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<DayCount>> {
    const PER_DAY: Sql = sql!(
        "select ",
        end_day!(),
        " as day, state, count(*) as runs, cast(sum(",
        items!(),
        ") as double precision) as items \
         from worker_runs where worker = $1 and finished_at is not null and finished_at >= $2 \
         group by 1, 2 order by 1, 2"
    );
    Ok(run!(on, PER_DAY, |pool, sql| sqlx::query_as(sql).bind(worker).bind(DbTime(from)).fetch_all(pool).await)?)
}

/// The durations of the successful runs of a window: their percentiles, or (SQLite) every one, ordered.
#[derive(Debug)]
pub enum Durations {
    /// PostgreSQL's `percentile_cont` of 0.5 and 0.95, over `runs` runs.
    Percentiles { runs: i64, p50: Option<f64>, p95: Option<f64> },
    /// Every duration in milliseconds, shortest first.
    Ordered(Vec<i64>),
}

/// The durations of the runs of `worker` that succeeded at `from` or later.
pub async fn durations(db: &Database, worker: &str, from: chrono::DateTime<chrono::Utc>) -> Result<Durations> {
    const PERCENTILES: &str = "select count(*), \
             percentile_cont(0.5) within group (order by duration_ms), \
             percentile_cont(0.95) within group (order by duration_ms) \
         from worker_runs where worker = $1 and state = 'succeeded' and finished_at >= $2 \
             and duration_ms is not null";
    const ORDERED: Sql = sql!(
        "select duration_ms from worker_runs where worker = $1 and state = 'succeeded' and finished_at >= $2 \
             and duration_ms is not null order by duration_ms"
    );
    Ok(match db.pool() {
        Pool::Postgres(pool) => {
            let (runs, p50, p95) = sqlx::query_as(PERCENTILES).bind(worker).bind(DbTime(from)).fetch_one(pool).await?;
            Durations::Percentiles { runs, p50, p95 }
        }
        Pool::Sqlite(pool) => Durations::Ordered(
            sqlx::query_scalar(ORDERED.sqlite).bind(worker).bind(DbTime(from)).fetch_all(pool).await?,
        ),
    })
}

/// What the runs of one day that reported their cost in one currency (or none) cost, with the items they
/// processed. Sums are absent when no run of the group has the figure. The `item_*` sums cover only the runs that
/// reported items, each with the items of the runs that have that figure (`*_items`), so that a figure per item
/// divides like by like.
#[derive(Debug, sqlx::FromRow)]
pub struct DayUsage {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The currency of the group's cost; none for runs that reported no cost.
    pub currency: Option<String>,
    /// Runs with a usage.
    pub runs: i64,
    /// Their CPU seconds.
    pub cpu_seconds: Option<f64>,
    /// The tokens they reported sending to a model.
    pub tokens_in: Option<f64>,
    /// The tokens they reported a model produced.
    pub tokens_out: Option<f64>,
    /// The money they reported, in `currency`.
    pub cost: Option<f64>,
    /// Items processed (succeeded or failed) by the runs that reported items.
    pub items: Option<f64>,
    /// Items processed (succeeded or failed) by the runs that reported items and have a CPU figure.
    pub cpu_items: Option<f64>,
    /// The CPU seconds of those runs.
    pub item_cpu_seconds: Option<f64>,
    /// Items processed by the runs that reported items and tokens.
    pub token_items: Option<f64>,
    /// The tokens in of those runs.
    pub item_tokens_in: Option<f64>,
    /// The tokens out of those runs.
    pub item_tokens_out: Option<f64>,
    /// Items processed by the runs that reported items and a cost.
    pub cost_items: Option<f64>,
    /// The cost of those runs.
    pub item_cost: Option<f64>,
}

/// What the runs of `worker` that ended at `from` or later cost, per UTC day and currency. A run's items are the
/// succeeded and failed ones it reported (skipped items were not processed).
pub async fn usage_per_day(
    on: impl Into<On<'_>>,
    worker: &str,
    from: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<DayUsage>> {
    const USAGE_PER_DAY: Sql = sql!(
        "select day, currency, count(*) as runs, \
             cast(sum(cpu) as double precision) as cpu_seconds, \
             cast(sum(tokens_in) as double precision) as tokens_in, \
             cast(sum(tokens_out) as double precision) as tokens_out, \
             cast(sum(cost) as double precision) as cost, \
             cast(sum(case when items > 0 then items end) as double precision) as items, \
             cast(sum(case when items > 0 and cpu is not null then items end) as double precision) as cpu_items, \
             cast(sum(case when items > 0 then cpu end) as double precision) as item_cpu_seconds, \
             cast(sum(case when items > 0 and (tokens_in is not null or tokens_out is not null) then items end) \
                 as double precision) as token_items, \
             cast(sum(case when items > 0 and (tokens_in is not null or tokens_out is not null) \
                 then coalesce(tokens_in, 0) end) as double precision) as item_tokens_in, \
             cast(sum(case when items > 0 and (tokens_in is not null or tokens_out is not null) \
                 then coalesce(tokens_out, 0) end) as double precision) as item_tokens_out, \
             cast(sum(case when items > 0 and cost is not null then items end) as double precision) as cost_items, \
             cast(sum(case when items > 0 then cost end) as double precision) as item_cost \
         from (select ",
        end_day!(),
        " as day, ",
        usage!(currency),
        " as currency, ",
        usage!(cpu),
        " as cpu, ",
        usage!(tokens_in),
        " as tokens_in, ",
        usage!(tokens_out),
        " as tokens_out, ",
        usage!(cost),
        " as cost, \
             (select sum(c.count) from run_item_counts c where c.run_id = r.id \
                 and c.outcome in ('succeeded', 'failed')) as items \
             from worker_runs r where worker = $1 and finished_at is not null and finished_at >= $2 \
                 and usage is not null) u \
         group by day, currency order by day, currency"
    );
    Ok(run!(on, USAGE_PER_DAY, |pool, sql| sqlx::query_as(sql).bind(worker).bind(DbTime(from)).fetch_all(pool).await)?)
}

/// The key of the whole window among the rows of [`peak_percentile`] (a day is `YYYY-MM-DD`).
pub const WINDOW: &str = "window";

/// One neighbour of a 95th percentile of peak memory: the `nth` smallest (from 0) of the `runs` peaks of
/// `day` (or of the whole window, [`WINDOW`]).
#[derive(Debug, sqlx::FromRow)]
pub struct PeakRank {
    /// `YYYY-MM-DD`, UTC, or [`WINDOW`].
    pub day: String,
    /// How many runs of that day have a peak.
    pub runs: i64,
    /// Its rank among them, from 0.
    pub nth: i64,
    /// The peak, in bytes.
    pub peak: f64,
}

/// The peak memory of the runs of `worker` that ended at `from` or later, per UTC day and for the whole window:
/// only the neighbours of each 95th percentile, the peaks ranked `floor(0.95 (n - 1))` and `ceil(0.95 (n - 1))`
/// (both computed with whole numbers, as `95 (n - 1) / 100` rounded down and up), which the domain interpolates as
/// `percentile_cont` does. The same statement on both backends (SQLite has no percentile function), and at most
/// two rows per day come back, however many runs there were.
pub async fn peak_percentile(
    on: impl Into<On<'_>>,
    worker: &str,
    from: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<PeakRank>> {
    const PEAKS: Sql = sql!(
        "with peaks as (select ",
        end_day!(),
        " as day, ",
        usage!(peak),
        " as peak from worker_runs \
             where worker = $1 and finished_at is not null and finished_at >= $2 and usage is not null), \
         known as (select day, peak from peaks where peak is not null \
             union all select 'window', peak from peaks where peak is not null), \
         ranked as (select day, peak, row_number() over (partition by day order by peak) - 1 as nth, \
             count(*) over (partition by day) as runs from known) \
         select day, runs, nth, cast(peak as double precision) as peak from ranked \
         where nth = (95 * (runs - 1)) / 100 or nth = (95 * (runs - 1) + 99) / 100 order by day, nth"
    );
    Ok(run!(on, PEAKS, |pool, sql| sqlx::query_as(sql).bind(worker).bind(DbTime(from)).fetch_all(pool).await)?)
}
