//! `scrinalia overrides …`: every worker's persisted override, changing one (a partial change: what is not named
//! keeps its value; `--unset` gives a field back to the default) or clearing it, always with a reason, and the
//! audit trail of those changes (admin to change, viewer to read). The API validates the values (exit 7).

use std::collections::BTreeMap;

use anyhow::Context;
use clap::{Args, Subcommand};
use scrinalia_wire::{
    AuditEntry, AuditView, Override, OverrideChange, OverrideValues, OverrideView, Reason, ReasonBody, WorkersView,
    choice::MemoryMax,
};
use serde_json::{Value, json};

use crate::{
    args::{parse_option, parse_reason},
    client::Client,
    commands::options_once,
    exit::{Exit, Verdict},
    output::{Out, note},
    table::{Cell, Table, clip},
    view::when,
};

/// `scrinalia overrides …`.
#[derive(Debug, Subcommand)]
pub enum OverrideCommand {
    /// Change a worker's override: only what is given changes; runs requested from now on use it.
    Set(Box<SetArgs>),
    /// Remove a worker's override: its runs follow the catalogue's and its code's defaults again.
    Clear {
        /// The worker.
        worker: String,
        /// Why (required; kept in the audit trail).
        #[arg(long, value_name = "REASON", value_parser = parse_reason)]
        reason: Reason,
    },
    /// List a worker's override changes, newest first: when, who, what changed and why.
    Audit {
        /// The worker.
        worker: String,
        /// At most this many entries.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
}

/// `scrinalia overrides set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The worker.
    pub worker: String,
    /// The engine its runs use.
    #[arg(long)]
    pub engine: Option<String>,
    /// The preset of that engine.
    #[arg(long)]
    pub preset: Option<String>,
    /// An option value as name=value (read as JSON when it parses, else as text). Repeat for several.
    #[arg(long = "option", short = 'o', value_name = "NAME=VALUE", value_parser = parse_option)]
    pub options: Vec<(String, Value)>,
    /// The memory limit of its runs, swap included: a whole number and a binary unit (`4GiB`, `512MiB`; B, KiB,
    /// MiB, GiB, TiB) or a whole number of bytes.
    #[arg(long, value_name = "SIZE")]
    pub memory_max: Option<String>,
    /// The CPU limit of its runs, in cores (0.5 is half a core).
    #[arg(long, value_name = "CORES", allow_negative_numbers = true)]
    pub cpu_max: Option<f64>,
    /// The stall watchdog: a run that reports no progress, item or checkpoint for this many seconds is stopped
    /// (and ends interrupted, `stalled`).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub stall_seconds: Option<i64>,
    /// Split its runs into this many shards (its code must declare that it takes a shard); 1 is one plain run.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub shards: Option<i64>,
    /// The priority of its runs, 0 to 100 (higher goes first among runs waiting for the same resource or slots).
    #[arg(long, value_name = "0-100", allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// A queued request not claimed this many seconds after it is due is cancelled (`expired`).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub expires_after_seconds: Option<i64>,
    /// The backlog trigger: request a run when at least this many units are pending (and quiet).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub when_pending_at_least: Option<i64>,
    /// The backlog trigger's debounce: the count must not have grown for this many seconds.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub quiet_seconds: Option<i64>,
    /// The backlog trigger's longest wait, in seconds after the count first reached the threshold.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub max_delay_seconds: Option<i64>,
    /// The freshness target: the oldest pending document must be younger than this many seconds.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub fresh_within_seconds: Option<i64>,
    /// Give a field back to the default: `engine`, `preset`, `retry`, `memory_max`, `cpu_max`, `stall_seconds`,
    /// `shards`, `priority`, `expires_after_seconds`, `when_pending_at_least`, `quiet_seconds`,
    /// `max_delay_seconds`, `fresh_within_seconds` or an option's name. Repeat for several.
    #[arg(long, value_name = "FIELD")]
    pub unset: Vec<String>,
    /// Why (required; kept in the audit trail).
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Reason,
}

/// Runs `scrinalia overrides [command]`.
pub async fn run(client: &Client, out: Out, command: Option<OverrideCommand>) -> anyhow::Result<()> {
    match command {
        None => list(client, out).await,
        Some(OverrideCommand::Set(args)) => {
            let worker = args.worker.clone();
            let body = change_body(*args)?;
            let reply = client
                .put(&["workers", &worker, "override"], &body)
                .await
                .with_context(|| format!("changing the override of worker {worker}"))?;
            changed(out, &worker, reply)
        }
        Some(OverrideCommand::Clear { worker, reason }) => {
            let reply = client
                .delete(&["workers", &worker, "override"], Some(&ReasonBody::new(reason.to_string())))
                .await
                .with_context(|| format!("clearing the override of worker {worker}"))?;
            changed(out, &worker, reply)
        }
        Some(OverrideCommand::Audit { worker, limit }) => audit(client, out, &worker, limit).await,
    }
}

/// The API's partial change: each given field set, each `--unset` one `null`; a field both given and unset is
/// a usage error, as is a change of nothing.
pub fn change_body(args: SetArgs) -> Result<OverrideChange, Verdict> {
    let usage = |message: String| Verdict { exit: Exit::Usage, message };
    let mut change = OverrideChange {
        engine: args.engine.map(Some),
        preset: args.preset.map(Some),
        options: options_once(args.options)?,
        retry: None,
        memory_max: args.memory_max.map(|m| Some(MemoryMax(Value::String(m)))),
        cpu_max: args.cpu_max.map(Some),
        stall_seconds: args.stall_seconds.map(Some),
        shards: args.shards.map(Some),
        priority: args.priority.map(Some),
        expires_after_seconds: args.expires_after_seconds.map(Some),
        when_pending_at_least: args.when_pending_at_least.map(Some),
        quiet_seconds: args.quiet_seconds.map(Some),
        max_delay_seconds: args.max_delay_seconds.map(Some),
        fresh_within_seconds: args.fresh_within_seconds.map(Some),
        reason: None,
    };
    for field in args.unset {
        let taken = match field.as_str() {
            "engine" => change.engine.replace(None).is_some(),
            "preset" => change.preset.replace(None).is_some(),
            "retry" => change.retry.replace(None).is_some(),
            "memory_max" => change.memory_max.replace(None).is_some(),
            "cpu_max" => change.cpu_max.replace(None).is_some(),
            "stall_seconds" => change.stall_seconds.replace(None).is_some(),
            "shards" => change.shards.replace(None).is_some(),
            "priority" => change.priority.replace(None).is_some(),
            "expires_after_seconds" => change.expires_after_seconds.replace(None).is_some(),
            "when_pending_at_least" => change.when_pending_at_least.replace(None).is_some(),
            "quiet_seconds" => change.quiet_seconds.replace(None).is_some(),
            "max_delay_seconds" => change.max_delay_seconds.replace(None).is_some(),
            "fresh_within_seconds" => change.fresh_within_seconds.replace(None).is_some(),
            name => change.options.insert(name.to_owned(), Value::Null).is_some(),
        };
        if taken {
            return Err(usage(format!("{field} is both given and unset; give one or the other.")));
        }
    }
    if change == OverrideChange::default() {
        return Err(usage(
            "nothing to change: give --engine, --preset, --option NAME=VALUE, --memory-max, --cpu-max, \
             --stall-seconds, --shards, --priority, --expires-after-seconds, --when-pending-at-least, \
             --quiet-seconds, --max-delay-seconds, --fresh-within-seconds or --unset FIELD."
                .to_owned(),
        ));
    }
    change.reason = Some(args.reason.to_string());
    Ok(change)
}

fn changed(out: Out, worker: &str, reply: crate::client::Body) -> anyhow::Result<()> {
    if out.json {
        return out.body(&reply);
    }
    let view: OverrideView = reply.parse()?;
    let mut text = match &view.override_ {
        Some(o) => format!("Worker {worker}'s override is now {}.", values_text(&o.values)),
        None => format!("Worker {worker} has no override: its runs follow the defaults."),
    };
    if let Some(error) = view.effective_error {
        text.push_str(&format!("\nA run without arguments would not resolve now: {error}"));
    }
    text.push_str(&format!("\nSee the trail with: scrinalia overrides audit {worker}"));
    out.text(&text)
}

/// An override's values in one line: `preset=big batch_size=25`.
pub fn values_text(values: &OverrideValues) -> String {
    let fields = fields(values);
    if fields.is_empty() {
        return "empty".to_owned();
    }
    fields.iter().map(|(k, v)| format!("{k}={}", value_text(v))).collect::<Vec<_>>().join(" ")
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every field an override sets, by name (options by their own names).
fn fields(values: &OverrideValues) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    if let Some(e) = &values.engine {
        out.insert("engine".to_owned(), Value::String(e.clone()));
    }
    if let Some(p) = &values.preset {
        out.insert("preset".to_owned(), Value::String(p.clone()));
    }
    if let Some(r) = &values.retry {
        out.insert("retry".to_owned(), serde_json::to_value(r).unwrap_or_default());
    }
    if let Some(m) = &values.memory_max {
        out.insert("memory_max".to_owned(), m.0.clone());
    }
    if let Some(c) = values.cpu_max {
        out.insert("cpu_max".to_owned(), Value::from(c));
    }
    if let Some(s) = values.stall_seconds {
        out.insert("stall_seconds".to_owned(), Value::from(s));
    }
    if let Some(n) = values.shards {
        out.insert("shards".to_owned(), Value::from(n));
    }
    for (key, value) in [
        ("when_pending_at_least", values.when_pending_at_least),
        ("quiet_seconds", values.quiet_seconds),
        ("max_delay_seconds", values.max_delay_seconds),
        ("fresh_within_seconds", values.fresh_within_seconds),
    ] {
        if let Some(v) = value {
            out.insert(key.to_owned(), Value::from(v));
        }
    }
    out.extend(values.options.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// What one audit entry changed: `preset: fast → big`, `batch_size: default → 25`, field by field.
pub fn change_text(entry: &AuditEntry) -> String {
    let empty = OverrideValues::default();
    let before = fields(entry.before.as_ref().unwrap_or(&empty));
    let after = fields(entry.after.as_ref().unwrap_or(&empty));
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let side = |v: Option<&Value>| v.map_or_else(|| "default".to_owned(), value_text);
    let changes: Vec<String> = names
        .into_iter()
        .filter(|n| before.get(*n) != after.get(*n))
        .map(|n| format!("{n}: {} → {}", side(before.get(n)), side(after.get(n))))
        .collect();
    if changes.is_empty() { "nothing".to_owned() } else { changes.join(", ") }
}

async fn audit(client: &Client, out: Out, worker: &str, limit: u32) -> anyhow::Result<()> {
    let body = client
        .get(&["workers", worker, "audit"], &[("limit", limit.to_string())])
        .await
        .with_context(|| format!("reading the override audit trail of worker {worker}"))?;
    if out.json {
        return out.body(&body);
    }
    let trail: AuditView = body.parse()?;
    if trail.entries.is_empty() {
        note(&format!("The override of {worker} was never changed: its runs follow the defaults."));
        return Ok(());
    }
    let mut table = Table::new(&["AT", "BY", "ACTION", "CHANGE", "REASON"]);
    for e in &trail.entries {
        table.row(vec![
            when(e.at).into(),
            e.actor.as_str().into(),
            e.action.to_string().into(),
            Cell::from(clip(&change_text(e), 80)),
            clip(&e.reason, 60).into(),
        ]);
    }
    out.text(&table.render(out.colour))
}

async fn list(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["workers"], &[]).await.context("listing the workers")?;
    let workers: WorkersView = body.parse()?;
    let overridden: Vec<(String, Override)> =
        workers.workers.into_iter().filter_map(|w| w.override_.map(|o| (w.name, o))).collect();
    if out.json {
        let list: Vec<&Override> = overridden.iter().map(|(_, o)| o).collect();
        return out.text(&serde_json::to_string_pretty(&json!({ "overrides": list }))?);
    }
    if overridden.is_empty() {
        note("No worker has an override: every run follows the catalogue's and its code's defaults.");
        return Ok(());
    }
    let mut table = Table::new(&["WORKER", "OVERRIDE", "CHANGED", "BY"]);
    for (name, o) in &overridden {
        table.row(vec![
            name.as_str().into(),
            clip(&values_text(&o.values), 80).into(),
            when(o.updated_at).into(),
            o.updated_by.as_str().into(),
        ]);
    }
    out.text(&table.render(out.colour))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(options: &[(&str, Value)], unset: &[&str]) -> SetArgs {
        SetArgs {
            worker: "ocr".into(),
            engine: None,
            preset: Some("big".into()),
            options: options.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
            memory_max: None,
            cpu_max: None,
            stall_seconds: None,
            shards: None,
            priority: None,
            expires_after_seconds: None,
            when_pending_at_least: None,
            quiet_seconds: None,
            max_delay_seconds: None,
            fresh_within_seconds: None,
            unset: unset.iter().map(|s| (*s).to_owned()).collect(),
            reason: parse_reason("why").expect("a reason"),
        }
    }

    #[test]
    fn limits_are_set_and_unset_like_the_other_fields() {
        let mut given = args(&[], &["cpu_max"]);
        given.preset = None;
        given.memory_max = Some("4GiB".into());
        given.stall_seconds = Some(600);
        let change = change_body(given).expect("a change");
        assert_eq!(
            serde_json::to_value(change).expect("json"),
            json!({"memory_max": "4GiB", "cpu_max": null, "stall_seconds": 600, "reason": "why"})
        );
        let mut twice = args(&[], &["stall_seconds"]);
        twice.stall_seconds = Some(5);
        assert_eq!(change_body(twice).expect_err("refused").exit, Exit::Usage);
        let values =
            OverrideValues { memory_max: Some("512MiB".into()), stall_seconds: Some(30), ..Default::default() };
        assert_eq!(values_text(&values), "memory_max=512MiB stall_seconds=30");
    }

    #[test]
    fn a_change_sets_what_is_given_and_nulls_what_is_unset() {
        let change = change_body(args(&[("batch_size", json!(25))], &["engine", "language"])).expect("a change");
        assert_eq!(
            serde_json::to_value(change).expect("json"),
            json!({"preset": "big", "engine": null, "options": {"batch_size": 25, "language": null}, "reason": "why"})
        );
    }

    #[test]
    fn a_field_given_and_unset_is_a_usage_error() {
        let refused = change_body(args(&[], &["preset"])).expect_err("refused");
        assert_eq!(refused.exit, Exit::Usage);
        assert!(refused.message.contains("preset is both given and unset"), "{}", refused.message);
    }
}
