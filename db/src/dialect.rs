//! Where PostgreSQL and SQLite speak differently, and how one statement text serves both.
//!
//! A statement is written once with [`sql!`]: string literals, plus the few *fragments* whose spelling differs
//! (the clock, intervals, durations, a UUID or a time as text, a JSON list as a table). `sql!` renders the
//! statement once per dialect at compile time, so each backend runs a `&'static str` that sqlx prepares once
//! per connection. Parameters are `$1`, `$2`, … on both: sqlx binds SQLite's `$N` by its number.
//!
//! Times are bound as [`DbTime`]: a `timestamptz` on PostgreSQL, and on SQLite the same ISO-8601 text with
//! milliseconds that the database clock writes (`strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`), so that times compare
//! correctly as text there.

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type, encode::IsNull, error::BoxDynError};

/// One statement in both dialects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql {
    /// The PostgreSQL text.
    pub postgres: &'static str,
    /// The SQLite text.
    pub sqlite: &'static str,
}

/// A statement written once: `sql!("select ", now, " as t where x = $1")`. Parts are string literals,
/// macros that take the dialect first (`run_columns!()` is called as `run_columns!(postgres;)` and
/// `run_columns!(sqlite;)`), and the fragment words of [`fragment!`], with arguments where they take some.
macro_rules! sql {
    ($($part:tt)+) => {
        $crate::dialect::Sql {
            postgres: $crate::dialect::sql_text!(postgres; [] $($part)+),
            sqlite: $crate::dialect::sql_text!(sqlite; [] $($part)+),
        }
    };
}
pub(crate) use sql;

/// Renders the parts of [`sql!`] for one dialect, left to right, into one `concat!`.
macro_rules! sql_text {
    ($d:ident; [$($done:tt)*]) => { concat!($($done)*) };
    ($d:ident; [$($done:tt)*] , $($rest:tt)*) => { $crate::dialect::sql_text!($d; [$($done)*] $($rest)*) };
    ($d:ident; [$($done:tt)*] $text:literal $($rest:tt)*) => {
        $crate::dialect::sql_text!($d; [$($done)* $text,] $($rest)*)
    };
    ($d:ident; [$($done:tt)*] $mac:ident ! ($($args:tt)*) $($rest:tt)*) => {
        $crate::dialect::sql_text!($d; [$($done)* $mac!($d; $($args)*),] $($rest)*)
    };
    ($d:ident; [$($done:tt)*] $word:ident ($($args:tt)*) $($rest:tt)*) => {
        $crate::dialect::sql_text!($d; [$($done)* $crate::dialect::fragment!($d; $word($($args)*)),] $($rest)*)
    };
    ($d:ident; [$($done:tt)*] $word:ident $($rest:tt)*) => {
        $crate::dialect::sql_text!($d; [$($done)* $crate::dialect::fragment!($d; $word),] $($rest)*)
    };
}
pub(crate) use sql_text;

/// The fragments whose spelling differs, each with its PostgreSQL and its SQLite text side by side. `$n` names a
/// bound parameter by its number; column arguments are SQL expressions.
macro_rules! fragment {
    // The database clock.
    (postgres; now) => { "now()" };
    (sqlite; now) => { "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')" };
    // The clock as the statement runs, not at the transaction's start (SQLite reads it per statement anyway).
    (postgres; clock) => { "clock_timestamp()" };
    (sqlite; clock) => { "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')" };
    // The clock plus or minus parameter `$n`, a number of seconds.
    (postgres; now_plus($n:literal)) => { concat!("(now() + make_interval(secs => $", $n, "))") };
    (sqlite; now_plus($n:literal)) => { concat!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || $", $n, " || ' seconds')") };
    // The statement's clock plus parameter `$n` seconds: a lease that starts when it is written, however long
    // the transaction waited before.
    (postgres; clock_plus($n:literal)) => { concat!("(clock_timestamp() + make_interval(secs => $", $n, "))") };
    (sqlite; clock_plus($n:literal)) => { concat!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || $", $n, " || ' seconds')") };
    (postgres; now_minus($n:literal)) => { concat!("(now() - make_interval(secs => $", $n, "))") };
    (sqlite; now_minus($n:literal)) => { concat!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $", $n, " || ' seconds')") };
    // A time column plus parameter `$n`, a number of seconds.
    (postgres; plus_secs($c:ident, $n:literal)) => { concat!("(", stringify!($c), " + make_interval(secs => $", $n, "))") };
    (sqlite; plus_secs($c:ident, $n:literal)) => {
        concat!("strftime('%Y-%m-%dT%H:%M:%fZ', ", stringify!($c), ", '+' || $", $n, " || ' seconds')")
    };
    // Seconds from a time to the clock, as a double (negative when the time is ahead).
    (postgres; seconds_since($($e:tt)+)) => { concat!("extract(epoch from now() - (", stringify!($($e)+), "))::float8") };
    (sqlite; seconds_since($($e:tt)+)) => { concat!("((julianday('now') - julianday(", stringify!($($e)+), ")) * 86400.0)") };
    // Whole milliseconds from a time to the clock.
    (postgres; ms_since($($e:tt)+)) => {
        concat!("(extract(epoch from now() - (", stringify!($($e)+), ")) * 1000)::bigint")
    };
    (sqlite; ms_since($($e:tt)+)) => {
        concat!("cast(round((julianday('now') - julianday(", stringify!($($e)+), ")) * 86400000) as integer)")
    };
    // A UUID column as its hyphenated text (SQLite keeps UUIDs as 16-byte blobs).
    (postgres; uuid_text($c:ident)) => { concat!(stringify!($c), "::text") };
    (sqlite; uuid_text($c:ident)) => {
        concat!(
            "lower(substr(hex(", stringify!($c), "), 1, 8) || '-' || substr(hex(", stringify!($c), "), 9, 4) || '-' || ",
            "substr(hex(", stringify!($c), "), 13, 4) || '-' || substr(hex(", stringify!($c), "), 17, 4) || '-' || ",
            "substr(hex(", stringify!($c), "), 21))"
        )
    };
    // A time column as RFC 3339 text in UTC with milliseconds (what SQLite already stores).
    (postgres; time_text($c:ident)) => {
        concat!("to_char(", stringify!($c), " at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
    };
    (sqlite; time_text($c:ident)) => { stringify!($c) };
    // The end of a query that locks the rows it picks, skipping those another transaction holds (SQLite
    // serialises writers, so it has nothing to skip).
    (postgres; skip_locked) => { " for update skip locked" };
    (sqlite; skip_locked) => { "" };
    // Parameter `$n`, a JSON list of strings, as a table `alias` with one column `value`.
    (postgres; json_list($n:literal, $alias:ident)) => {
        concat!("jsonb_array_elements_text($", $n, "::jsonb) as ", stringify!($alias), "(value)")
    };
    (sqlite; json_list($n:literal, $alias:ident)) => { concat!("json_each($", $n, ") as ", stringify!($alias)) };
}
pub(crate) use fragment;

/// A time bound to a statement in the form the backend compares: `timestamptz` on PostgreSQL, the database
/// clock's text on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbTime(pub DateTime<Utc>);

impl DbTime {
    /// The text SQLite stores.
    pub(crate) fn text(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

impl Type<Postgres> for DbTime {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl Encode<'_, Postgres> for DbTime {
    fn encode_by_ref(&self, buf: &mut sqlx::postgres::PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<'_, Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl Type<Sqlite> for DbTime {
    fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }
}

impl<'q> Encode<'q, Sqlite> for DbTime {
    fn encode_by_ref(&self, buf: &mut <Sqlite as sqlx::Database>::ArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(self.text(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for DbTime {
    fn decode(value: sqlx::sqlite::SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<'r, Sqlite>>::decode(value)?;
        Ok(Self(DateTime::parse_from_rfc3339(text)?.with_timezone(&Utc)))
    }
}

impl<'r> Decode<'r, Postgres> for DbTime {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(<DateTime<Utc> as Decode<'r, Postgres>>::decode(value)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_text_renders_per_dialect() {
        macro_rules! cols {
            ($d:ident; $n:literal) => {
                concat!("a, ", $crate::dialect::fragment!($d; now_minus($n)), " as b")
            };
        }
        const S: Sql = sql!("select ", cols!(2), ", ", seconds_since(x), " from t where id = $1 and at < ", now);
        assert_eq!(
            S.postgres,
            "select a, (now() - make_interval(secs => $2)) as b, extract(epoch from now() - (x))::float8 from t \
             where id = $1 and at < now()"
        );
        assert_eq!(
            S.sqlite,
            "select a, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $2 || ' seconds') as b, \
             ((julianday('now') - julianday(x)) * 86400.0) from t where id = $1 and at < \
             strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
        );
    }
}
