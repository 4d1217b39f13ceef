//! The statements of a worker's history: its ended runs of a window counted per day and state, with the items
//! they processed, and the durations of its successful runs (their percentiles computed by PostgreSQL; SQLite,
//! which has no `percentile_cont`, returns the ordered durations for the domain to compute them). Both read the
//! index on `(worker, finished_at)`.

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
