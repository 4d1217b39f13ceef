//! `scrinalia schedules …`: list, show, create, edit, pause, resume and delete cron schedules of a worker or a
//! pipeline, read their fires and audit trail, and preview an expression's next fire times as the API computes
//! them. Times are local, as elsewhere in the CLI; the API's JSON is printed as it is with `--json`.

mod definition;
mod text;

use anyhow::Context;
use chrono::Utc;
use scrinalia_wire::{
    PreviewInput, ReasonBody, Schedule, ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView,
    TargetKind,
};
use serde_json::{Map, Value};

pub use self::{
    definition::{apply_options, edited},
    text::{
        audit_table, changes, fire_summary, fires_table, outcome_style, preview_text, schedule_detail, schedules_table,
        target, until,
    },
};
use crate::{
    args::{ScheduleCommand, ScheduleCreateArgs, ScheduleEditArgs, ScheduleReasonArgs},
    client::Client,
    commands::options_once,
    output::{Out, note},
    view::when,
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
        reason: Some(args.reason.to_string()),
        tags: args.common.tags,
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

async fn set_enabled(client: &Client, out: Out, args: ScheduleReasonArgs, enabled: bool) -> anyhow::Result<()> {
    let (verb, doing) = if enabled { ("resume", "resuming") } else { ("pause", "pausing") };
    let body = client
        .post(&["schedules", &args.key, verb], Some(&ReasonBody::new(args.reason.to_string())))
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
        .delete(&["schedules", &args.key], Some(&ReasonBody::new(args.reason.to_string())))
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
    let input = PreviewInput { cron, time_zone };
    let body = client.post(&["schedules", "preview"], Some(&input)).await.context("previewing the expression")?;
    if out.json {
        return out.body(&body);
    }
    let p: SchedulePreview = body.parse()?;
    out.text(&preview_text(&p, Utc::now()))
}

/// A schedule as the API sends it, for the tests of this module's parts.
#[cfg(test)]
fn sample(kind: &str, arguments: Value) -> Schedule {
    serde_json::from_value(serde_json::json!({
        "id": "0193a000-0000-7000-8000-000000000001", "name": "nightly", "target_kind": kind,
        "target": "probe-1", "cron": "0 3 * * *", "time_zone": "Europe/Berlin", "arguments": arguments,
        "enabled": true, "overlap": "skip", "missed": "once", "next_fire_at": "2026-02-01T02:00:00Z",
        "waiting_fire_at": null, "created_by": "otto", "created_at": "2026-01-31T10:00:00Z",
        "updated_by": "otto", "updated_at": "2026-01-31T10:00:00Z",
    }))
    .expect("a schedule")
}
