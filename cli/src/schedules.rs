//! `scrinalia schedules …`: list, show, create, edit, pause, resume and delete cron schedules of a worker or a
//! pipeline, read their fires and audit trail, and preview an expression's next fire times as the API computes
//! them. Times are local, as elsewhere in the CLI; the API's JSON is printed as it is with `--json`.

use std::collections::BTreeMap;

use anyhow::Context;
use chrono::{DateTime, Utc};
use scrinalia_wire::{
    FireOutcome, Schedule, ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView, TargetKind,
};
use serde_json::{Map, Value, json};

use crate::{
    args::{ScheduleCommand, ScheduleCreateArgs, ScheduleEditArgs, ScheduleReasonArgs},
    client::Client,
    commands::options_once,
    exit::{Exit, Verdict},
    output::{Out, note},
    table::{Cell, Style, Table, clip},
    view::{ago, duration, key_lines, summarise, when},
};

/// Runs `scrinalia schedules [command]`.
pub async fn run(client: &Client, out: Out, command: Option<ScheduleCommand>) -> anyhow::Result<()> {
    match command {
        None => list(client, out).await,
        Some(ScheduleCommand::Show { key }) => show(client, out, &key).await,
        Some(ScheduleCommand::Create(args)) => create(client, out, args).await,
        Some(ScheduleCommand::Edit(args)) => edit(client, out, args).await,
        Some(ScheduleCommand::Pause(args)) => set_enabled(client, out, args, false).await,
        Some(ScheduleCommand::Resume(args)) => set_enabled(client, out, args, true).await,
        Some(ScheduleCommand::Delete(args)) => delete(client, out, args).await,
        Some(ScheduleCommand::Fires { key, limit }) => fires(client, out, &key, limit).await,
        Some(ScheduleCommand::Audit { key, limit }) => audit(client, out, &key, limit).await,
        Some(ScheduleCommand::Preview { cron, time_zone }) => preview(client, out, cron, time_zone).await,
    }
}

async fn list(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["schedules"], &[]).await.context("listing the schedules")?;
    if out.json {
        return out.body(&body);
    }
    let views: Vec<ScheduleView> = body.parse()?;
    if views.is_empty() {
        note("No schedules. Create one with: scrinalia schedules create NAME --worker W --cron EXPR --reason R");
        return Ok(());
    }
    out.text(&schedules_table(&views, Utc::now()).render(out.colour))
}

async fn show(client: &Client, out: Out, key: &str) -> anyhow::Result<()> {
    let body = client.get(&["schedules", key], &[]).await.with_context(|| format!("reading schedule {key}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: ScheduleView = body.parse()?;
    // Read by id: the name may have changed in between, the id does not.
    let id = view.schedule.id.to_string();
    let (fires_path, audit_path) = (["schedules", id.as_str(), "fires"], ["schedules", id.as_str(), "audit"]);
    let (fires_query, audit_query) = ([("limit", "10".to_owned())], [("limit", "20".to_owned())]);
    let (fires, audit) = tokio::try_join!(client.get(&fires_path, &fires_query), client.get(&audit_path, &audit_query))
        .with_context(|| format!("reading the history of schedule {key}"))?;
    let (fires, audit): (Vec<ScheduleFire>, Vec<ScheduleAuditEntry>) = (fires.parse()?, audit.parse()?);
    let now = Utc::now();
    let mut text = schedule_detail(&view, now, out.colour);
    text.push_str("\nLast fires:\n");
    if fires.is_empty() {
        text.push_str("  none yet\n");
    } else {
        text.push_str(&fires_table(&fires).render(out.colour));
    }
    text.push_str("\nAudit trail:\n");
    text.push_str(&audit_table(&audit).render(out.colour));
    out.text(&text)
}

async fn create(client: &Client, out: Out, args: ScheduleCreateArgs) -> anyhow::Result<()> {
    let kind = if args.pipeline.is_some() { TargetKind::Pipeline } else { TargetKind::Worker };
    let mut arguments = Value::Object(Map::new());
    apply_options(&mut arguments, kind, options_once(args.common.options)?, false)?;
    let input = ScheduleInput {
        name: args.name.clone(),
        worker: args.worker,
        pipeline: args.pipeline,
        cron: args.cron,
        time_zone: args.common.time_zone,
        arguments: Some(arguments),
        enabled: args.paused.then_some(false),
        overlap: args.common.overlap,
        missed: args.common.missed,
        reason: Some(args.reason),
    };
    let body =
        client.post(&["schedules"], Some(&input)).await.with_context(|| format!("creating schedule {}", args.name))?;
    if out.json {
        return out.body(&body);
    }
    let view: ScheduleView = body.parse()?;
    let state = if view.schedule.enabled { "" } else { ", paused" };
    let head = format!("Created schedule {}{state}.\n", view.schedule.name);
    out.text(&format!("{head}{}", schedule_detail(&view, Utc::now(), out.colour)))
}

async fn edit(client: &Client, out: Out, args: ScheduleEditArgs) -> anyhow::Result<()> {
    let key = args.key.clone();
    let body = client.get(&["schedules", &key], &[]).await.with_context(|| format!("reading schedule {key}"))?;
    let current: ScheduleView = body.parse()?;
    let input = edited(current.schedule, args)?;
    let body = client.put(&["schedules", &key], &input).await.with_context(|| format!("changing schedule {key}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: ScheduleView = body.parse()?;
    let head = format!("Changed schedule {}.\n", view.schedule.name);
    out.text(&format!("{head}{}", schedule_detail(&view, Utc::now(), out.colour)))
}

/// The definition `PUT` sends: the current one with the flags given applied. Arguments stay unless the target
/// changes kind (a worker's arguments do not fit a pipeline, nor the other way round).
pub fn edited(current: Schedule, args: ScheduleEditArgs) -> anyhow::Result<ScheduleInput> {
    let (worker, pipeline) = match (args.worker, args.pipeline, current.target_kind) {
        (Some(w), _, _) => (Some(w), None),
        (None, Some(p), _) => (None, Some(p)),
        (None, None, TargetKind::Worker) => (Some(current.target.clone()), None),
        (None, None, TargetKind::Pipeline) => (None, Some(current.target.clone())),
    };
    let kind = if pipeline.is_some() { TargetKind::Pipeline } else { TargetKind::Worker };
    let mut arguments = if kind == current.target_kind { current.arguments } else { Value::Object(Map::new()) };
    apply_options(&mut arguments, kind, options_once(args.common.options)?, args.clear_options)?;
    let enabled = match (args.paused, args.enabled) {
        (true, _) => false,
        (_, true) => true,
        _ => current.enabled,
    };
    Ok(ScheduleInput {
        name: args.name.unwrap_or(current.name),
        worker,
        pipeline,
        cron: args.cron.unwrap_or(current.cron),
        time_zone: Some(args.common.time_zone.unwrap_or(current.time_zone)),
        arguments: Some(arguments),
        enabled: Some(enabled),
        overlap: Some(args.common.overlap.unwrap_or(current.overlap)),
        missed: Some(args.common.missed.unwrap_or(current.missed)),
        reason: Some(args.reason),
    })
}

/// Puts option values into a schedule's (or a pipeline run's) arguments: a worker's as `{"options": {…}}`, a
/// pipeline's by step worker as `{"<step>": {"options": {…}}}`, from names written `STEP.NAME`. With `clear`,
/// the options already there are dropped first.
pub fn apply_options(
    arguments: &mut Value,
    kind: TargetKind,
    options: BTreeMap<String, Value>,
    clear: bool,
) -> Result<(), Verdict> {
    if !arguments.is_object() {
        *arguments = Value::Object(Map::new());
    }
    let Value::Object(map) = arguments else { return Ok(()) };
    match kind {
        TargetKind::Worker => {
            if clear {
                map.remove("options");
            }
            set_options(map, options);
        }
        TargetKind::Pipeline => {
            if clear {
                for step in map.values_mut().filter_map(Value::as_object_mut) {
                    step.remove("options");
                }
            }
            let mut by_step: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
            for (name, value) in options {
                let Some((step, option)) = name.split_once('.').filter(|(s, o)| !s.is_empty() && !o.is_empty()) else {
                    let message = format!(
                        "--option {name}: a pipeline's options are STEP.NAME=VALUE, STEP the worker of one of its steps."
                    );
                    return Err(Verdict { exit: Exit::Usage, message });
                };
                by_step.entry(step.to_owned()).or_default().insert(option.to_owned(), value);
            }
            for (step, options) in by_step {
                let entry = map.entry(step).or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(step) = entry {
                    set_options(step, options);
                }
            }
            map.retain(|_, step| step.as_object().is_none_or(|s| !s.is_empty()));
        }
    }
    Ok(())
}

fn set_options(map: &mut Map<String, Value>, options: BTreeMap<String, Value>) {
    let entry = map.entry("options").or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    if let Value::Object(existing) = entry {
        existing.extend(options);
        if existing.is_empty() {
            map.remove("options");
        }
    }
}

async fn set_enabled(client: &Client, out: Out, args: ScheduleReasonArgs, enabled: bool) -> anyhow::Result<()> {
    let (verb, doing) = if enabled { ("resume", "resuming") } else { ("pause", "pausing") };
    let body = client
        .post(&["schedules", &args.key, verb], Some(&json!({"reason": args.reason})))
        .await
        .with_context(|| format!("{doing} schedule {}", args.key))?;
    if out.json {
        return out.body(&body);
    }
    let view: ScheduleView = body.parse()?;
    let text = match view.upcoming.first() {
        Some(next) if enabled => {
            format!("Schedule {} is resumed; it fires next at {}.", view.schedule.name, when(*next))
        }
        _ if enabled => format!("Schedule {} is resumed.", view.schedule.name),
        _ => format!(
            "Schedule {} is paused: it does not fire until resumed (scrinalia schedules resume {} --reason …).",
            view.schedule.name, view.schedule.name
        ),
    };
    out.text(&text)
}

async fn delete(client: &Client, out: Out, args: ScheduleReasonArgs) -> anyhow::Result<()> {
    let body = client
        .delete(&["schedules", &args.key], Some(&json!({"reason": args.reason})))
        .await
        .with_context(|| format!("deleting schedule {}", args.key))?;
    if out.json {
        return out.body(&body);
    }
    let s: Schedule = body.parse()?;
    out.text(&format!(
        "Deleted schedule {} ({}); its fires and audit trail stay readable: scrinalia schedules fires {}",
        s.name, s.id, s.id
    ))
}

async fn fires(client: &Client, out: Out, key: &str, limit: u32) -> anyhow::Result<()> {
    let query = [("limit", limit.to_string())];
    let body = client
        .get(&["schedules", key, "fires"], &query)
        .await
        .with_context(|| format!("reading the fires of {key}"))?;
    if out.json {
        return out.body(&body);
    }
    let fires: Vec<ScheduleFire> = body.parse()?;
    if fires.is_empty() {
        note(&format!("Schedule {key} has not fired yet."));
        return Ok(());
    }
    out.text(&fires_table(&fires).render(out.colour))
}

async fn audit(client: &Client, out: Out, key: &str, limit: u32) -> anyhow::Result<()> {
    let query = [("limit", limit.to_string())];
    let body = client
        .get(&["schedules", key, "audit"], &query)
        .await
        .with_context(|| format!("reading the audit trail of {key}"))?;
    if out.json {
        return out.body(&body);
    }
    let entries: Vec<ScheduleAuditEntry> = body.parse()?;
    out.text(&audit_table(&entries).render(out.colour))
}

async fn preview(client: &Client, out: Out, cron: String, time_zone: Option<String>) -> anyhow::Result<()> {
    let mut input = json!({ "cron": cron });
    if let Some(zone) = time_zone {
        input["time_zone"] = json!(zone);
    }
    let body = client.post(&["schedules", "preview"], Some(&input)).await.context("previewing the expression")?;
    if out.json {
        return out.body(&body);
    }
    let p: SchedulePreview = body.parse()?;
    out.text(&preview_text(&p, Utc::now()))
}

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
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::args::{Cli, Command};

    fn schedule(kind: &str, arguments: Value) -> Schedule {
        serde_json::from_value(json!({
            "id": "0193a000-0000-7000-8000-000000000001", "name": "nightly", "target_kind": kind,
            "target": "probe-1", "cron": "0 3 * * *", "time_zone": "Europe/Berlin", "arguments": arguments,
            "enabled": true, "overlap": "skip", "missed": "once", "next_fire_at": "2026-02-01T02:00:00Z",
            "waiting_fire_at": null, "created_by": "otto", "created_at": "2026-01-31T10:00:00Z",
            "updated_by": "otto", "updated_at": "2026-01-31T10:00:00Z",
        }))
        .expect("a schedule")
    }

    fn edit_args(args: &[&str]) -> ScheduleEditArgs {
        let cli = Cli::try_parse_from([&["scrinalia", "schedules", "edit", "nightly"], args].concat()).expect("parses");
        match cli.command {
            Command::Schedules { command: Some(ScheduleCommand::Edit(args)) } => args,
            other => panic!("not an edit: {other:?}"),
        }
    }

    #[test]
    fn an_edit_keeps_what_is_not_given_and_merges_options() {
        let current = schedule("worker", json!({"preset": "fast", "options": {"n": 1, "m": 2}}));
        let input =
            edited(current.clone(), edit_args(&["--cron", "@hourly", "-o", "n=5", "--reason", "r"])).expect("edited");
        assert_eq!(input.cron, "@hourly");
        assert_eq!(input.worker.as_deref(), Some("probe-1"));
        assert_eq!((input.time_zone.as_deref(), input.enabled), (Some("Europe/Berlin"), Some(true)));
        assert_eq!(input.missed, Some(scrinalia_wire::MissedPolicy::Once));
        assert_eq!(input.arguments, Some(json!({"preset": "fast", "options": {"n": 5, "m": 2}})));
        let paused =
            edited(current.clone(), edit_args(&["--paused", "--clear-options", "--reason", "r"])).expect("edited");
        assert_eq!((paused.enabled, paused.arguments), (Some(false), Some(json!({"preset": "fast"}))));
        let moved = edited(current, edit_args(&["--pipeline", "nightly", "-o", "a.x=1", "--reason", "r"]));
        let moved = moved.expect("edited");
        assert_eq!((moved.worker, moved.pipeline.as_deref()), (None, Some("nightly")));
        assert_eq!(
            moved.arguments,
            Some(json!({"a": {"options": {"x": 1}}})),
            "a worker's arguments do not carry over"
        );
    }

    #[test]
    fn a_pipeline_option_names_its_step() {
        let mut args = json!({});
        let options = BTreeMap::from([("embed.batch".to_owned(), json!(3))]);
        apply_options(&mut args, TargetKind::Pipeline, options, false).expect("applied");
        assert_eq!(args, json!({"embed": {"options": {"batch": 3}}}));
        let bad = BTreeMap::from([("batch".to_owned(), json!(3))]);
        let err = apply_options(&mut args, TargetKind::Pipeline, bad, false).expect_err("no step");
        assert_eq!(err.exit, Exit::Usage);
        assert!(err.message.contains("STEP.NAME=VALUE"), "{}", err.message);
    }

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
