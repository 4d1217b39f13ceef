//! The definition a schedule's create or edit sends, built from the command line: an edit applies its flags to
//! the current definition, and `--option` values go where a worker or a pipeline expects them (pipelines share
//! this with `scrinalia pipelines run`).

use std::collections::BTreeMap;

use scrinalia_wire::{Schedule, ScheduleInput, TargetKind};
use serde_json::{Map, Value};

use crate::{
    args::ScheduleEditArgs,
    commands::options_once,
    exit::{Exit, Verdict},
};

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
        reason: Some(args.reason.to_string()),
        tags: if args.common.tags.is_empty() { current.tags } else { args.common.tags },
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

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::{
        args::{Cli, Command, ScheduleCommand},
        schedules::sample as schedule,
    };

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
}
