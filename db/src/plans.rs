//! The query plans of the panel's reads and of the claim, for the test that keeps them index-served at ten
//! million runs (tests/tests/suite/db_plans.rs): each statement is the very text its function runs (the same
//! `const`), bound as that function binds it. Not an API: hidden from the documentation.
//!
//! - PostgreSQL: `PREPARE` with the parameters' types, then `EXPLAIN (FORMAT JSON) EXECUTE` twice, once under
//!   `plan_cache_mode = force_custom_plan` (the plan of the values) and once under `force_generic_plan` (the plan
//!   a prepared statement switches to after its fifth run, whatever the values).
//! - SQLite: `EXPLAIN QUERY PLAN` with the values bound.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row as _, types::Json};
use uuid::Uuid;

use scrinalia_wire::RunState;

use crate::{
    Database, Result, daemons,
    database::Pool,
    dialect::{DbTime, Sql},
    ledger::{self, Cursor, RunFilter, contains_pattern},
    runs,
};

/// What the statements are explained with: values as a panel would send them.
#[derive(Debug, Clone)]
pub struct PlanSample {
    /// A worker of the ledger (the runs list's worker filter).
    pub worker: String,
    /// The catalogue's workers (the worker view's last finished runs).
    pub workers: Vec<String>,
    /// The runs list's state filter.
    pub state: RunState,
    /// The start of the runs list's day filter (the day runs to the same time the next day).
    pub day: DateTime<Utc>,
    /// A cursor deep in the ledger (the runs list's deep page).
    pub deep: Cursor,
    /// A run of the ledger (the run detail).
    pub run: Uuid,
    /// The claiming daemon.
    pub daemon: Uuid,
    /// A tag many runs of the ledger carry (the runs list's tag filter).
    pub tag: String,
    /// A tag few runs carry.
    pub rare_tag: String,
}

/// One statement and its plans.
#[derive(Debug, Clone)]
pub struct ExplainedRead {
    /// What it reads, for people ("runs list: deep cursor page").
    pub name: &'static str,
    /// The statement's text on this backend.
    pub sql: &'static str,
    /// `(kind, plan)`: on PostgreSQL `("custom", …)` and `("generic", …)`, each the JSON of `EXPLAIN (FORMAT
    /// JSON)`; on SQLite `("sqlite", …)`, a JSON list of the `EXPLAIN QUERY PLAN` lines.
    pub plans: Vec<(&'static str, Value)>,
}

/// A bound value: its PostgreSQL type, its literal there, and how SQLite gets it.
#[derive(Debug, Clone)]
enum Param {
    Text(Option<String>),
    Int(i64),
    Float(f64),
    Uuid(Option<Uuid>),
    Time(DateTime<Utc>),
    /// A `text[]` on PostgreSQL, a JSON list on SQLite (the claim's worker lists).
    Texts(Option<Vec<String>>),
    /// A JSON list of strings on both.
    JsonTexts(Vec<String>),
    /// A null of a PostgreSQL type (the claim's "ahead of" bound, unset in a plain claim).
    Null(&'static str),
}

impl Param {
    fn pg_type(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Int(_) => "bigint",
            Self::Float(_) => "float8",
            Self::Uuid(_) => "uuid",
            Self::Time(_) => "timestamptz",
            Self::Texts(_) => "text[]",
            Self::JsonTexts(_) => "jsonb",
            Self::Null(pg_type) => pg_type,
        }
    }

    fn pg_literal(&self) -> String {
        let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
        match self {
            Self::Text(None) | Self::Uuid(None) | Self::Texts(None) | Self::Null(_) => "null".to_owned(),
            Self::Text(Some(s)) => quote(s),
            Self::Int(n) => n.to_string(),
            Self::Float(f) => format!("{f:?}::float8"),
            Self::Uuid(Some(u)) => format!("'{u}'::uuid"),
            Self::Time(t) => format!("'{}'::timestamptz", t.to_rfc3339()),
            Self::Texts(Some(list)) => {
                format!("array[{}]::text[]", list.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", "))
            }
            Self::JsonTexts(list) => format!("{}::jsonb", quote(&serde_json::to_string(list).unwrap_or_default())),
        }
    }
}

/// One statement of the plan list.
struct Read {
    name: &'static str,
    sql: Sql,
    params: Vec<Param>,
}

/// A runs-list page of `filter`, bound as [`ledger::list`] binds it.
fn page(name: &'static str, filter: &RunFilter) -> Read {
    let (from, to, at, id) = ledger::list_bounds(filter);
    let mut read = Read {
        name,
        sql: ledger::list_statement(filter),
        params: vec![
            Param::Text(filter.worker.clone()),
            Param::Text(filter.state.map(|s| s.as_str().to_owned())),
            Param::Time(from.0),
            Param::Time(to.0),
            Param::Time(at.0),
            Param::Uuid(Some(id)),
            Param::Int(i64::from(filter.limit) + 1),
            Param::Text(filter.requested_by.clone()),
            Param::Text(filter.error_contains.as_deref().map(contains_pattern)),
            Param::Uuid(filter.ids.map(|r| r.low)),
            Param::Uuid(filter.ids.map(|r| r.high)),
        ],
    };
    if let Some(tag) = &filter.tag {
        read.params.push(Param::Text(Some(tag.clone())));
    }
    read
}

/// Every statement of the list, with its values.
fn reads(db: &Database, s: &PlanSample) -> Vec<Read> {
    let first = RunFilter { limit: 50, ..RunFilter::default() };
    let day = RunFilter {
        worker: Some(s.worker.clone()),
        state: Some(s.state),
        from: Some(s.day),
        to: Some(s.day + chrono::TimeDelta::days(1)),
        ..first.clone()
    };
    let claim_sql = match db.pool() {
        Pool::Postgres(_) => runs::CLAIM_POSTGRES,
        Pool::Sqlite(_) => runs::CLAIM_SQLITE,
    };
    // A claim of four runs with a lease of a minute, any worker but `excluded`.
    let claim = |name, excluded| Read {
        name,
        sql: claim_sql,
        params: vec![
            Param::Uuid(Some(s.daemon)),
            Param::Float(60.0),
            Param::Int(4),
            Param::Texts(None),
            Param::Texts(excluded),
            Param::Null("smallint"),
            Param::Null("timestamptz"),
            Param::Null("uuid"),
        ],
    };
    vec![
        Read { name: "worker view: runs in flight", sql: runs::IN_FLIGHT, params: vec![] },
        Read {
            name: "worker view: last finished run of each worker",
            sql: runs::LAST_FINISHED,
            params: vec![Param::JsonTexts(s.workers.clone())],
        },
        Read {
            name: "worker view: daemons (with their runs in flight)",
            sql: daemons::LIST,
            params: vec![Param::Float(30.0), Param::Float(86_400.0)],
        },
        page("runs list: first page", &first),
        page("runs list: one worker", &RunFilter { worker: Some(s.worker.clone()), ..first.clone() }),
        page("runs list: one state", &RunFilter { state: Some(s.state), ..first.clone() }),
        page("runs list: worker, state and day", &day),
        page("runs list: deep cursor page", &RunFilter { after: Some(s.deep), ..first.clone() }),
        page(
            "runs list: one worker, deep cursor page",
            &RunFilter { worker: Some(s.worker.clone()), after: Some(s.deep), ..first.clone() },
        ),
        page("runs list: one tag", &RunFilter { tag: Some(s.tag.clone()), ..first.clone() }),
        page("runs list: a rare tag", &RunFilter { tag: Some(s.rare_tag.clone()), ..first.clone() }),
        page(
            "runs list: one tag, deep cursor page",
            &RunFilter { tag: Some(s.tag.clone()), after: Some(s.deep), ..first.clone() },
        ),
        page("runs list: one tag, worker, state and day", &RunFilter { tag: Some(s.tag.clone()), ..day.clone() }),
        Read { name: "run detail: the run", sql: runs::GET, params: vec![Param::Uuid(Some(s.run))] },
        Read { name: "run detail: progress history", sql: runs::PROGRESS, params: vec![Param::Uuid(Some(s.run))] },
        Read { name: "run detail: chain", sql: runs::CHAIN, params: vec![Param::Uuid(Some(s.run))] },
        claim("claim: the oldest queued requests", None),
        claim("claim: the oldest queued requests, some workers excluded", Some(vec![s.worker.clone()])),
    ]
}

impl Database {
    /// The plans of the panel's reads and of the claim (see the module's documentation). For the plan test
    /// only: nothing else calls it.
    #[doc(hidden)]
    pub async fn explain_panel_reads(&self, sample: &PlanSample) -> Result<Vec<ExplainedRead>> {
        let mut out = Vec::new();
        match self.pool() {
            Pool::Postgres(pool) => {
                let mut conn = pool.acquire().await?;
                for (i, read) in reads(self, sample).into_iter().enumerate() {
                    let name = format!("scrinalia_plan_{i}");
                    let types: Vec<&str> = read.params.iter().map(Param::pg_type).collect();
                    let types = if types.is_empty() { String::new() } else { format!("({})", types.join(", ")) };
                    sqlx::raw_sql(AssertSqlSafe(format!("prepare {name} {types} as {}", read.sql.postgres)))
                        .execute(&mut *conn)
                        .await?;
                    let values: Vec<String> = read.params.iter().map(Param::pg_literal).collect();
                    let values = if values.is_empty() { String::new() } else { format!("({})", values.join(", ")) };
                    let mut plans = Vec::new();
                    for (kind, mode) in [("custom", "force_custom_plan"), ("generic", "force_generic_plan")] {
                        sqlx::raw_sql(AssertSqlSafe(format!("set plan_cache_mode = {mode}")))
                            .execute(&mut *conn)
                            .await?;
                        let plan: Json<Value> =
                            sqlx::query_scalar(AssertSqlSafe(format!("explain (format json) execute {name}{values}")))
                                .persistent(false)
                                .fetch_one(&mut *conn)
                                .await?;
                        plans.push((kind, plan.0));
                    }
                    sqlx::raw_sql(AssertSqlSafe(format!("deallocate {name}; reset plan_cache_mode")))
                        .execute(&mut *conn)
                        .await?;
                    out.push(ExplainedRead { name: read.name, sql: read.sql.postgres, plans });
                }
            }
            Pool::Sqlite(pool) => {
                for read in reads(self, sample) {
                    let text = format!("explain query plan {}", read.sql.sqlite);
                    let mut query = sqlx::query(AssertSqlSafe(text));
                    for param in &read.params {
                        query = match param {
                            Param::Text(t) => query.bind(t.clone()),
                            Param::Int(n) => query.bind(*n),
                            Param::Float(f) => query.bind(*f),
                            Param::Uuid(u) => query.bind(*u),
                            Param::Time(t) => query.bind(DbTime(*t)),
                            Param::Texts(list) => query.bind(list.clone().map(Json)),
                            Param::JsonTexts(list) => query.bind(Json(list.clone())),
                            Param::Null(_) => query.bind(None::<String>),
                        };
                    }
                    let rows = query.fetch_all(pool).await?;
                    let lines: Vec<Value> = rows
                        .iter()
                        .map(|r| Value::String(r.try_get::<String, _>("detail").unwrap_or_default()))
                        .collect();
                    out.push(ExplainedRead {
                        name: read.name,
                        sql: read.sql.sqlite,
                        plans: vec![("sqlite", lines.into())],
                    });
                }
            }
        }
        Ok(out)
    }
}
