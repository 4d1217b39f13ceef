//! How schedules read to people: the table of `scrinalia schedules`, one schedule's definition, its fires and
//! its audit trail, and a preview's fire times.

use chrono::{DateTime, Utc};
use scrinalia_wire::{
    FireOutcome, Schedule, ScheduleAuditEntry, ScheduleFire, SchedulePreview, ScheduleView, TargetKind,
};
use serde_json::{Map, Value};

use crate::{
    table::{Cell, Style, Table, clip},
    view::{ago, duration, key_lines, summarise, when},
};

/// How long until `t`: `in 3m12s`, or `due` once it has come.
pub fn until(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let ms = (t - now).num_milliseconds();
    if ms <= 0 { "due".to_owned() } else { format!("in {}", duration(ms)) }
}

/// A fire time: local, with the instant and how long until it.
fn fire_time(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{}  ({}, {})", when(t), t.format("%Y-%m-%dT%H:%M:%SZ"), until(t, now))
}

/// The text of `scrinalia schedules preview`.
pub fn preview_text(p: &SchedulePreview, now: DateTime<Utc>) -> String {
    let mut text = format!("{} in {} fires next at (local time):\n", p.cron, p.time_zone);
    if p.upcoming.is_empty() {
        text.push_str("  never\n");
    }
    for t in &p.upcoming {
        text.push_str(&format!("  {}\n", fire_time(*t, now)));
    }
    text
}

/// What a schedule fires, in words: `worker probe-1`, `pipeline nightly`.
pub fn target(s: &Schedule) -> String {
    format!("{} {}", s.target_kind, s.target)
}

/// The colour of a fire's outcome.
pub fn outcome_style(outcome: FireOutcome) -> Style {
    match outcome {
        FireOutcome::Requested => Style::Good,
        FireOutcome::Skipped => Style::Warn,
        FireOutcome::Missed => Style::Bad,
        FireOutcome::Waiting => Style::Busy,
    }
}

/// A fire in a few words: what it did and what it led to.
pub fn fire_summary(f: &ScheduleFire) -> String {
    let led = match (f.run_id, f.pipeline_run_id, f.blocked_by) {
        (Some(run), _, _) => format!(" run {run}"),
        (None, Some(p), _) => format!(" pipeline run {p}"),
        (None, None, Some(b)) => format!(" (blocked by run {b})"),
        _ => String::new(),
    };
    let reason = f.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    format!("{}{led}{reason}", f.outcome)
}

/// The table of `scrinalia schedules`.
pub fn schedules_table(views: &[ScheduleView], now: DateTime<Utc>) -> Table {
    let mut table = Table::new(&["NAME", "TARGET", "CRON", "ZONE", "STATE", "NEXT FIRE", "LAST FIRE"]);
    for v in views {
        let s = &v.schedule;
        let state = if s.enabled { Cell::styled("enabled", Style::Good) } else { Cell::styled("paused", Style::Warn) };
        let next = match s.next_fire_at {
            Some(t) => Cell::from(format!("{} ({})", when(t), until(t, now))),
            None => Cell::styled("-", Style::Dim),
        };
        let last = match &v.last_fire {
            Some(f) => {
                let age = (now - f.fire_at).num_milliseconds() as f64 / 1000.0;
                Cell::styled(format!("{} {}", f.outcome, ago(age)), outcome_style(f.outcome))
            }
            None => Cell::styled("never", Style::Dim),
        };
        table.row(vec![
            s.name.as_str().into(),
            target(s).into(),
            s.cron.as_str().into(),
            s.time_zone.as_str().into(),
            state,
            next,
            last,
        ]);
    }
    table
}

/// The arguments of a schedule in words: `n=3` for a worker, `step: n=3; other: …` for a pipeline.
fn arguments_text(s: &Schedule) -> Option<String> {
    let map = s.arguments.as_object().filter(|m| !m.is_empty())?;
    Some(match s.target_kind {
        TargetKind::Worker => summarise(&flatten_options(map)),
        TargetKind::Pipeline => map
            .iter()
            .map(|(step, args)| match args.as_object() {
                Some(a) => format!("{step}: {}", summarise(&flatten_options(a))),
                None => format!("{step}: {args}"),
            })
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// A run's arguments with its options lifted beside engine and preset.
fn flatten_options(args: &Map<String, Value>) -> Value {
    let mut flat = Map::new();
    for (k, v) in args {
        match (k.as_str(), v) {
            ("options", Value::Object(options)) => flat.extend(options.clone()),
            _ => {
                flat.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(flat)
}

/// The definition of a schedule, as `key  value` lines.
pub fn schedule_detail(v: &ScheduleView, now: DateTime<Utc>, colour: bool) -> String {
    let s = &v.schedule;
    let state = if s.enabled { Style::Good.paint("enabled", colour) } else { Style::Warn.paint("paused", colour) };
    let overlap = match s.overlap {
        scrinalia_wire::OverlapPolicy::Skip => "skip: a fire while a run is in flight is skipped",
        scrinalia_wire::OverlapPolicy::Queue => "queue: a fire while a run is in flight waits for it (one at most)",
    };
    let missed = match s.missed {
        scrinalia_wire::MissedPolicy::Skip => "skip: fires that fell while no daemon ran are recorded as missed",
        scrinalia_wire::MissedPolicy::Once => "once: the latest fire that fell while no daemon ran runs on recovery",
    };
    let mut lines: Vec<(&str, String)> = vec![
        ("schedule", format!("{} ({})", s.name, s.id)),
        ("target", target(s)),
        ("cron", format!("{} in {}", s.cron, s.time_zone)),
        ("state", state),
        ("overlap", overlap.to_owned()),
        ("missed", missed.to_owned()),
    ];
    if let Some(args) = arguments_text(s) {
        lines.push(("arguments", args));
    }
    if !s.tags.is_empty() {
        lines.push(("tags", s.tags.join(", ")));
    }
    let next = if v.upcoming.is_empty() {
        if s.enabled { "never".to_owned() } else { "none while paused".to_owned() }
    } else {
        v.upcoming.iter().map(|t| fire_time(*t, now)).collect::<Vec<_>>().join("\n")
    };
    lines.push(("next fires", next));
    if let Some(t) = s.waiting_fire_at {
        lines.push(("waiting", format!("the fire of {} waits for the run in flight", when(t))));
    }
    if let Some(f) = &v.last_fire {
        let summary = outcome_style(f.outcome).paint(&fire_summary(f), colour);
        lines.push(("last fire", format!("{} {summary}", when(f.fire_at))));
    }
    lines.push(("created", format!("{} by {}", when(s.created_at), s.created_by)));
    lines.push(("changed", format!("{} by {}", when(s.updated_at), s.updated_by)));
    key_lines(&lines)
}

/// A table of fires, newest first.
pub fn fires_table(fires: &[ScheduleFire]) -> Table {
    let mut table = Table::new(&["FIRE TIME", "OUTCOME", "RUN", "DAEMON", "REASON"]);
    for f in fires {
        let run = match (f.run_id, f.pipeline_run_id, f.blocked_by) {
            (Some(r), _, _) => r.to_string(),
            (None, Some(p), _) => format!("pipeline {p}"),
            (None, None, Some(b)) => format!("blocked by {b}"),
            _ => String::new(),
        };
        table.row(vec![
            when(f.fire_at).into(),
            Cell::styled(f.outcome.to_string(), outcome_style(f.outcome)),
            run.into(),
            f.fired_by.map(|d| d.to_string()[..8].to_owned()).unwrap_or_default().into(),
            clip(f.reason.as_deref().unwrap_or_default(), 80).into(),
        ]);
    }
    table
}

/// The fields of a schedule that differ between two versions of it, as `field: before → after`.
pub fn changes(before: Option<&Value>, after: Option<&Value>) -> String {
    const FIELDS: [&str; 9] =
        ["name", "target_kind", "target", "cron", "time_zone", "enabled", "overlap", "missed", "arguments"];
    let (Some(before), Some(after)) = (before, after) else { return String::new() };
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "-".to_owned(),
    };
    FIELDS
        .iter()
        .filter(|f| before.get(**f) != after.get(**f))
        .map(|f| format!("{f}: {} → {}", text(before.get(*f)), text(after.get(*f))))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A schedule's audit trail as a table.
pub fn audit_table(entries: &[ScheduleAuditEntry]) -> Table {
    let mut table = Table::new(&["WHEN", "WHO", "ACTION", "REASON", "CHANGE"]);
    for a in entries {
        table.row(vec![
            when(a.at).into(),
            a.actor.as_str().into(),
            a.action.to_string().into(),
            clip(&a.reason, 60).into(),
            clip(&changes(a.before.as_ref(), a.after.as_ref()), 100).into(),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schedules::sample as schedule;

    #[test]
    fn a_schedule_reads_as_its_definition_and_its_changes() {
        let s = schedule("worker", json!({"options": {"n": 3}}));
        let view = ScheduleView { schedule: s.clone(), upcoming: vec![], last_fire: None };
        let now = "2026-01-31T12:00:00Z".parse().expect("a time");
        let detail = schedule_detail(&view, now, false);
        for part in ["target     worker probe-1", "cron       0 3 * * * in Europe/Berlin", "arguments  n=3", "never"] {
            assert!(detail.contains(part), "{part:?} is missing from:\n{detail}");
        }
        let table = schedules_table(&[view], now).render(false);
        assert!(table.contains("in 14h00m") && table.contains("never"), "{table}");
        let before = serde_json::to_value(&s).expect("json");
        let mut after = before.clone();
        after["enabled"] = json!(false);
        assert_eq!(changes(Some(&before), Some(&after)), "enabled: true → false");
    }
}
