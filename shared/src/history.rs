//! A worker's history over the last days, for the panel's charts and anyone asking how a worker has been doing:
//! how its runs ended, its success rate, the median and 95th percentile of its successful runs' durations, the
//! items it processed, and what its runs cost (CPU-hours, the 95th percentile of their peak memory, tokens and
//! money, also per item processed), per UTC calendar day. The window and the days are those of the database clock.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{
    DbError, RunState, Store,
    db::{
        self,
        history::{DayUsage, Durations, PeakRank, WINDOW},
    },
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

/// What the runs of a day (or of the whole window) cost, from the usage recorded on each when it ended
/// (docs/worker-protocol.md, "Usage"). Runs without a usage (never started, or ended by another daemon's recovery)
/// count for nothing here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct UsageFigures {
    /// The runs that ended with a usage recorded.
    pub runs: u64,
    /// Their CPU time (user and system), in hours.
    pub cpu_hours: f64,
    /// The 95th percentile (continuous, as `percentile_cont`) of their peak memory, in bytes: each run's tree's
    /// peak (`peak_memory_bytes`), else its largest single process's (`peak_rss_largest_process_bytes`); absent
    /// when none has one.
    pub peak_memory_p95_bytes: Option<u64>,
    /// The tokens their workers reported sending to a model.
    pub tokens_in: u64,
    /// The tokens their workers reported a model produced.
    pub tokens_out: u64,
    /// The money their workers reported, by currency (never added across currencies): one entry when every run
    /// that reported a cost agrees; empty when none did.
    pub cost: BTreeMap<String, f64>,
    /// The same per item processed, for the runs that reported items; absent when none did.
    pub per_item: Option<PerItem>,
}

/// What one item cost: a figure of the runs that reported items (succeeded or failed ones: skipped items were
/// not processed) divided by their items. Each figure divides only the runs that have it by their items, so a run
/// that reported no tokens does not thin out the tokens per item of the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct PerItem {
    /// The items processed by the runs with a usage that reported items.
    pub items: u64,
    /// CPU seconds per item.
    pub cpu_seconds: Option<f64>,
    /// Tokens in per item.
    pub tokens_in: Option<f64>,
    /// Tokens out per item.
    pub tokens_out: Option<f64>,
    /// Money per item, by currency.
    pub cost: BTreeMap<String, f64>,
}

/// The sums of the [`DayUsage`] rows of a day or of the window.
#[derive(Debug, Clone, Default)]
struct UsageSums {
    runs: i64,
    cpu_seconds: f64,
    tokens_in: f64,
    tokens_out: f64,
    cost: BTreeMap<String, f64>,
    items: f64,
    cpu_items: f64,
    item_cpu_seconds: f64,
    token_items: f64,
    item_tokens_in: f64,
    item_tokens_out: f64,
    cost_items: BTreeMap<String, f64>,
    item_cost: BTreeMap<String, f64>,
}

impl UsageSums {
    fn add(&mut self, row: &DayUsage) {
        let n = |v: Option<f64>| v.unwrap_or(0.0);
        self.runs += row.runs;
        self.cpu_seconds += n(row.cpu_seconds);
        self.tokens_in += n(row.tokens_in);
        self.tokens_out += n(row.tokens_out);
        self.items += n(row.items);
        self.cpu_items += n(row.cpu_items);
        self.item_cpu_seconds += n(row.item_cpu_seconds);
        self.token_items += n(row.token_items);
        self.item_tokens_in += n(row.item_tokens_in);
        self.item_tokens_out += n(row.item_tokens_out);
        if let (Some(currency), Some(cost)) = (&row.currency, row.cost) {
            *self.cost.entry(currency.clone()).or_default() += cost;
            *self.cost_items.entry(currency.clone()).or_default() += n(row.cost_items);
            *self.item_cost.entry(currency.clone()).or_default() += n(row.item_cost);
        }
    }

    fn figures(&self, peak_memory_p95_bytes: Option<u64>) -> UsageFigures {
        let per = |sum: f64, items: f64| (items > 0.0).then(|| sum / items);
        let per_item = (self.items > 0.0).then(|| PerItem {
            items: self.items.round() as u64,
            cpu_seconds: per(self.item_cpu_seconds, self.cpu_items),
            tokens_in: per(self.item_tokens_in, self.token_items),
            tokens_out: per(self.item_tokens_out, self.token_items),
            cost: self
                .item_cost
                .iter()
                .filter_map(|(currency, cost)| Some((currency.clone(), per(*cost, self.cost_items[currency])?)))
                .collect(),
        });
        UsageFigures {
            runs: u64::try_from(self.runs).unwrap_or_default(),
            cpu_hours: self.cpu_seconds / 3600.0,
            peak_memory_p95_bytes,
            tokens_in: self.tokens_in.round() as u64,
            tokens_out: self.tokens_out.round() as u64,
            cost: self.cost.clone(),
            per_item,
        }
    }
}

/// The 95th percentile of each day's (and the window's) peak memory, from the neighbours [`PeakRank`] gives:
/// `percentile_cont(0.95)` of `n` values lies `0.95 (n - 1)` of the way through them, between the ranks that
/// rounds down and up to.
fn peak_percentiles(ranks: &[PeakRank]) -> BTreeMap<String, u64> {
    let mut neighbours: BTreeMap<&str, (i64, BTreeMap<i64, f64>)> = BTreeMap::new();
    for rank in ranks {
        let entry = neighbours.entry(rank.day.as_str()).or_insert_with(|| (rank.runs, BTreeMap::new()));
        entry.1.insert(rank.nth, rank.peak);
    }
    neighbours
        .into_iter()
        .filter_map(|(day, (runs, peaks))| {
            let hundredths = 95 * (runs - 1);
            let (low, fraction) = (hundredths / 100, (hundredths % 100) as f64 / 100.0);
            let below = *peaks.get(&low)?;
            let above = if fraction > 0.0 { *peaks.get(&(low + 1))? } else { below };
            Some((day.to_owned(), (below + (above - below) * fraction).round() as u64))
        })
        .collect()
}

/// One UTC calendar day of a worker's history.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
    /// What they cost.
    pub usage: UsageFigures,
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
    /// What the runs that ended in the window cost.
    pub usage: UsageFigures,
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
        let (counts, durations, usage, peaks) = tokio::try_join!(
            async { self.db.retrying(|| db::history::per_day(&self.db, worker, from)).await },
            async { self.db.retrying(|| db::history::durations(&self.db, worker, from)).await },
            async { self.db.retrying(|| db::history::usage_per_day(&self.db, worker, from)).await },
            async { self.db.retrying(|| db::history::peak_percentile(&self.db, worker, from)).await },
        )?;
        let mut per_day: Vec<Day> = (0..days)
            .map(|i| Day {
                day: first + Duration::days(i64::from(i)),
                outcomes: Outcomes::default(),
                items: 0,
                usage: UsageFigures::default(),
            })
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
        let peaks = peak_percentiles(&peaks);
        let (mut window, mut sums) = (UsageSums::default(), BTreeMap::<&str, UsageSums>::new());
        for row in &usage {
            window.add(row);
            sums.entry(row.day.as_str()).or_default().add(row);
        }
        for day in &mut per_day {
            let key = day.day.format("%Y-%m-%d").to_string();
            if let Some(sums) = sums.get(key.as_str()) {
                day.usage = sums.figures(peaks.get(&key).copied());
            }
        }
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
            usage: window.figures(peaks.get(WINDOW).copied()),
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

    #[test]
    fn the_peak_percentile_interpolates_its_two_neighbours_as_percentile_cont_does() {
        let rank = |day: &str, runs: i64, nth: i64, peak: f64| PeakRank { day: day.into(), runs, nth, peak };
        // Ten runs: 0.95 × 9 = 8.55, between the ninth and the tenth peak.
        let ranks = [
            rank("2026-12-01", 10, 8, 900.0),
            rank("2026-12-01", 10, 9, 1000.0),
            rank("2026-12-02", 1, 0, 7.0),
            rank(WINDOW, 21, 19, 2000.0),
        ];
        let percentiles = peak_percentiles(&ranks);
        let tens: Vec<i64> = (1..=10).map(|i| i * 100).collect();
        assert_eq!(percentiles["2026-12-01"] as f64, percentile_cont(&tens, 0.95).map(f64::round).expect("some"));
        assert_eq!(percentiles["2026-12-02"], 7);
        // Twenty-one runs: 0.95 × 20 = 19 exactly, one neighbour.
        assert_eq!(percentiles[WINDOW], 2000);
    }
}
