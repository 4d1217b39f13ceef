//! How the API's answers look to people: tables of workers, runs, daemons and health checks, and the detail of
//! one worker or run. Times are local (as journalctl shows them), durations short (`1.5s`, `3m12s`).

use chrono::{DateTime, Local, Utc};
use scrinalia_wire::{ResolvedConfig, Run, RunState};
use serde_json::Value;

use crate::{
    table::{Cell, Style, Table, clip},
    wire::{DaemonsView, HealthView, OptionView, QueueView, ReadinessView, RunDetail, WorkerView, WorkersView},
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

/// A worker's readiness in a word or two, with its colour.
pub fn readiness_word(readiness: Option<&ReadinessView>) -> Cell {
    match readiness.map(|r| r.ready) {
        None => Cell::styled("unchecked", Style::Dim),
        Some(Some(true)) => Cell::styled("ready", Style::Good),
        Some(Some(false)) => Cell::styled("not ready", Style::Bad),
        Some(None) => Cell::styled("check failed", Style::Warn),
    }
}

/// What a worker's readiness says beyond its word: what is missing, or why the check failed.
pub fn readiness_sentence(readiness: &ReadinessView) -> Option<String> {
    match readiness.ready {
        Some(true) => None,
        Some(false) => Some(readiness.reason.clone().unwrap_or_else(|| "its check says it is not ready".to_owned())),
        None => Some(readiness.error.clone().unwrap_or_else(|| "its check did not answer".to_owned())),
    }
}

/// A queue measurement in a few words.
fn queue_cell(queue: Option<&QueueView>) -> Cell {
    match queue {
        None => Cell::styled("-", Style::Dim),
        Some(q) if q.error.is_some() => Cell::styled("error", Style::Bad),
        Some(q) => match (q.pending, &q.unmeasurable, q.done) {
            (Some(p), _, _) => Cell::from(p.to_string()),
            (None, Some(_), Some(d)) => Cell::styled(format!("? ({d} done)"), Style::Dim),
            _ => Cell::styled("?", Style::Dim),
        },
    }
}

/// The table of `scrinalia workers`.
pub fn workers_table(view: &WorkersView) -> Table {
    let now = view.now.unwrap_or_else(Utc::now);
    let mut table = Table::new(&["WORKER", "ENGINE", "READY", "QUEUE", "IN FLIGHT", "LAST RUN"]);
    for w in &view.workers {
        let engine = match (&w.effective, &w.effective_error) {
            (Some(config), _) => Cell::from(engine(config)),
            (None, Some(_)) => Cell::styled("invalid override", Style::Bad),
            (None, None) => Cell::from("-"),
        };
        let queue = queue_cell(w.queue.as_ref());
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
        table.row(vec![w.name.as_str().into(), engine, readiness_word(w.readiness.as_ref()), queue, in_flight, last]);
    }
    table
}

/// The lines under the table of `scrinalia workers`: what a worker that is not ready lacks, and each place where
/// a catalogue entry and its code disagree (a table cell would cut those sentences short).
pub fn workers_notes(view: &WorkersView) -> Vec<String> {
    let mut notes = Vec::new();
    for w in &view.workers {
        if let Some(sentence) = w.readiness.as_ref().and_then(readiness_sentence) {
            let word = readiness_word(w.readiness.as_ref()).text;
            notes.push(format!("{}: {word}: {sentence}", w.name));
        }
        for d in &w.disagreements {
            notes.push(format!("{}: disagrees: {d}", w.name));
        }
    }
    notes
}

/// An option's declaration in a few words: `integer, 0 to 255, default 0, one of 3, 5, 8`.
pub fn option_declaration(o: &OptionView) -> String {
    let mut parts = vec![if o.kind.is_empty() { "?".to_owned() } else { o.kind.clone() }];
    match (&o.minimum, &o.maximum) {
        (Some(min), Some(max)) => parts.push(format!("{min} to {max}")),
        (Some(min), None) => parts.push(format!("at least {min}")),
        (None, Some(max)) => parts.push(format!("at most {max}")),
        (None, None) => {}
    }
    if let Some(choices) = o.choices.as_ref().filter(|c| !c.is_empty()) {
        parts.push(format!("one of {}", choices.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")));
    }
    match &o.default {
        Some(d) => parts.push(format!("default {d}")),
        None => parts.push("the worker's own default".to_owned()),
    }
    parts.join(", ")
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

/// Lines of `key  value`, continuation lines of a value indented under it.
pub fn key_lines(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0).max(10);
    let indent = format!("\n{}", " ".repeat(width + 1));
    lines.iter().map(|(k, v)| format!("{k:<width$} {}\n", v.trim_end().replace('\n', &indent))).collect()
}

/// The detail of one worker (`scrinalia worker NAME`), as `key  value` lines.
pub fn worker_detail(w: &WorkerView, colour: bool) -> String {
    let mut lines: Vec<(&str, String)> = Vec::new();
    let title = w.title.as_deref().map(|t| format!(" ({t})")).unwrap_or_default();
    lines.push(("worker", format!("{}{title}", w.name)));
    if let Some(d) = &w.description {
        lines.push(("about", d.clone()));
    }
    let ready = readiness_word(w.readiness.as_ref());
    let mut readiness = ready.style.paint(&ready.text, colour);
    if let Some(r) = &w.readiness {
        if let Some(sentence) = readiness_sentence(r) {
            readiness = format!("{readiness}: {sentence}");
        }
        let by = r.checked_by.map(|d| format!(" by daemon {d}")).unwrap_or_default();
        if let Some(age) = r.age_seconds {
            readiness = format!("{readiness} (checked {}{by})", ago(age));
        }
    }
    lines.push(("ready", readiness));
    match &w.described {
        Some(d) => {
            if let Some(at) = d.described_at {
                let by = d.described_by.map(|id| format!(" by daemon {id}")).unwrap_or_default();
                let took = d.took_ms.map(|ms| format!(" in {}", duration(ms))).unwrap_or_default();
                lines.push(("described", format!("{}{by}{took}", when(at))));
            } else {
                lines.push(("described", "never: the catalogue's declarations apply".to_owned()));
            }
            if let Some(error) = &d.error {
                let at = d.attempted_at.map(|t| format!(" at {}", when(t))).unwrap_or_default();
                lines.push(("describe", Style::Bad.paint(&format!("failed{at}: {error}"), colour)));
            }
            if !d.command.is_empty() {
                lines.push(("command", d.command.join(" ")));
            }
        }
        None => lines.push(("described", "not yet: the catalogue's declarations apply".to_owned())),
    }
    for d in &w.disagreements {
        lines.push(("disagrees", Style::Warn.paint(d, colour)));
    }
    match (&w.effective, &w.effective_error) {
        (Some(c), _) => {
            if let Some(e) = &c.engine {
                lines.push(("engine", format!("{} ({})", e.value, source_word(e.source))));
            }
            if let Some(p) = &c.preset {
                lines.push(("preset", format!("{} ({})", p.value, source_word(p.source))));
            }
            if let Some(m) = &c.model {
                lines.push(("model", m.clone()));
            }
            if let Some(e) = &c.endpoint {
                lines.push(("endpoint", e.clone()));
            }
        }
        (None, Some(error)) => lines.push(("config", Style::Bad.paint(error, colour))),
        (None, None) => {}
    }
    if let Some(source) = &w.engine_source {
        lines.push(("engine from", source.clone()));
    }
    for o in &w.options {
        let value = w.effective.as_ref().and_then(|c| c.options.get(&o.name));
        let current = match value {
            Some(v) => format!("{} = {} ({})", o.name, value_text(&v.value), source_word(v.source)),
            None => format!("{} unset", o.name),
        };
        lines.push(("option", format!("{current}; {}", option_declaration(o))));
    }
    let queue = match &w.queue {
        None => "not measured yet".to_owned(),
        Some(q) => {
            let what = match (&q.error, q.pending, &q.unmeasurable) {
                (Some(e), _, _) => format!("the last measurement failed: {e}"),
                (None, Some(p), _) => format!("{p} pending"),
                (None, None, Some(u)) => format!("not measurable: {u}"),
                (None, None, None) => "?".to_owned(),
            };
            match q.age_seconds {
                Some(age) => format!("{what} (measured {})", ago(age)),
                None => what,
            }
        }
    };
    lines.push(("queue", queue));
    if let Some(r) = &w.in_flight {
        lines.push(("in flight", format!("{} {}", state_style(r.state).paint(r.state.as_str(), colour), r.id)));
    }
    let last = match &w.last_finished {
        Some(r) => format!(
            "{} {} {}",
            state_style(r.state).paint(r.state.as_str(), colour),
            r.finished_at.map(when).unwrap_or_default(),
            r.id
        ),
        None => "never".to_owned(),
    };
    lines.push(("last run", last));
    key_lines(&lines)
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
    for (key, value) in lineage(detail, Utc::now()) {
        push(key, Some(value));
    }
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
    if let Some(reported) = &run.reported_config {
        push("reported", Some(reported_text(c, reported)));
    }
    push("timeout", Some(duration(i64::try_from(c.timeout_seconds).unwrap_or(i64::MAX / 1000).saturating_mul(1000))));
    push("trace", run.trace_context.clone());
    push("log", run.log_key.clone());
    push("reports", Some(detail.progress_history.len().to_string()).filter(|n| n != "0"));
    // Continuation lines of a value (an error with the last lines of stderr) are indented under it.
    lines.iter().map(|(k, v)| format!("{k:<10} {}\n", v.trim_end().replace('\n', "\n           "))).collect()
}

/// Where a run comes from and where it stands among its attempts: its attempt number (of the policy's maximum),
/// the run it retries and the one that retried it, when a waiting retry may be claimed, the schedule and fire
/// that requested it, the pipeline run and step it belongs to, and the whole retry chain.
pub fn lineage(detail: &RunDetail, now: DateTime<Utc>) -> Vec<(&'static str, String)> {
    let run = &detail.run;
    let mut lines = Vec::new();
    let max = run.config.retry.as_ref().map(|r| i64::from(r.value.max_attempts));
    let known = i64::try_from(detail.chain.len()).unwrap_or(0).max(i64::from(run.attempt));
    if run.attempt > 1 || max.is_some_and(|m| m > 1) || detail.chain.len() > 1 {
        let of = max.unwrap_or(known).max(known);
        let retry_of = run.retry_of.map(|id| format!(", a retry of {id}")).unwrap_or_default();
        lines.push(("attempt", format!("{} of {of}{retry_of}", run.attempt)));
    }
    let position = detail.chain.iter().position(|r| r.id == run.id);
    if let Some(next) = position.and_then(|i| detail.chain.get(i + 1)) {
        lines.push(("retried by", format!("{} (attempt {}, {})", next.id, next.attempt, next.state)));
    }
    if let Some(t) = run.not_before.filter(|t| run.state == RunState::Queued && *t > now) {
        let ms = (t - now).num_milliseconds();
        lines.push(("not before", format!("{} (a retry waits {} before a daemon claims it)", when(t), duration(ms))));
    }
    if let Some(id) = run.schedule_id {
        let name = run.requested_by.strip_prefix("schedule:").map(|n| format!("{n} ")).unwrap_or_default();
        let fire = run.fire_at.map(|t| format!(", the fire of {}", when(t))).unwrap_or_default();
        lines.push(("schedule", format!("{name}({id}){fire}")));
    }
    if let Some(id) = run.pipeline_run_id {
        let step = run.pipeline_step.map(|s| format!(", step {}", s + 1)).unwrap_or_default();
        lines.push(("pipeline", format!("run {id}{step} (see: scrinalia pipelines show {id})")));
    }
    if detail.chain.len() > 1 {
        let chain = detail
            .chain
            .iter()
            .map(|r| {
                let this = if r.id == run.id { " (this run)" } else { "" };
                format!("{} {} {}{this}", r.attempt, r.state, r.id)
            })
            .collect::<Vec<_>>()
            .join("\n");
        lines.push(("chain", chain));
    }
    lines
}

/// What the worker reported it used at the start of a run, with each engine field that differs from the
/// resolved configuration marked `(resolved: …)`.
pub fn reported_text(config: &ResolvedConfig, reported: &Value) -> String {
    let Some(map) = reported.as_object() else { return value_text(reported) };
    let resolved = |key: &str| match key {
        "engine" => Some(config.engine.as_ref().map(|e| e.value.clone())),
        "preset" => Some(config.preset.as_ref().map(|p| p.value.clone())),
        "model" => Some(config.model.clone()),
        "endpoint" => Some(config.endpoint.clone()),
        _ => None,
    };
    // The engine's fields first, in the order people read them, then anything else the worker said.
    const ORDER: [&str; 5] = ["engine", "preset", "model", "endpoint", "source"];
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| ORDER.iter().position(|o| o == k).unwrap_or(ORDER.len()));
    let mut parts = Vec::new();
    for key in keys {
        let value = &map[key];
        if value.is_null() && resolved(key).flatten().is_none() {
            continue;
        }
        let text = match (key.as_str(), value) {
            ("source", Value::Object(source)) => {
                let description = source.get("description").and_then(Value::as_str).unwrap_or("elsewhere");
                match source.get("reference").and_then(Value::as_str) {
                    Some(reference) => format!("from {description} ({reference})"),
                    None => format!("from {description}"),
                }
            }
            (_, Value::Null) => "none".to_owned(),
            (_, v) => value_text(v),
        };
        match resolved(key) {
            Some(r) if r.as_deref() != value.as_str() => {
                parts.push(format!("{key}={text} (resolved: {})", r.as_deref().unwrap_or("none")));
            }
            _ => parts.push(format!("{key}={text}")),
        }
    }
    if parts.is_empty() { "no engine, preset or model".to_owned() } else { parts.join(" ") }
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

    /// A worker as the API sends it, with fields this CLI has never heard of: they are ignored, not refused.
    fn workers(extra: Value) -> WorkersView {
        let mut worker = json!({
            "name": "embed", "options": [{"name": "batch_size", "type": "integer", "default": 20, "minimum": 1,
                "maximum": 1000, "new_field": true}],
            "disagreements": ["catalogue says batch_size 10, code says 20; runs use 20"],
            "readiness": {"worker": "embed", "ready": false, "reason": "The model is away.", "error": null,
                "checked_at": "2026-01-31T10:00:00Z", "took_ms": 4, "age_seconds": 3.2, "later": 1},
            "described": {"worker": "embed", "description": null, "described_at": null, "command": ["embed"],
                "took_ms": 5, "error": "describe exited with status 2", "attempted_at": "2026-01-31T10:00:00Z"},
        });
        if let (Some(w), Value::Object(extra)) = (worker.as_object_mut(), extra) {
            w.extend(extra);
        }
        serde_json::from_value(json!({"workers": [worker], "engines": {}, "now": "2026-01-31T10:00:05Z"}))
            .expect("a lenient view")
    }

    #[test]
    fn readiness_and_disagreements_are_listed_under_the_table() {
        let view = workers(json!({"something_new": {"a": 1}}));
        let table = workers_table(&view).render(false);
        assert!(table.lines().next().is_some_and(|h| h.contains("READY")), "{table}");
        assert!(table.contains("not ready"), "{table}");
        assert_eq!(
            workers_notes(&view),
            [
                "embed: not ready: The model is away.",
                "embed: disagrees: catalogue says batch_size 10, code says 20; runs use 20",
            ]
        );
        let failed = workers(json!({"readiness": {"ready": null, "error": "check timed out after 10 s"}}));
        assert_eq!(workers_notes(&failed)[0], "embed: check failed: check timed out after 10 s");
        let unchecked = workers(json!({"readiness": null, "disagreements": []}));
        assert!(workers_notes(&unchecked).is_empty());
        assert!(workers_table(&unchecked).render(false).contains("unchecked"));
    }

    #[test]
    fn a_worker_detail_says_what_its_code_declared_and_why_its_describe_failed() {
        let view = workers(Value::Null);
        let detail = worker_detail(&view.workers[0], false);
        for part in [
            "ready      not ready: The model is away. (checked 3s ago)",
            "described  never: the catalogue's declarations apply",
            "describe   failed at ",
            "describe exited with status 2",
            "disagrees  catalogue says batch_size 10",
            "option     batch_size unset; integer, 1 to 1000, default 20",
        ] {
            assert!(detail.contains(part), "{part:?} is missing from:\n{detail}");
        }
    }

    #[test]
    fn a_reported_configuration_marks_what_differs_from_the_resolved_one() {
        let config: ResolvedConfig = serde_json::from_value(json!({
            "engine": {"value": "ollama", "source": "default"}, "preset": {"value": "fast", "source": "default"},
            "model": "llama3.2:1b", "endpoint": null, "engine_configurable": true, "options": {}, "timeout_seconds": 60,
        }))
        .expect("a resolved configuration");
        let same = json!({"engine": "ollama", "preset": "fast", "model": "llama3.2:1b", "endpoint": null,
            "source": null});
        assert_eq!(reported_text(&config, &same), "engine=ollama preset=fast model=llama3.2:1b");
        let other = json!({"engine": "ollama", "preset": "thorough", "model": "qwen2.5:14b",
            "source": {"description": "the active LLM_CHECK cleaning rule", "reference": "LLM_CHECK rule 2"}});
        assert_eq!(
            reported_text(&config, &other),
            "engine=ollama preset=thorough (resolved: fast) model=qwen2.5:14b (resolved: llama3.2:1b) \
             source=from the active LLM_CHECK cleaning rule (LLM_CHECK rule 2)"
        );
    }
}
