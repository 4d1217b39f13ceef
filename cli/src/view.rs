//! How the API's answers look to people: tables of workers, runs, daemons and health checks, and the detail of
//! one run. Times are local (as journalctl shows them), durations short (`1.5s`, `3m12s`).

use chrono::{DateTime, Local, Utc};
use scrinalia_wire::{ResolvedConfig, Run, RunState};
use serde_json::Value;

use crate::{
    table::{Cell, Style, Table, clip},
    wire::{DaemonsView, HealthView, RunDetail, WorkersView},
};

/// The columns of a run table.
pub const RUN_HEADERS: [&str; 7] = ["ID", "WORKER", "STATE", "REQUESTED", "TOOK", "BY", "OUTCOME"];

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

/// The colour of a health or daemon status word.
pub fn status_style(status: &str) -> Style {
    match status {
        "ok" | "active" => Style::Good,
        "degraded" | "draining" => Style::Warn,
        "down" => Style::Bad,
        _ => Style::Dim,
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

/// What a run came to, in a few words: progress while running, the result or the error afterwards.
pub fn outcome(run: &Run) -> String {
    let text = match run.state {
        RunState::Queued if run.cancel_requested_at.is_some() => "cancel requested".to_owned(),
        RunState::Queued => String::new(),
        RunState::Running => {
            let p = run.progress.as_ref().map(progress).unwrap_or_default();
            if run.cancel_requested_at.is_some() { format!("cancel requested {p}") } else { p }
        }
        RunState::Succeeded => run.result.as_ref().map(summarise).unwrap_or_default(),
        _ => run.error.clone().unwrap_or_default(),
    };
    clip(text.trim(), 72)
}

/// How long a run took, or has taken so far.
pub fn took(run: &Run) -> String {
    match (run.duration_ms, run.started_at) {
        (Some(ms), _) => duration(ms),
        (None, Some(started)) if run.state == RunState::Running => duration((Utc::now() - started).num_milliseconds()),
        _ => String::new(),
    }
}

/// One row of a run table.
pub fn run_cells(run: &Run) -> Vec<Cell> {
    vec![
        run.id.to_string().into(),
        run.worker.as_str().into(),
        Cell::styled(run.state.as_str(), state_style(run.state)),
        when(run.requested_at).into(),
        took(run).into(),
        run.requested_by.as_str().into(),
        outcome(run).into(),
    ]
}

/// A table of runs.
pub fn runs_table(runs: &[Run]) -> Table {
    let mut table = Table::new(&RUN_HEADERS);
    for run in runs {
        table.row(run_cells(run));
    }
    table
}

/// The engine and preset of a configuration, with the source when it is not the catalogue default.
pub fn engine(config: &ResolvedConfig) -> String {
    if !config.engine_configurable {
        return "external".to_owned();
    }
    let part = |r: &Option<scrinalia_wire::Resolved<String>>| r.as_ref().map(|r| (r.value.clone(), r.source));
    let (engine, preset) = (part(&config.engine), part(&config.preset));
    let text = match (&engine, &preset) {
        (Some((e, _)), Some((p, _))) => format!("{e}/{p}"),
        (Some((e, _)), None) => e.clone(),
        _ => return "-".to_owned(),
    };
    let overridden = [engine, preset].into_iter().flatten().any(|(_, s)| s == scrinalia_wire::Source::Override);
    if overridden { format!("{text} (override)") } else { text }
}

/// The table of `scrinalia workers`.
pub fn workers_table(view: &WorkersView) -> Table {
    let now = view.now.unwrap_or_else(Utc::now);
    let mut table = Table::new(&["WORKER", "ENGINE", "QUEUE", "IN FLIGHT", "LAST RUN"]);
    for w in &view.workers {
        let engine = match (&w.effective, &w.effective_error) {
            (Some(config), _) => Cell::from(engine(config)),
            (None, Some(_)) => Cell::styled("invalid override", Style::Bad),
            (None, None) => Cell::from("-"),
        };
        let queue = match &w.queue {
            None => Cell::styled("-", Style::Dim),
            Some(q) if q.error.is_some() => Cell::styled("error", Style::Bad),
            Some(q) => match (q.pending, &q.unmeasurable, q.done) {
                (Some(p), _, _) => Cell::from(p.to_string()),
                (None, Some(_), Some(d)) => Cell::styled(format!("? ({d} done)"), Style::Dim),
                _ => Cell::styled("?", Style::Dim),
            },
        };
        let in_flight = match &w.in_flight {
            Some(r) => Cell::styled(format!("{} {}", r.state, r.id), state_style(r.state)),
            None => Cell::from(""),
        };
        let last = match &w.last_finished {
            Some(r) => {
                let at = r.finished_at.unwrap_or(r.requested_at);
                let age = (now - at).num_milliseconds() as f64 / 1000.0;
                Cell::styled(format!("{} {}", r.state, ago(age)), state_style(r.state))
            }
            None => Cell::styled("never", Style::Dim),
        };
        table.row(vec![w.name.as_str().into(), engine, queue, in_flight, last]);
    }
    table
}

/// The table of `scrinalia daemons`.
pub fn daemons_table(view: &DaemonsView) -> Table {
    let mut table = Table::new(&["ID", "HOST", "PID", "STATE", "RUNS", "HEARTBEAT", "STARTED", "VERSION", "WORKERS"]);
    for d in &view.daemons {
        let workers = if d.workers.is_empty() { "all".to_owned() } else { d.workers.join(",") };
        table.row(vec![
            d.id.to_string().into(),
            d.host.as_str().into(),
            d.pid.to_string().into(),
            Cell::styled(d.state.as_str(), status_style(&d.state)),
            format!("{}/{}", d.runs_in_flight, d.capacity).into(),
            d.heartbeat_age_seconds.map(ago).unwrap_or_default().into(),
            d.started_at.map(when).unwrap_or_default().into(),
            d.version.as_str().into(),
            clip(&workers, 40).into(),
        ]);
    }
    table
}

/// The table of `scrinalia health`, after a line with the overall status.
pub fn health_text(view: &HealthView, colour: bool) -> String {
    let mut table = Table::new(&["CHECK", "STATUS", "LATENCY", "ERROR"]);
    for c in &view.checks {
        table.row(vec![
            c.name.as_str().into(),
            Cell::styled(c.status.as_str(), status_style(&c.status)),
            c.latency_ms.map(|ms| format!("{ms:.1}ms")).unwrap_or_default().into(),
            c.error.as_deref().unwrap_or_default().into(),
        ]);
    }
    let version = view.version.as_deref().map(|v| format!(" (API {v})")).unwrap_or_default();
    format!("status: {}{version}\n{}", status_style(&view.status).paint(&view.status, colour), table.render(colour))
}

/// The detail of one run, as `key  value` lines.
pub fn run_detail(detail: &RunDetail, colour: bool) -> String {
    let run = &detail.run;
    let mut lines: Vec<(&str, String)> = vec![
        ("run", run.id.to_string()),
        ("worker", run.worker.clone()),
        ("state", state_style(run.state).paint(run.state.as_str(), colour)),
        ("requested", format!("{} by {}", when(run.requested_at), run.requested_by)),
    ];
    let mut push = |key: &'static str, value: Option<String>| {
        if let Some(v) = value {
            lines.push((key, v));
        }
    };
    push("daemon", run.daemon_id.map(|d| d.to_string()));
    push("claimed", run.claimed_at.map(when));
    push("started", run.started_at.map(when));
    push("finished", run.finished_at.map(when));
    push("took", Some(took(run)).filter(|t| !t.is_empty()));
    push("exit code", run.exit_code.map(|c| c.to_string()));
    push("error", run.error.clone());
    push("progress", run.progress.as_ref().map(progress));
    push("result", run.result.as_ref().map(summarise));
    push(
        "cancel",
        run.cancel_requested_at
            .map(|t| format!("requested {} by {}", when(t), run.cancel_requested_by.as_deref().unwrap_or("?"))),
    );
    let c = &run.config;
    let sourced = |v: &str, s: scrinalia_wire::Source| {
        format!(
            "{v} ({})",
            serde_json::to_value(s).ok().and_then(|s| s.as_str().map(str::to_owned)).unwrap_or_default()
        )
    };
    push("engine", c.engine.as_ref().map(|e| sourced(&e.value, e.source)));
    push("preset", c.preset.as_ref().map(|p| sourced(&p.value, p.source)));
    push("model", c.model.clone());
    push("endpoint", c.endpoint.clone());
    for (name, value) in &c.options {
        let text = match &value.value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        push("option", Some(format!("{name} = {}", sourced(&text, value.source))));
    }
    push("timeout", Some(duration(i64::try_from(c.timeout_seconds).unwrap_or(i64::MAX / 1000).saturating_mul(1000))));
    push("trace", run.trace_context.clone());
    push("log", run.log_key.clone());
    push("reports", Some(detail.progress_history.len().to_string()).filter(|n| n != "0"));
    // Continuation lines of a value (an error with the last lines of stderr) are indented under it.
    lines.iter().map(|(k, v)| format!("{k:<10} {}\n", v.trim_end().replace('\n', "\n           "))).collect()
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
