//! A worker's history over the last days, for the panel's charts and anyone asking how a worker has been doing:
//! how its runs ended, its success rate, the median and 95th percentile of its successful runs' durations, and
//! the items it processed, per UTC calendar day. The window and the days are those of the database clock.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    DbError, RunState, Store,
    db::{self, history::Durations},
};

/// The longest window a history covers, in days.
pub const MAX_DAYS: u32 = 90;

/// How the runs of a day (or of the whole window) ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Outcomes {
    /// Every run that ended.
    pub runs: u64,
    /// Those that succeeded.
    pub succeeded: u64,
    /// Those that failed (an exit status, a crash, a timeout, …).
    pub failed: u64,
    /// Those a person cancelled.
    pub cancelled: u64,
    /// Those whose daemon stopped or was lost.
    pub interrupted: u64,
}

impl Outcomes {
    fn add(&mut self, state: RunState, runs: u64) {
        self.runs += runs;
        match state {
            RunState::Succeeded => self.succeeded += runs,
            RunState::Failed => self.failed += runs,
            RunState::Cancelled => self.cancelled += runs,
            RunState::Interrupted => self.interrupted += runs,
            // A run that has a finish time is over; these never have one.
            RunState::Queued | RunState::Running => {}
        }
    }
}

/// One UTC calendar day of a worker's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Day {
    /// The day, `YYYY-MM-DD` (UTC).
    #[schema(value_type = String, format = Date)]
    pub day: NaiveDate,
    /// How the runs that ended that day ended.
    #[serde(flatten)]
    pub outcomes: Outcomes,
    /// The items they processed: each run's result `processed`, or for a run without one its last progress
    /// `done`.
    pub items: i64,
}

/// The durations of the successful runs of the window, in whole milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct DurationFigures {
    /// How many successful runs have a duration.
    pub runs: u64,
    /// Their median (continuous percentile, as PostgreSQL's `percentile_cont(0.5)`); absent without runs.
    pub p50_ms: Option<i64>,
    /// Their 95th percentile (continuous); absent without runs.
    pub p95_ms: Option<i64>,
}

/// A worker's history over its last `days` days.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct WorkerHistory {
    /// The worker.
    pub worker: String,
    /// How many calendar days the window covers, today (UTC, database clock) included.
    pub days: u32,
    /// The window's start: midnight UTC of its first day.
    pub from: DateTime<Utc>,
    /// The database clock when it was read.
    pub now: DateTime<Utc>,
    /// How the runs that ended in the window ended.
    #[serde(flatten)]
    pub outcomes: Outcomes,
    /// Succeeded over every run that ended (cancelled and interrupted ones included), 0 to 1; absent when none
    /// ended.
    pub success_rate: Option<f64>,
    /// The durations of the successful runs.
    pub durations: DurationFigures,
    /// The items processed in the window.
    pub items: i64,
    /// Every day of the window, oldest first (days without runs included, so a chart has one bar per day).
    pub per_day: Vec<Day>,
}

/// The continuous percentile `p` (0 to 1) of `sorted`, as PostgreSQL's `percentile_cont` computes it.
pub fn percentile_cont(sorted: &[i64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let position = p * last as f64;
    let (low, high) = (position.floor(), position.ceil());
    let (a, b) = (sorted[low as usize] as f64, sorted[high as usize] as f64);
    Some(a + (b - a) * (position - low))
}

impl Store {
    /// The history of `worker` over the last `days` calendar days (UTC, today included; 1 to [`MAX_DAYS`]).
    /// The caller checks that the worker exists.
    pub(crate) async fn worker_history(&self, worker: &str, days: u32) -> Result<WorkerHistory, DbError> {
        let days = days.clamp(1, MAX_DAYS);
        let now = self.now().await?;
        let first = now.date_naive() - Duration::days(i64::from(days) - 1);
        let from = first.and_time(chrono::NaiveTime::MIN).and_utc();
        let (counts, durations) = tokio::try_join!(
            async { self.db.retrying(|| db::history::per_day(&self.db, worker, from)).await },
            async { self.db.retrying(|| db::history::durations(&self.db, worker, from)).await },
        )?;
        let mut per_day: Vec<Day> = (0..days)
            .map(|i| Day { day: first + Duration::days(i64::from(i)), outcomes: Outcomes::default(), items: 0 })
            .collect();
        let (mut outcomes, mut items) = (Outcomes::default(), 0.0);
        for count in counts {
            let runs = u64::try_from(count.runs).unwrap_or_default();
            outcomes.add(count.state, runs);
            items += count.items;
            let day = NaiveDate::parse_from_str(&count.day, "%Y-%m-%d").ok();
            if let Some(entry) = per_day.iter_mut().find(|d| Some(d.day) == day) {
                entry.outcomes.add(count.state, runs);
                entry.items += count.items.round() as i64;
            }
        }
        let durations = match durations {
            Durations::Percentiles { runs, p50, p95 } => DurationFigures {
                runs: u64::try_from(runs).unwrap_or_default(),
                p50_ms: p50.map(|v| v.round() as i64),
                p95_ms: p95.map(|v| v.round() as i64),
            },
            Durations::Ordered(sorted) => DurationFigures {
                runs: sorted.len() as u64,
                p50_ms: percentile_cont(&sorted, 0.5).map(|v| v.round() as i64),
                p95_ms: percentile_cont(&sorted, 0.95).map(|v| v.round() as i64),
            },
        };
        let success_rate = (outcomes.runs > 0).then(|| outcomes.succeeded as f64 / outcomes.runs as f64);
        Ok(WorkerHistory {
            worker: worker.to_owned(),
            days,
            from,
            now,
            outcomes,
            success_rate,
            durations,
            items: items.round() as i64,
            per_day,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_neighbours_as_postgres_does() {
        assert_eq!(percentile_cont(&[], 0.5), None);
        assert_eq!(percentile_cont(&[7], 0.95), Some(7.0));
        let tens: Vec<i64> = (1..=10).map(|i| i * 100).collect();
        assert_eq!(percentile_cont(&tens, 0.5), Some(550.0));
        assert_eq!(percentile_cont(&tens, 0.95).map(f64::round), Some(955.0));
        assert_eq!(percentile_cont(&tens, 0.0), Some(100.0));
        assert_eq!(percentile_cont(&tens, 1.0), Some(1000.0));
    }
}
