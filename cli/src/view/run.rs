//! Runs as people read them: a row of the run table, and the detail of one run with its lineage (attempts,
//! schedule, pipeline) and what its worker reported it used beside what was resolved for it.

use chrono::{DateTime, Utc};
use scrinalia_wire::{ConfigChange, FollowKind, Origin, ResolvedConfig, Run, RunDetail, RunState};
use serde_json::Value;

use super::{duration, key_lines, progress, source_word, state_style, summarise, value_text, when};
use crate::table::{Cell, Table, clip};

/// The columns of a run table.
pub const RUN_HEADERS: [&str; 7] = ["ID", "WORKER", "STATE", "REQUESTED", "TOOK", "BY", "OUTCOME"];

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

/// The detail of one run, as `key  value` lines.
pub fn run_detail(detail: &RunDetail, colour: bool) -> String {
    let run = &detail.run;
    let mut lines: Vec<(&str, String)> = vec![
        ("run", run.id.to_string()),
        ("worker", run.worker.clone()),
        ("state", state_style(run.state).paint(run.state.as_str(), colour)),
        ("requested", format!("{} by {}", when(run.requested_at), run.requested_by)),
    ];
    if let Some(waiting) = &detail.waiting {
        lines.push(("waiting", waiting.message.clone()));
    }
    let mut push = |key: &'static str, value: Option<String>| {
        if let Some(v) = value {
            lines.push((key, v));
        }
    };
    push("tags", Some(run.tags.join(", ")).filter(|t| !t.is_empty()));
    for (key, value) in lineage(detail, Utc::now()) {
        push(key, Some(value));
    }
    push("changed", detail.changed_since.as_deref().map(changes_text));
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
    let sourced = |v: &str, s: scrinalia_wire::Source| format!("{v} ({})", source_word(s));
    push("engine", c.engine.as_ref().map(|e| sourced(&e.value, e.source)));
    push("preset", c.preset.as_ref().map(|p| sourced(&p.value, p.source)));
    push("model", c.model.clone());
    push("endpoint", c.endpoint.clone());
    for (name, value) in &c.options {
        push("option", Some(format!("{name} = {}", sourced(&value_text(&value.value), value.source))));
    }
    if let Some(reported) = &run.reported_config {
        push("reported", Some(reported_text(c, reported)));
    }
    push("timeout", Some(duration(i64::try_from(c.timeout_seconds).unwrap_or(i64::MAX / 1000).saturating_mul(1000))));
    push("trace", run.trace_context.clone());
    push("log", run.log_key.clone());
    // The detail holds the last reports only; `progress_total` counts them all (0 from an older API).
    let reports = detail.progress_total.max(detail.progress_history.len() as u64);
    push("reports", Some(reports.to_string()).filter(|n| n != "0"));
    key_lines(&lines)
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
    if let (Some(earlier), Some(how)) = (run.follows, run.follows_as) {
        let from = match how {
            FollowKind::Resume => "from its last checkpoint",
            FollowKind::Restart => "from nothing",
            FollowKind::Rerun => "with today's configuration",
            FollowKind::RerunFailed => "only the items it reported failed",
        };
        lines.push(("continues", format!("run {earlier} ({how}, {from})")));
    }
    if let Some(next) = position.and_then(|i| detail.chain.get(i + 1)) {
        let by = match next.follows_as {
            Some(FollowKind::Resume) => "resumed by",
            Some(FollowKind::Restart) => "restarted by",
            Some(FollowKind::Rerun) => "rerun as",
            Some(FollowKind::RerunFailed) => "its failures rerun as",
            None => "retried by",
        };
        lines.push((by, format!("{} (attempt {}, {})", next.id, next.attempt, next.state)));
    }
    if let (Some(checkpoint), Some(at)) = (&run.checkpoint, run.checkpoint_at) {
        let size = checkpoint.to_string().len();
        lines.push(("checkpoint", format!("{} ({size} bytes of JSON; see --json)", when(at))));
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
    if let Some(items) = &detail.items {
        lines.push(("items", items_text(items, run.id)));
    }
    if let Some(usage) = &run.usage {
        lines.push(("usage", usage_text(usage)));
    }
    if run.priority != i16::from(scrinalia_wire::choice::DEFAULT_PRIORITY) {
        lines.push(("priority", format!("{} (0 to 100, higher first)", run.priority)));
    }
    if let Some(at) = run.expires_at {
        lines.push(("expires", format!("{} if still queued", at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))));
    }
    if let Some(urgent) = run.preempted_for {
        lines.push((
            "preempted",
            format!("for run {urgent}, which needed its resource (see: scrinalia run show {urgent})"),
        ));
    }
    if let (Some(parent), Some(shard), Some(shards)) = (run.parent_id, run.shard, run.shards) {
        lines.push(("shard", format!("{shard} of {shards}, of run {parent} (see: scrinalia run show {parent})")));
    }
    if !detail.children.is_empty() {
        let children = detail
            .children
            .iter()
            .map(|c| {
                let attempt = if c.attempt > 1 { format!(", attempt {}", c.attempt) } else { String::new() };
                format!("shard {} {} {}{attempt}", c.shard.unwrap_or_default(), c.state, c.id)
            })
            .collect::<Vec<_>>()
            .join("\n");
        lines.push(("shards", children));
    }
    if detail.chain.len() > 1 {
        let chain = detail
            .chain
            .iter()
            .map(|r| {
                let this = if r.id == run.id { " (this run)" } else { "" };
                let how = r.follows_as.map(|h| format!(" ({h})")).unwrap_or_default();
                format!("{} {} {}{how}{this}", r.attempt, r.state, r.id)
            })
            .collect::<Vec<_>>()
            .join("\n");
        lines.push(("chain", chain));
    }
    lines
}

/// A run's items in figures: `9950 succeeded, 50 failed (29 ocr_empty, 21 ctx_overflow)`, the refused lines,
/// and where to see the failures.
pub fn items_text(items: &scrinalia_wire::ItemSummary, id: uuid::Uuid) -> String {
    let classes = |outcome: &str| by_class(&items.classes, outcome);
    let mut parts = vec![format!("{} succeeded", items.succeeded)];
    if items.failed > 0 {
        parts.push(format!("{} failed{}", items.failed, classes("failed")));
    }
    if items.skipped > 0 {
        parts.push(format!("{} skipped{}", items.skipped, classes("skipped")));
    }
    if items.refused > 0 {
        parts.push(format!("{} malformed item lines refused{}", items.refused, classes("refused")));
    }
    let mut text = parts.join(", ");
    if let Some(chain) = &items.chain {
        text.push_str(&format!(
            "\nacross its resume chain of {} runs, each document once: {} failed{}, {} skipped",
            chain.runs,
            chain.failed,
            by_class(&chain.classes, "failed"),
            chain.skipped
        ));
    }
    let failures = items.failed.max(items.chain.as_ref().map_or(0, |c| c.failed));
    if failures > 0 {
        text.push_str(&format!(
            "\nsee: scrinalia items {id} --outcome failed; rerun them: scrinalia rerun-failed {id}"
        ));
    }
    text
}

/// A run's usage: `wall 12.3 s, CPU 3.4 s, peak 310 MiB (largest process), 1200 tokens in, 300 out, 0.0042 EUR`.
/// The process figures say how they were measured: `rusage` counts the worker and what it waited for.
pub fn usage_text(usage: &scrinalia_wire::RunUsage) -> String {
    let mut parts = vec![format!("wall {:.1} s", usage.wall_seconds)];
    if let Some(cpu) = usage.cpu_seconds {
        parts.push(format!("CPU {cpu:.1} s"));
    }
    if let Some(peak) = usage.peak_rss_largest_process_bytes {
        parts.push(format!("peak {} MiB (largest process)", peak.div_ceil(1024 * 1024)));
    }
    if let Some(r) = &usage.reported {
        parts.extend(r.tokens_in.map(|n| format!("{n} tokens in")));
        parts.extend(r.tokens_out.map(|n| format!("{n} out")));
        parts.extend(r.gpu_seconds.map(|s| format!("GPU {s:.1} s")));
        if let Some(cost) = r.cost {
            parts.push(format!("{cost} {}", r.currency.as_deref().unwrap_or("")).trim_end().to_owned());
        }
    }
    format!("{} (measured by {})", parts.join(", "), usage.measured_by)
}

/// The classes of one outcome, largest first: ` (29 ocr_empty, 21 ctx_overflow)`, or nothing.
fn by_class(classes: &[scrinalia_wire::ItemCount], outcome: &str) -> String {
    let named: Vec<String> = classes
        .iter()
        .filter(|c| c.outcome == outcome && !c.class.is_empty())
        .map(|c| format!("{} {}", c.count, c.class))
        .collect();
    if named.is_empty() { String::new() } else { format!(" ({})", named.join(", ")) }
}

/// A rerun's diff, a line per field: `field: before (source) → after (source)`, an override's source with who
/// changed it, when and why.
pub fn changes_text(changes: &[ConfigChange]) -> String {
    if changes.is_empty() {
        return "nothing since the run it reruns".to_owned();
    }
    let side = |value: &Option<Value>, origin: &Option<Origin>| {
        let value = value.as_ref().map(value_text).unwrap_or_else(|| "none".to_owned());
        let Some(origin) = origin else { return value };
        let mut from = source_word(origin.source);
        if let Some(by) = &origin.changed_by {
            from.push_str(&format!(" by {by}"));
        }
        if let Some(at) = origin.changed_at {
            from.push_str(&format!(" {}", when(at)));
        }
        if let Some(reason) = &origin.reason {
            from.push_str(&format!(": {reason:?}"));
        }
        format!("{value} ({from})")
    };
    changes
        .iter()
        .map(|c| format!("{}: {} → {}", c.field, side(&c.before, &c.before_source), side(&c.after, &c.after_source)))
        .collect::<Vec<_>>()
        .join("\n")
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

    #[test]
    fn a_resumed_run_shows_its_chain_and_where_to_rerun_its_failures() {
        let items: scrinalia_wire::ItemSummary = serde_json::from_value(json!({
            "succeeded": 16, "failed": 0, "skipped": 0, "refused": 0, "cut": 0, "classes": [],
            "chain": {"runs": 2, "failed": 8, "skipped": 1, "classes": [
                {"outcome": "failed", "class": "ocr_empty", "count": 5},
                {"outcome": "failed", "class": "timeout", "count": 3},
                {"outcome": "skipped", "class": "quarantined", "count": 1}]},
        }))
        .expect("a summary");
        let id = uuid::Uuid::nil();
        assert_eq!(
            items_text(&items, id),
            format!(
                "16 succeeded\nacross its resume chain of 2 runs, each document once: 8 failed (5 ocr_empty, \
                 3 timeout), 1 skipped\nsee: scrinalia items {id} --outcome failed; rerun them: scrinalia \
                 rerun-failed {id}"
            )
        );
    }

    #[test]
    fn usage_names_how_its_process_figures_were_measured() {
        let usage: scrinalia_wire::RunUsage = serde_json::from_value(json!({
            "wall_seconds": 12.34, "measured_by": "rusage", "cpu_seconds": 3.41,
            "peak_rss_largest_process_bytes": 324_009_984u64,
            "reported": {"tokens_in": 1200, "tokens_out": 300, "cost": 0.0042, "currency": "EUR"},
        }))
        .expect("a usage");
        assert_eq!(
            usage_text(&usage),
            "wall 12.3 s, CPU 3.4 s, peak 309 MiB (largest process), 1200 tokens in, 300 out, 0.0042 EUR \
             (measured by rusage)"
        );
    }
}
