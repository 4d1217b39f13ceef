//! One way to hold a row for a while, for the four tables whose rows a process holds: a run its daemon executes
//! (`worker_runs`), a chore a daemon does (`worker_chores`), the retention pass one daemon at a time makes
//! (`retention_lease`) and a webhook delivery's attempt (`webhook_deliveries`). A [`Lease`] is who holds the row
//! and until when, on the database clock; a holder extends it with [`renew`] while it still holds it and has
//! not let it expire, and gives it up with [`release`]. Each table keeps its own column names, mapped here once
//! ([`Leased`]) and in docs/architecture.md:
//!
//! | table | key | holder | expires at |
//! |---|---|---|---|
//! | `worker_runs` | `id` | `claimed_by` | `lease_expires_at` |
//! | `worker_chores` | `worker`, `chore` | `lease_by` | `lease_until` |
//! | `retention_lease` | `name` | `holder` | `expires_at` |
//! | `webhook_deliveries` | `id` | `claimed_by` | `next_attempt_at` |
//!
//! Where a lease is taken differs by table (a run's claim, a chore's due rule, the retention pass's interval, a
//! delivery's backoff), so taking one stays with each table's statements; each returns the [`Lease`] it took.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{
    DbTime, On, Result,
    dialect::{Sql, sql},
    run,
};

/// Who holds a row, and until when (database clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The process holding it: a daemon's id, or the retention pass's holder.
    pub holder: Uuid,
    /// When it lapses unless renewed.
    pub expires_at: DateTime<Utc>,
}

/// A table whose rows are leased: its columns, and its renewal and release in both dialects. A renewal binds
/// `$1` the holder, `$2` the seconds to extend by and `$3` (and `$4`) the key; a release `$1` the holder and `$2`
/// (and `$3`) the key.
#[derive(Debug, Clone, Copy)]
pub struct Leased {
    /// The table.
    pub table: &'static str,
    /// The holder's column.
    pub holder: &'static str,
    /// The expiry's column.
    pub expires_at: &'static str,
    renew: Sql,
    release: Sql,
}

/// A [`Leased`] table: the condition on its key as a renewal and as a release bind it, what else a renewable
/// row is (a run: still running), and what a release writes (parts of [`sql!`]).
macro_rules! leased {
    (
        $table:literal, renew $renew_key:literal, release $release_key:literal, $holder:literal, $expires:literal,
        live [$($live:tt)*], released [$($released:tt)*]
    ) => {
        Leased {
            table: $table,
            holder: $holder,
            expires_at: $expires,
            renew: sql!(
                "update ", $table, " set ", $expires, " = ", clock_plus(2), " where ", $renew_key, " and ", $holder,
                " = $1 and ", $expires, " > ", clock, $($live)* " returning ", $holder, ", ", $expires
            ),
            release: sql!(
                "update ", $table, " set ", $($released)* " where ", $release_key, " and ", $holder, " = $1"
            ),
        }
    };
}

/// A run its daemon executes: renewed while its worker runs; released by the run's end, which writes more.
pub const RUNS: Leased = leased!(
    "worker_runs", renew "id = $3", release "id = $2", "claimed_by", "lease_expires_at",
    live [" and state = 'running'",], released ["lease_expires_at = ", clock,]
);
/// A chore a daemon does: released when the chore is done, which records its end.
pub const CHORES: Leased = leased!(
    "worker_chores", renew "worker = $3 and chore = $4", release "worker = $2 and chore = $3", "lease_by",
    "lease_until", live [], released ["lease_by = null, lease_until = null, finished_at = ", now,]
);
/// The retention pass: renewed between batches; released when the pass ends, which starts the interval.
pub const RETENTION: Leased = leased!(
    "retention_lease", renew "name = $3", release "name = $2", "holder", "expires_at",
    live [], released ["expires_at = ", clock, ", last_finished_at = ", clock,]
);
/// A webhook delivery's attempt, leased by its claim (which pushes its next attempt a lease ahead) and ended by
/// the attempt's record; a release makes it due again at once.
pub const DELIVERIES: Leased = leased!(
    "webhook_deliveries", renew "id = $3", release "id = $2", "claimed_by", "next_attempt_at",
    live [" and state = 'pending'",], released ["next_attempt_at = ", clock,]
);

/// The key of a leased row.
#[derive(Debug, Clone, Copy)]
pub enum Key<'a> {
    /// A run's id.
    Id(Uuid),
    /// A named row (the retention lease).
    Name(&'a str),
    /// A chore: its worker and its kind.
    Chore(&'a str, &'a str),
    /// A delivery's number.
    Number(i64),
}

/// Extends `holder`'s lease of the row `key` of `table` to `ttl` from now (the statement's clock), if it still
/// holds it and it has not lapsed; the lease as renewed, or `None` when it no longer holds it.
pub async fn renew(
    on: impl Into<On<'_>>,
    table: &Leased,
    key: Key<'_>,
    holder: Uuid,
    ttl: Duration,
) -> Result<Option<Lease>> {
    let ttl = ttl.as_secs_f64();
    let row: Option<(Uuid, DbTime)> = run!(on, table.renew, |pool, sql| {
        let query = sqlx::query_as(sql).bind(holder).bind(ttl);
        let query = match key {
            Key::Id(id) => query.bind(id),
            Key::Name(name) => query.bind(name),
            Key::Chore(worker, chore) => query.bind(worker).bind(chore),
            Key::Number(n) => query.bind(n),
        };
        query.fetch_optional(pool).await
    })?;
    Ok(row.map(|(holder, expires_at)| Lease { holder, expires_at: expires_at.0 }))
}

/// Ends `holder`'s lease of the row `key` of `table` now, writing what the table records then; whether it held
/// it.
pub async fn release(on: impl Into<On<'_>>, table: &Leased, key: Key<'_>, holder: Uuid) -> Result<bool> {
    let released = run!(on, table.release, |pool, sql| {
        let query = sqlx::query(sql).bind(holder);
        let query = match key {
            Key::Id(id) => query.bind(id),
            Key::Name(name) => query.bind(name),
            Key::Chore(worker, chore) => query.bind(worker).bind(chore),
            Key::Number(n) => query.bind(n),
        };
        query.execute(pool).await.map(|r| r.rows_affected())
    })?;
    Ok(released > 0)
}
