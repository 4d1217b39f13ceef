//! Workers as people read them: the table of `scrinalia workers` with the notes under it, and the detail of one
//! worker, both from what its code declared (readiness, describe, options) beside what the catalogue says.

use scrinalia_wire::{
    OptionSpec, QueueCount, Readiness, ResolvedConfig, WorkerView, WorkersView, choice::limits::size_text,
};
use serde_json::Value;

use super::{ago, duration, key_lines, source_word, state_style, value_text, when};
use crate::table::{Cell, Style, Table};

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

/// The limits of a configuration, one line each, with their sources: `memory_max 4 GiB (override)`.
pub fn limit_lines(config: &ResolvedConfig) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(m) = &config.memory_max_bytes {
        lines.push(("memory_max", format!("{} ({})", size_text(m.value), source_word(m.source))));
    }
    if let Some(c) = &config.cpu_max {
        lines.push(("cpu_max", format!("{} cores ({})", c.value, source_word(c.source))));
    }
    if let Some(s) = &config.stall_seconds {
        let what = format!("stopped after {} s without progress, items or checkpoints", s.value);
        lines.push(("stall", format!("{what} ({})", source_word(s.source))));
    }
    lines
}

/// A worker's readiness in a word or two, with its colour.
pub fn readiness_word(readiness: Option<&Readiness>) -> Cell {
    match readiness.map(|r| r.ready) {
        None => Cell::styled("unchecked", Style::Dim),
        Some(Some(true)) => Cell::styled("ready", Style::Good),
        Some(Some(false)) => Cell::styled("not ready", Style::Bad),
        Some(None) => Cell::styled("check failed", Style::Warn),
    }
}

/// What a worker's readiness says beyond its word: what is missing, or why the check failed.
pub fn readiness_sentence(readiness: &Readiness) -> Option<String> {
    match readiness.ready {
        Some(true) => None,
        Some(false) => Some(readiness.reason.clone().unwrap_or_else(|| "its check says it is not ready".to_owned())),
        None => Some(readiness.error.clone().unwrap_or_else(|| "its check did not answer".to_owned())),
    }
}

/// A queue measurement in a few words.
fn queue_cell(queue: Option<&QueueCount>) -> Cell {
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
    let now = view.now;
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
        if let Some(p) = &w.paused {
            notes.push(format!("{}: {}", w.name, paused_sentence(&w.name, p)));
        }
    }
    notes
}

/// A pause as the panel says it: "paused since … by …: reason", and how to resume.
fn paused_sentence(name: &str, p: &scrinalia_wire::WorkerPause) -> String {
    let how = if p.automatic { " (automatically)" } else { "" };
    format!(
        "paused since {} by {}{how}: {} (scrinalia worker resume {name} --reason …)",
        when(p.at),
        p.by,
        p.reason.trim_end_matches('.')
    )
}

/// An option's declaration in a few words: `integer, 0 to 255, default 0, one of 3, 5, 8`.
pub fn option_declaration(o: &OptionSpec) -> String {
    let mut parts = vec![o.kind.name().to_owned()];
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
        readiness = format!("{readiness} (checked {}{by})", ago(r.age_seconds));
    }
    lines.push(("ready", readiness));
    if let Some(p) = &w.paused {
        lines.push(("paused", Style::Bad.paint(&paused_sentence(&w.name, p), colour)));
    }
    match &w.described {
        Some(d) => {
            if let Some(at) = d.described_at {
                let by = d.described_by.map(|id| format!(" by daemon {id}")).unwrap_or_default();
                lines.push(("described", format!("{}{by} in {}", when(at), duration(d.took_ms))));
            } else {
                lines.push(("described", "never: the catalogue's declarations apply".to_owned()));
            }
            if let Some(error) = &d.error {
                let at = when(d.attempted_at);
                lines.push(("describe", Style::Bad.paint(&format!("failed at {at}: {error}"), colour)));
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
            lines.extend(limit_lines(c));
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
            format!("{what} (measured {})", ago(q.age_seconds))
        }
    };
    lines.push(("queue", queue));
    if let Some(b) = w.effective.as_ref().and_then(|c| c.backlog.as_ref()) {
        let t = &b.value;
        let mut text = format!("a run at {} pending", t.when_pending_at_least);
        if let Some(q) = t.quiet_seconds {
            text.push_str(&format!(", quiet for {q} s"));
        }
        if let Some(m) = t.max_delay_seconds {
            text.push_str(&format!(", at most {m} s after"));
        }
        lines.push(("backlog", format!("{text} ({})", source_word(b.source))));
    }
    if let Some(f) = &w.freshness {
        let text = match (&f.reason, f.age_seconds) {
            (Some(reason), _) if f.breached => Style::Bad.paint(&format!("breached: {reason}"), colour),
            (_, Some(age)) => format!("fresh: {age} s old, within {} s", f.within_seconds),
            _ => format!("fresh: nothing pending (within {} s)", f.within_seconds),
        };
        lines.push(("freshness", text));
    }
    if let Some(r) = &w.in_flight {
        lines.push(("in flight", format!("{} {}", state_style(r.state).paint(r.state.as_str(), colour), r.id)));
    }
    if let Some(waiting) = &w.waiting {
        lines.push(("waiting", super::waiting_text(waiting)));
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A worker as the API sends it, with `extra` fields replacing its own; fields this CLI has never heard of
    /// are ignored, not refused.
    fn workers(extra: Value) -> WorkersView {
        let mut worker = json!({
            "name": "embed", "title": null, "axis": "text", "governance": "", "stamp": "", "description": null,
            "effective": null, "effective_error": null, "override": null, "engine_configurable": true,
            "engine_source": null, "engine_source_url": null, "queue": null, "in_flight": null,
            "last_finished": null,
            "options": [{"name": "batch_size", "type": "integer", "default": 20, "minimum": 1, "maximum": 1000}],
            "disagreements": ["catalogue says batch_size 10, code says 20; runs use 20"],
            "readiness": readiness(json!({"ready": false, "reason": "The model is away.", "later": 1})),
            "described": {"worker": "embed", "description": null, "described_at": null, "described_by": null,
                "command": ["embed"], "took_ms": 5, "error": "describe exited with status 2",
                "attempted_at": "2026-01-31T10:00:00Z", "age_seconds": null},
        });
        if let (Some(w), Value::Object(extra)) = (worker.as_object_mut(), extra) {
            w.extend(extra);
        }
        serde_json::from_value(json!({"workers": [worker], "engines": {}, "now": "2026-01-31T10:00:05Z"}))
            .expect("a worker view")
    }

    /// A readiness as the API sends it, with `extra` fields replacing its own.
    fn readiness(extra: Value) -> Value {
        let mut readiness = json!({"worker": "embed", "ready": true, "reason": null, "error": null,
            "checked_at": "2026-01-31T10:00:00Z", "took_ms": 4, "checked_by": null, "age_seconds": 3.2});
        if let (Some(r), Value::Object(extra)) = (readiness.as_object_mut(), extra) {
            r.extend(extra);
        }
        readiness
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
        let failed = readiness(json!({"ready": null, "error": "check timed out after 10 s"}));
        let failed = workers(json!({ "readiness": failed }));
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
    fn limits_are_listed_with_their_sources() {
        let mut config = ResolvedConfig::empty();
        assert!(limit_lines(&config).is_empty(), "no limit, no line");
        let resolved = |value, source| scrinalia_wire::Resolved { value, source };
        config.memory_max_bytes = Some(resolved(4 << 30, scrinalia_wire::Source::Override));
        config.cpu_max = Some(scrinalia_wire::Resolved { value: 0.5, source: scrinalia_wire::Source::Default });
        config.stall_seconds = Some(resolved(600, scrinalia_wire::Source::Default));
        let lines: Vec<String> = limit_lines(&config).into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
        assert_eq!(lines[0], format!("memory_max: 4 GiB ({})", source_word(scrinalia_wire::Source::Override)));
        assert!(lines[1].starts_with("cpu_max: 0.5 cores ("), "{lines:?}");
        assert!(lines[2].starts_with("stall: stopped after 600 s without progress"), "{lines:?}");
    }
}
