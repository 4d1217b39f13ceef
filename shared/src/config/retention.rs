//! `[retention]`: how long the ledger keeps finished runs (with their progress history and logs) and gone
//! daemons, so that years of history do not grow the tables and the log store without bound. The daemons prune by
//! these settings (see `crate::retention`); the defaults keep months of history and the last runs of each worker.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[retention]`: what the daemons prune, and how often.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// Whether the daemons prune at all.
    pub enabled: bool,
    /// Days a succeeded run is kept after it finished.
    pub succeeded_days: u32,
    /// Days a failed or interrupted run is kept after it finished.
    pub failed_days: u32,
    /// Days a cancelled run is kept after it finished.
    pub cancelled_days: u32,
    /// The newest finished runs of each worker kept whatever their age.
    pub keep_last_per_worker: u32,
    /// The most progress reports kept per finished run (the first and the last always among them).
    pub progress_points: u32,
    /// Days a gone daemon's row is kept after it stopped or was last heard of.
    pub gone_daemons_days: u32,
    /// Rows per batch, each batch its own short transaction.
    pub batch_size: u32,
    /// Seconds between prune passes, across all daemons.
    pub interval_seconds: u64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            succeeded_days: 90,
            failed_days: 365,
            cancelled_days: 90,
            keep_last_per_worker: 100,
            progress_points: 50,
            gone_daemons_days: 7,
            batch_size: 500,
            interval_seconds: 300,
        }
    }
}

impl RetentionSettings {
    /// The time between passes.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval_seconds)
    }
}

/// What is wrong with the `[retention]` settings, each with its full key. Negative numbers are refused when the
/// file is read (the fields are unsigned); zero is refused here, since a zero age or batch would prune everything
/// or nothing.
pub fn retention_problems(s: &RetentionSettings) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let days = [
        ("retention.succeeded_days", s.succeeded_days),
        ("retention.failed_days", s.failed_days),
        ("retention.cancelled_days", s.cancelled_days),
        ("retention.gone_daemons_days", s.gone_daemons_days),
    ];
    for (key, value) in days {
        if value == 0 {
            problems.push((key, "must be at least 1 day".to_owned()));
        }
    }
    if s.progress_points < 2 {
        problems.push(("retention.progress_points", "must be at least 2 (the first and the last report)".to_owned()));
    }
    if s.batch_size == 0 || s.batch_size > 100_000 {
        problems.push(("retention.batch_size", "must be between 1 and 100000".to_owned()));
    }
    if s.interval_seconds == 0 {
        problems.push(("retention.interval_seconds", "must be at least 1 second".to_owned()));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zeroes_are_named() {
        assert!(retention_problems(&RetentionSettings::default()).is_empty());
        let zero = RetentionSettings {
            succeeded_days: 0,
            progress_points: 1,
            batch_size: 0,
            interval_seconds: 0,
            ..RetentionSettings::default()
        };
        let keys: Vec<_> = retention_problems(&zero).into_iter().map(|p| p.0).collect();
        assert_eq!(
            keys,
            [
                "retention.succeeded_days",
                "retention.progress_points",
                "retention.batch_size",
                "retention.interval_seconds"
            ]
        );
    }
}
