//! How much of a run's output is kept: a cap per run, so that one chatty worker cannot fill the log store's disk
//! (or bucket). The daemon applies it while it writes; the API reads whatever is stored.

use serde::{Deserialize, Serialize};

/// The smallest cap accepted: below it the kept head and tail would be a few lines each.
pub const MIN_LOG_CAP: u64 = 64 * 1024;

/// `[logs]`: run logs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// The most bytes of output stored per run: the first half (the head) and the last half (a rolling tail);
    /// what falls between is dropped and the log says how much.
    pub max_bytes_per_run: u64,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self { max_bytes_per_run: 64 * 1024 * 1024 }
    }
}

/// What is wrong with the `[logs]` settings, each with its full key.
pub fn log_problems(settings: &LogSettings) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if settings.max_bytes_per_run < MIN_LOG_CAP {
        problems.push(("logs.max_bytes_per_run", format!("must be at least {MIN_LOG_CAP} (64 KiB)")));
    }
    problems
}
