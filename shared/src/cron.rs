//! Cron expressions for persisted schedules: parsing, with sentences for people when an expression is wrong,
//! and the next fire times in an IANA time zone.
//!
//! The matcher is written here over `chrono` and `chrono-tz` rather than taken from a crate: `croner` (4.x) has
//! time zones, seconds and DST rules close to these, but its errors ("Component error: …") do not name the
//! field at fault, so its whole grammar would have to be checked again here just to say what is wrong; `cron`
//! requires a seconds field and silently skips a local time that falls in a spring-forward gap; `saffron` is
//! unmaintained. What is left, a field-set matcher that skips whole months, days and hours that cannot match,
//! is small and tested below. Firing is coordinated through the database, not here: each schedule row holds its
//! next fire time, which the daemon computes with [`CronSchedule::next_after`] after each fire (and catches up
//! with [`CronSchedule::fires_between`]), so there is no in-memory ticker such as apalis-cron.
//!
//! # Grammar
//! Five fields, `minute hour day-of-month month day-of-week`, or six with a leading `second`. Each field is `*`
//! or a comma-separated list of values, ranges `a-b` and steps (`*/n`, `a-b/n`, or `a/n` meaning `a` to the end
//! of the field by `n`). Months may be written `JAN`–`DEC` and weekdays `SUN`–`SAT` (any case); weekday 0 and 7
//! are both Sunday, and a weekday range may end on Sunday (`FRI-SUN`, `5-7`). The shorthands are `@hourly`,
//! `@daily` (also `@midnight`), `@weekly` (Sunday 00:00), `@monthly` and `@yearly` (also `@annually`).
//!
//! # Day of month and day of week
//! As in Vixie cron: when both fields are restricted, a day matches if EITHER matches (`0 0 13 * FRI` fires on
//! every 13th and every Friday); when either is written starting with `*` (`*`, `*/2`), both must match.
//!
//! # Daylight saving
//! Fire times are instants; the fields are matched against the wall clock of the time zone.
//! - An expression whose hour field starts with `*` (`*`, `*/2`; a "sub-daily" one such as `*/15 * * * *`)
//!   follows the clock in real time: it fires at every instant whose wall-clock time matches. Wall-clock times
//!   in a spring-forward gap do not happen and are not fired; times in a fall-back hour happen twice and fire
//!   twice, so `*/15 * * * *` fires every 15 minutes of real time across both transitions, with no duplicate.
//! - Any other expression (specific hours, such as `30 2 * * *`) treats each wall-clock time as once a day:
//!   a time that does not exist (in the gap) fires at the first instant after the gap (03:00 local for 02:30
//!   in Europe/Berlin on 2026-03-29, which is 01:00 UTC), once however many of its times fell in the gap; a
//!   time that happens twice (fall back) fires once, at its first occurrence.
//!
//! A search starts strictly after the instant given: pass the exact fire time the previous call returned.

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

#[cfg(test)]
mod tests;

/// A parsed cron expression with its time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    zone: Tz,
    /// Bit `n` set when the field allows `n` (weekday 7 is stored as 0).
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Both day fields restricted: a day matches if either matches.
    either_day: bool,
    has_seconds: bool,
    /// The hour field starts with `*`: wall-clock times are followed in real time (see the module doc).
    sub_daily: bool,
}

/// Why an expression or a time zone was refused; the message is a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The expression is malformed; `field` names the field when one is at fault ("minute", "hour",
    /// "day-of-month", "month", "day-of-week", "second"), None for shape errors.
    #[error("{message}")]
    Expression {
        /// The field at fault, if one is.
        field: Option<&'static str>,
        /// What is wrong, as a sentence.
        message: String,
    },
    /// The time zone is not an IANA name.
    #[error("{message}")]
    TimeZone {
        /// What is wrong, as a sentence.
        message: String,
    },
}

/// One field of the grammar.
struct Field {
    name: &'static str,
    min: u32,
    /// The largest value accepted.
    max: u32,
    /// The largest value `*` and `a/n` reach (6 for day-of-week, where 7 is Sunday again).
    star_max: u32,
    /// Names of the values from `min` on, and how to call them in a message.
    names: &'static [&'static str],
    what: &'static str,
}

const SECOND: Field = Field { name: "second", min: 0, max: 59, star_max: 59, names: &[], what: "" };
const MINUTE: Field = Field { name: "minute", min: 0, max: 59, star_max: 59, names: &[], what: "" };
const HOUR: Field = Field { name: "hour", min: 0, max: 23, star_max: 23, names: &[], what: "" };
const DAY: Field = Field { name: "day-of-month", min: 1, max: 31, star_max: 31, names: &[], what: "" };
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    star_max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
    what: "a month name (JAN–DEC)",
};
const WEEKDAY: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    star_max: 6,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    what: "a day name (SUN–SAT)",
};

/// The longest a month can be, February counted in a leap year.
const MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
/// How far a search looks: every expression that can fire at all fires within one 400-year Gregorian cycle.
const SEARCH_DAYS: i64 = 146_097 + 366;
/// A bound on the steps of one search (each step crosses at most one offset change).
const MAX_STEPS: usize = 10_000;

fn invalid(expression: &str, field: Option<&'static str>, detail: String) -> CronError {
    CronError::Expression { field, message: format!("The cron expression \"{expression}\" is not valid: {detail}.") }
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// One value of `field`: a number in range or a name; `item` is the list item it is part of.
fn value(expression: &str, field: &Field, item: &str, token: &str) -> Result<u32, CronError> {
    let err = |detail: String| invalid(expression, Some(field.name), detail);
    if is_number(token) {
        return match token.parse::<u32>() {
            Ok(n) if (field.min..=field.max).contains(&n) => Ok(n),
            _ => Err(err(format!("{} {token} is out of range ({}–{})", field.name, field.min, field.max))),
        };
    }
    if let Some(i) = field.names.iter().position(|name| name.eq_ignore_ascii_case(token)) {
        return Ok(field.min + i as u32);
    }
    let what = if token == item {
        format!("{} \"{item}\"", field.name)
    } else {
        format!("in {} \"{item}\", \"{token}\"", field.name)
    };
    Err(err(if field.names.is_empty() {
        format!("{what} is not a number ({}–{})", field.min, field.max)
    } else {
        format!("{what} is neither a number ({}–{}) nor {}", field.min, field.max, field.what)
    }))
}

/// The set of values a field allows, and whether it was written starting with `*`.
fn parse_field(expression: &str, field: &Field, text: &str) -> Result<(u64, bool), CronError> {
    let err = |detail: String| invalid(expression, Some(field.name), detail);
    let mut set = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(err(format!("the {} field \"{text}\" has an empty list item", field.name)));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (item, None),
        };
        let by = match step {
            None => 1,
            Some(step) if !is_number(step) => {
                return Err(err(format!("the step \"{step}\" in {} \"{item}\" is not a number", field.name)));
            }
            Some(step) => match step.parse::<usize>() {
                Ok(0) => return Err(err(format!("the step in {} \"{item}\" is 0; it must be at least 1", field.name))),
                Ok(n) => n,
                Err(_) => usize::MAX,
            },
        };
        let (low, high) = if range == "*" {
            (field.min, field.star_max)
        } else if let Some((a, b)) = range.split_once('-') {
            let low = value(expression, field, item, a)?;
            let mut high = value(expression, field, item, b)?;
            if field.name == WEEKDAY.name && high == 0 && low > 0 {
                high = 7; // FRI-SUN
            }
            if low > high {
                return Err(err(format!(
                    "the {} range \"{range}\" runs backwards; write the smaller value first",
                    field.name
                )));
            }
            (low, high)
        } else {
            let low = value(expression, field, item, range)?;
            (low, if step.is_some() { field.star_max.max(low) } else { low })
        };
        for n in (low..=high).step_by(by) {
            set |= 1 << if field.name == WEEKDAY.name { n % 7 } else { n };
        }
    }
    Ok((set, text.starts_with('*')))
}

/// The first value at least `from` in `set`.
fn next_in(set: u64, from: u32) -> Option<u32> {
    let rest = set.checked_shr(from)?;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

fn has(set: u64, n: u32) -> bool {
    next_in(set, n) == Some(n)
}

impl CronSchedule {
    /// Parses `expression` in `time_zone`.
    pub fn parse(expression: &str, time_zone: &str) -> Result<Self, CronError> {
        let expression = expression.trim();
        let expanded = if expression.starts_with('@') {
            match expression.to_ascii_lowercase().as_str() {
                "@hourly" => "0 * * * *",
                "@daily" | "@midnight" => "0 0 * * *",
                "@weekly" => "0 0 * * 0",
                "@monthly" => "0 0 1 * *",
                "@yearly" | "@annually" => "0 0 1 1 *",
                _ => {
                    let message = format!(
                        "\"{expression}\" is not a shorthand; use @hourly, @daily, @weekly, @monthly or @yearly."
                    );
                    return Err(CronError::Expression { field: None, message });
                }
            }
        } else {
            expression
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let has_seconds = fields.len() == 6;
        let (second, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                let needs = "5 (minute hour day-of-month month day-of-week) or 6 with a leading seconds field";
                let message = match n {
                    0 => format!("The cron expression is empty; it needs {needs}."),
                    1 => format!("The cron expression \"{expression}\" has 1 field; it needs {needs}."),
                    n => format!("The cron expression \"{expression}\" has {n} fields; it needs {needs}."),
                };
                return Err(CronError::Expression { field: None, message });
            }
        };
        let (seconds, _) = parse_field(expression, &SECOND, second)?;
        let (minutes, _) = parse_field(expression, &MINUTE, rest[0])?;
        let (hours, sub_daily) = parse_field(expression, &HOUR, rest[1])?;
        let (days, any_day) = parse_field(expression, &DAY, rest[2])?;
        let (months, _) = parse_field(expression, &MONTH, rest[3])?;
        let (weekdays, any_weekday) = parse_field(expression, &WEEKDAY, rest[4])?;
        let either_day = !any_day && !any_weekday;
        // Every weekday falls on every date over the years, so only a date that no allowed month has can make a
        // schedule never fire; with both day fields restricted the weekday alone suffices.
        let some_date =
            (1..=12u32).any(|m| has(months, m) && days & ((1u64 << (MONTH_DAYS[m as usize - 1] + 1)) - 1) != 0);
        if !either_day && !some_date {
            let message = format!(
                "The cron expression \"{expression}\" never fires: none of the months it allows has a day-of-month \
                 it allows."
            );
            return Err(CronError::Expression { field: Some(DAY.name), message });
        }
        let time_zone = time_zone.trim();
        let zone: Tz = time_zone.parse().map_err(|_| CronError::TimeZone {
            message: format!("\"{time_zone}\" is not an IANA time zone (for example \"Europe/Berlin\" or \"UTC\")."),
        })?;
        Ok(Self {
            expression: expression.to_owned(),
            zone,
            seconds,
            minutes,
            hours,
            days,
            months,
            weekdays,
            either_day,
            has_seconds,
            sub_daily,
        })
    }

    /// The expression as given (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The IANA name of the time zone.
    pub fn time_zone(&self) -> &str {
        self.zone.name()
    }

    /// Whether the expression has a seconds field (fires more often than once a minute is possible).
    pub fn has_seconds(&self) -> bool {
        self.has_seconds
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut t = after.with_nanosecond(0)?.checked_add_signed(Duration::seconds(1))?;
        for _ in 0..MAX_STEPS {
            let offset = self.offset_at(t);
            let local = t.naive_utc().checked_add_signed(offset)?;
            if !self.sub_daily {
                // The first instant after a spring-forward gap fires for the times in the gap.
                let before = self.offset_at(t - Duration::seconds(1));
                if before < offset && self.next_local(t.naive_utc() + before, local).is_some() {
                    return Some(t);
                }
            }
            let limit = local.checked_add_signed(Duration::days(SEARCH_DAYS))?;
            let next = self.next_local(local, limit)?;
            let candidate = (next - offset).and_utc();
            if let Some(change) = self.first_change(t, candidate, offset) {
                t = change; // The offset changes before `candidate`: go on from there with the new one.
                continue;
            }
            if !self.sub_daily
                && let LocalResult::Ambiguous(first, second) = self.zone.from_local_datetime(&next)
                && second.with_timezone(&Utc) == candidate
            {
                // A repeated wall-clock time: skip to the end of the repeated hour, whose first pass fired.
                let first = first.with_timezone(&Utc);
                let repeat = candidate - first;
                t = self.first_change(first, candidate, self.offset_at(first)).map_or(candidate, |c| c + repeat);
                t = t.max(candidate + Duration::seconds(1));
                continue;
            }
            return Some(candidate);
        }
        None
    }

    /// The first `n` fire times strictly after `after` (for previews).
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |&t| self.next_after(t)).take(n).collect()
    }

    /// The fire times after `from_exclusive` up to and including `to_inclusive`, at most `limit` of them (the
    /// earliest), for catching up on missed fires.
    pub fn fires_between(
        &self,
        from_exclusive: DateTime<Utc>,
        to_inclusive: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(from_exclusive), |&t| self.next_after(t))
            .take_while(|&t| t <= to_inclusive)
            .take(limit)
            .collect()
    }

    /// The zone's offset from UTC at `t`.
    fn offset_at(&self, t: DateTime<Utc>) -> Duration {
        Duration::seconds(self.zone.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc().into())
    }

    /// The first instant in `(from, to]` whose offset is not `offset` (the zone's offset at `from`).
    fn first_change(&self, from: DateTime<Utc>, to: DateTime<Utc>, offset: Duration) -> Option<DateTime<Utc>> {
        let mut low = from;
        while low < to {
            // Offsets are probed a day apart, so a change is found even when the offset at `to` is the same.
            let high = (low + Duration::days(1)).min(to);
            if self.offset_at(high) != offset {
                let (mut same, mut changed) = (low, high);
                while (changed - same).num_seconds() > 1 {
                    let middle = same + Duration::seconds((changed - same).num_seconds() / 2);
                    if self.offset_at(middle) == offset { same = middle } else { changed = middle }
                }
                return Some(changed);
            }
            low = high;
        }
        None
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        let day = has(self.days, date.day());
        let weekday = has(self.weekdays, date.weekday().num_days_from_sunday());
        if self.either_day { day || weekday } else { day && weekday }
    }

    /// The first wall-clock time at or after `from` and before `until` that the fields allow, skipping whole
    /// months, days, hours and minutes that cannot match.
    fn next_local(&self, from: NaiveDateTime, until: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut date = from.date();
        let (mut hour, mut minute, mut second) = (from.hour(), from.minute(), from.second());
        while date <= until.date() {
            if !has(self.months, date.month()) {
                let (year, month) =
                    if date.month() == 12 { (date.year() + 1, 1) } else { (date.year(), date.month() + 1) };
                date = NaiveDate::from_ymd_opt(year, month, 1)?;
                (hour, minute, second) = (0, 0, 0);
                continue;
            }
            if !self.day_matches(date) {
                date = date.succ_opt()?;
                (hour, minute, second) = (0, 0, 0);
                continue;
            }
            let Some(h) = next_in(self.hours, hour) else {
                date = date.succ_opt()?;
                (hour, minute, second) = (0, 0, 0);
                continue;
            };
            if h != hour {
                (hour, minute, second) = (h, 0, 0);
            }
            let Some(m) = next_in(self.minutes, minute) else {
                (hour, minute, second) = (hour + 1, 0, 0);
                continue;
            };
            if m != minute {
                (minute, second) = (m, 0);
            }
            let Some(s) = next_in(self.seconds, second) else {
                (minute, second) = (minute + 1, 0);
                continue;
            };
            let found = date.and_hms_opt(hour, minute, s)?;
            return (found < until).then_some(found);
        }
        None
    }
}
