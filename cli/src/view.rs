//! How the API's answers look to people: tables of workers, runs, daemons and health checks, and the detail of
//! one worker or run. Times are local (as journalctl shows them), durations short (`1.5s`, `3m12s`). The words
//! every view shares (times, durations, states, `key  value` lines) are here; each kind of thing shown has its
//! own module, and everything is re-exported so that callers need not know which.

mod run;
mod service;
mod worker;

use chrono::{DateTime, Local, Utc};
use scrinalia_wire::{RunState, Waiting};
use serde_json::Value;

pub use self::{
    run::{RUN_HEADERS, lineage, outcome, reported_text, run_cells, run_detail, runs_table, took},
    service::{daemons_table, health_text, status_style},
    worker::{
        engine, option_declaration, readiness_sentence, readiness_word, worker_detail, workers_notes, workers_table,
    },
};
use crate::table::Style;

/// The colour of a run state.
pub fn state_style(state: RunState) -> Style {
    match state {
        RunState::Queued => Style::Warn,
        RunState::Running => Style::Busy,
        RunState::Succeeded => Style::Good,
        RunState::Failed | RunState::Interrupted => Style::Bad,
        RunState::Cancelled => Style::Dim,
    }
}

/// A time in the local zone, to the second.
pub fn when(t: DateTime<Utc>) -> String {
    t.with_timezone(&Local).format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A duration in milliseconds, short: `850ms`, `1.5s`, `3m12s`, `2h05m`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// An age in seconds, as `3s ago`.
pub fn ago(seconds: f64) -> String {
    let ms = (seconds * 1000.0) as i64;
    match ms {
        ..1_000 => "just now".to_owned(),
        1_000..60_000 => format!("{}s ago", ms / 1000),
        _ => format!("{} ago", duration(ms)),
    }
}

/// A JSON object as `k=v k=v` (strings unquoted), anything else as JSON.
pub fn summarise(value: &Value) -> String {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Progress as `done/total message`.
pub fn progress(value: &Value) -> String {
    let (done, total) = (value.get("done"), value.get("total"));
    let count = match (done, total) {
        (Some(d), Some(t)) => format!("{d}/{t}"),
        (Some(d), None) => d.to_string(),
        _ => return summarise(value),
    };
    match value.get("message").and_then(Value::as_str) {
        Some(m) => format!("{count} {m}"),
        None => count,
    }
}

/// The words of a source (`default`, `override`, …).
fn source_word(source: scrinalia_wire::Source) -> String {
    serde_json::to_value(source).ok().and_then(|s| s.as_str().map(str::to_owned)).unwrap_or_default()
}

/// A JSON value as text, strings unquoted.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Why something waits, for people: the sentence, then its code for a script to match (`… (no_daemon)`).
pub fn waiting_text(waiting: &Waiting) -> String {
    let code = serde_json::to_value(waiting.code).ok().and_then(|c| c.as_str().map(str::to_owned));
    format!("{} ({})", waiting.message, code.as_deref().unwrap_or("?"))
}

/// Lines of `key  value`, continuation lines of a value indented under it.
pub fn key_lines(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0).max(10);
    let indent = format!("\n{}", " ".repeat(width + 1));
    lines.iter().map(|(k, v)| format!("{k:<width$} {}\n", v.trim_end().replace('\n', &indent))).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn durations_and_ages_are_short() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(1_500), "1.5s");
        assert_eq!(duration(192_000), "3m12s");
        assert_eq!(duration(7_500_000), "2h05m");
        assert_eq!(ago(0.2), "just now");
        assert_eq!(ago(3.7), "3s ago");
        assert_eq!(ago(200.0), "3m20s ago");
    }

    #[test]
    fn progress_and_results_read_as_words() {
        assert_eq!(progress(&json!({"done": 10, "total": 120, "message": "batch 2"})), "10/120 batch 2");
        assert_eq!(summarise(&json!({"processed": 118, "failed": 2})), "failed=2 processed=118");
    }
}
