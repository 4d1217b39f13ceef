//! Pages of the ledger (the runs list): one statement per filter shape, each served by its own index at ten
//! million runs (tests/tests/suite/db_plans.rs holds their plans), and the bounds every page binds.

use chrono::{DateTime, Utc};
use scrinalia_wire::{Run, RunState};
use uuid::Uuid;

use crate::{
    On, Result,
    dialect::{DbTime, Sql, sql},
    run,
    runs::run_columns,
};

mod search;

pub use search::{IdRange, contains_pattern};

/// A position in the ledger, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last row's request time.
    pub requested_at: DateTime<Utc>,
    /// The last row's id.
    pub id: Uuid,
}

impl Cursor {
    /// The opaque text form used in URLs.
    pub fn encode(&self) -> String {
        format!("{}_{}", self.requested_at.timestamp_micros(), self.id.simple())
    }

    /// Parses [`Cursor::encode`]'s output.
    pub fn decode(s: &str) -> Option<Self> {
        let (micros, id) = s.split_once('_')?;
        let requested_at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
        Some(Self { requested_at, id: Uuid::parse_str(id).ok()? })
    }
}

/// Filters of the ledger.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this worker.
    pub worker: Option<String>,
    /// Only this state.
    pub state: Option<RunState>,
    /// Requested at or after.
    pub from: Option<DateTime<Utc>>,
    /// Requested before.
    pub to: Option<DateTime<Utc>>,
    /// Continue after this position.
    pub after: Option<Cursor>,
    /// Page size (at most 500).
    pub limit: u32,
    /// Only runs requested by this caller (the exact name).
    pub requested_by: Option<String>,
    /// Only runs whose error contains this text (case-insensitive; on SQLite for ASCII letters only).
    pub error_contains: Option<String>,
    /// Only runs whose id is in this range (a whole id, or the ids that start with some hex digits).
    pub ids: Option<IdRange>,
    /// Only runs that carry this tag.
    pub tag: Option<String>,
}

/// `LIKE` without regard to case: PostgreSQL's `ilike`; SQLite's `like` already ignores the case of ASCII letters.
macro_rules! case_insensitive_like {
    (postgres;) => {
        "ilike"
    };
    (sqlite;) => {
        "like"
    };
}
pub(crate) use case_insensitive_like;

/// A page of the ledger, newest first, with `$filter` (the worker's and the state's equalities, each ending in
/// `and`) in front. Every bound is a plain comparison with a bound value, so that an index serves it in any plan,
/// the generic plan PostgreSQL switches a prepared statement to included: `$3` is the earliest request time (or
/// the earliest time there is), `$4` the time every run comes before (or the latest), `($5, $6)` the cursor (or
/// the latest time with the largest id), `$7` the page size. One statement text per filter shape picks its index:
/// `worker_runs_ledger`, `worker_runs_worker_ledger`, `worker_runs_state_ledger`, `worker_runs_worker_state_ledger`.
macro_rules! ledger_page {
    ($index:ident; $($filter:literal)*) => {
        sql!(
            "select ",
            run_columns!(),
            " from worker_runs",
            $index!(),
            " where ",
            $($filter,)*
            "requested_at >= $3 and requested_at < $4 and (requested_at, id) < ($5, $6) \
           and ($8 is null or requested_by = $8) \
           and ($9 is null or error ",
        case_insensitive_like!(),
        " $9 escape '\\') \
           and ($10 is null or id between $10 and $11) \
         order by requested_at desc, id desc limit $7"
        )
    };
}

/// The planner's own choice of index.
macro_rules! any_index {
    ($d:ident;) => {
        ""
    };
}

/// The index of one worker's runs in one state. SQLite's planner, whose statistics cannot tell it how narrow the
/// pair is, takes the state's index about one time in three and reads every run of that state in the time range
/// (tests/tests/suite/db_plans.rs caught it); PostgreSQL's picks this one by itself.
macro_rules! worker_state_index {
    (postgres;) => {
        ""
    };
    (sqlite;) => {
        " indexed by worker_runs_worker_state_ledger"
    };
}

/// A page of the whole ledger.
pub(crate) const LIST: Sql = ledger_page!(any_index;);
/// A page of one worker's runs.
pub(crate) const LIST_OF_WORKER: Sql = ledger_page!(any_index; "worker = $1 and ");
/// A page of the runs in one state.
pub(crate) const LIST_IN_STATE: Sql = ledger_page!(any_index; "state = $2 and ");
/// A page of one worker's runs in one state.
pub(crate) const LIST_OF_WORKER_IN_STATE: Sql = ledger_page!(worker_state_index; "worker = $1 and state = $2 and ");

/// A page of the runs that carry one tag (`$12`), with any other filter: `run_tags_ledger` gives the tagged runs in
/// the ledger's order, from the newest, each read by its id and dropped when another filter does not hold. The
/// tag's rows come first whatever the planner thinks (SQLite takes the left side of a `cross join` as the outer
/// loop; PostgreSQL's planner finds it by itself): walking the whole ledger for a rare tag is the scan to avoid.
pub(crate) const LIST_OF_TAG: Sql = sql!(
    "select ",
    run_columns!(),
    " from run_tags cross join worker_runs \
     where tag = $12 and id = run_id and ($1 is null or worker = $1) and ($2 is null or state = $2) \
       and run_requested_at >= $3 and run_requested_at < $4 and (run_requested_at, run_id) < ($5, $6) \
       and ($8 is null or requested_by = $8) \
       and ($9 is null or error ",
    case_insensitive_like!(),
    " $9 escape '\\') \
       and ($10 is null or id between $10 and $11) \
     order by run_requested_at desc, run_id desc limit $7"
);

/// The statement of a page of `filter`.
pub(crate) fn list_statement(filter: &RunFilter) -> Sql {
    if filter.tag.is_some() {
        return LIST_OF_TAG;
    }
    match (filter.worker.is_some(), filter.state.is_some()) {
        (false, false) => LIST,
        (true, false) => LIST_OF_WORKER,
        (false, true) => LIST_IN_STATE,
        (true, true) => LIST_OF_WORKER_IN_STATE,
    }
}

/// Request times no run has: the bounds of a page without a `from`, a `to` or a cursor. Both are four-digit
/// years, so that they compare right as SQLite's text too.
fn earliest() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(-62_135_596_800, 0).unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}
fn latest() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(253_402_300_799, 999_000_000).unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// The bounds of a page of `filter` (`$3` to `$6` of [`ledger_page!`]).
pub(crate) fn list_bounds(filter: &RunFilter) -> (DbTime, DbTime, DbTime, Uuid) {
    let (at, id) = filter.after.map_or_else(|| (latest(), Uuid::max()), |c| (c.requested_at, c.id));
    (DbTime(filter.from.unwrap_or_else(earliest)), DbTime(filter.to.unwrap_or_else(latest)), DbTime(at), id)
}

/// Up to `limit` runs of the ledger matching `filter`, newest first. Planned for its values every time (not a
/// prepared statement kept on the connection): a generic plan cannot know that a page without `from` spans a
/// worker's whole history, and may fetch all of it to sort it (19 s for one worker's first page of ten million
/// runs, with `plan_cache_mode = force_generic_plan`), where the custom plan reads the page off an index.
pub async fn list(on: impl Into<On<'_>>, filter: &RunFilter, limit: u32) -> Result<Vec<Run>> {
    let (from, to, at, id) = list_bounds(filter);
    run!(on, list_statement(filter), |pool, sql| {
        let query = sqlx::query_as(sql)
            .persistent(false)
            .bind(&filter.worker)
            .bind(filter.state)
            .bind(from)
            .bind(to)
            .bind(at)
            .bind(id)
            .bind(i64::from(limit))
            .bind(&filter.requested_by)
            .bind(filter.error_contains.as_deref().map(contains_pattern))
            .bind(filter.ids.map(|r| r.low))
            .bind(filter.ids.map(|r| r.high));
        // Only the tag's statement has a `$12`.
        let query = match &filter.tag {
            Some(tag) => query.bind(tag),
            None => query,
        };
        query.fetch_all(pool).await
    })
}
