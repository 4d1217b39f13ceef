//! The archive workers' side of the protocol. `describe` reports the engine configuration and what the code
//! declares; `check` says whether the data folder (and, for the quality validator, its cleaning rule) is
//! there; `count-pending` counts the worker's pending set (or, for the conflict judge, says why it cannot);
//! `run` announces its configuration, then processes the pending documents in batches, saving the stamps and
//! reporting progress after each batch, and stopping after the current document on SIGTERM.
//!
//! Time is a parameter (`now`, Unix seconds) so tests decide what has arrived in staging.

use std::{collections::BTreeMap, fs, io::Write, path::Path, time::Duration};

use anyhow::Context as _;
use serde_json::json;

use crate::{
    config::EngineConfig,
    invocation::Invocation,
    pipeline::Stage,
    protocol::Protocol,
    rules,
    staging::Schedule,
    stop::{self, Stop},
    task::{Context, Task},
};

/// Why the conflict judge's queue is not counted.
pub const UNMEASURABLE: &str = "The conflict judge's pending set is the trigram product of every document's tags and \
entities, too costly to count; the number already judged is shown instead.";

/// `describe`: the configuration the worker would use now, and its declarations.
pub fn describe(
    task: Task,
    invocation: &Invocation,
    data: &Path,
    now: u64,
    out: &mut Protocol<impl Write>,
) -> anyhow::Result<i32> {
    if task == Task::QualityValidator {
        // On a new data folder the first use writes the rules, which this answer is about.
        Schedule::open(data, now)?;
    }
    let config = EngineConfig::of_task(task, &invocation.engine, data)?;
    out.describe(&config, task.declared())?;
    Ok(0)
}

/// `check`: `{"ready": true}`, or not ready with the sentence saying what is missing.
pub fn check(task: Task, data: &Path, now: u64, out: &mut Protocol<impl Write>) -> anyhow::Result<i32> {
    out.check(&readiness(task, data, now))?;
    Ok(0)
}

fn readiness(task: Task, data: &Path, now: u64) -> Result<(), String> {
    Schedule::open(data, now)
        .map_err(|e| format!("The demo data folder {} cannot be set up or read: {e:#}.", data.display()))?;
    let mut folders = vec![data.join("stamps")];
    if task == Task::Transfer {
        folders.push(data.join("archive"));
    }
    for folder in folders {
        writable(&folder).map_err(|e| format!("The folder {} cannot be written: {e:#}.", folder.display()))?;
    }
    if task == Task::QualityValidator {
        let rule = rules::usable(data).map_err(|e| format!("The cleaning rules cannot be read: {e:#}."))?;
        rule?;
    }
    Ok(())
}

/// Whether files can be created in `folder` (creating it if need be): a stamp save would need to.
fn writable(folder: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(folder).context("create it")?;
    let probe = folder.join(format!(".check-{}", std::process::id()));
    fs::write(&probe, b"").context("create a file in it")?;
    fs::remove_file(&probe).context("remove a file from it")
}

/// `count-pending`: `{"pending": N}`, or for the conflict judge `{"unmeasurable": …, "done": N}`.
pub fn count_pending(task: Task, data: &Path, now: u64, out: &mut Protocol<impl Write>) -> anyhow::Result<i32> {
    let stage = Stage::open(task, data, now)?;
    if task == Task::ConflictJudge {
        out.object(&json!({ "unmeasurable": UNMEASURABLE, "done": stage.done() }))?;
    } else {
        out.object(&json!({ "pending": stage.pending().len() }))?;
    }
    Ok(0)
}

/// The configuration a run uses: for the quality validator its rule, without which it cannot run.
fn run_config(task: Task, invocation: &Invocation, data: &Path) -> anyhow::Result<EngineConfig> {
    if task != Task::QualityValidator {
        return EngineConfig::of_task(task, &invocation.engine, data);
    }
    let rule = rules::usable(data)?.map_err(anyhow::Error::msg)?;
    let flags = &invocation.engine;
    if flags.engine.is_some() || flags.preset.is_some() || flags.model.is_some() {
        eprintln!(
            "{}: the engine flags are ignored: the engine comes from {} ({})",
            task.name(),
            rules::SOURCE,
            rule.reference()
        );
    }
    Ok(EngineConfig::from_rule(Some(&rule), flags))
}

/// `run`: processes the pending documents (at most `limit` of them when `limit` > 0), `batch_size` at a
/// time, sleeping `delay_ms` after each so a run is visible in the panel.
pub fn run(
    task: Task,
    invocation: &Invocation,
    data: &Path,
    now: u64,
    stop: &Stop,
    out: &mut Protocol<impl Write>,
) -> anyhow::Result<i32> {
    let name = task.name();
    let options = &invocation.options;
    let batch_size = options.count("batch_size").max(1);
    let delay = Duration::from_millis(u64::try_from(options.integer("delay_ms")).unwrap_or(0));
    let limit = options.count("limit");

    let mut stage = Stage::open(task, data, now)?;
    let config = run_config(task, invocation, data)?;
    out.config(&config)?;
    let mut pending = stage.pending();
    if limit > 0 {
        pending.truncate(limit);
    }
    let total = pending.len();
    let run_id = invocation.run_id.as_deref().unwrap_or("none");
    let reference = config.source.as_ref().and_then(|s| s.reference.as_deref());
    let from = reference.map(|r| format!(" from {r}")).unwrap_or_default();
    eprintln!(
        "{name}: run {run_id} starts: {total} of {} documents pending, batches of {batch_size}, {}{from}",
        stage.seen(),
        config.model_name(),
    );
    out.progress(0, total, Some("starting"))?;

    let context = Context { data: data.to_path_buf(), options: options.clone(), config, now };
    let (mut processed, mut failed) = (0_usize, 0_usize);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let batches = total.div_ceil(batch_size);
    let mut stopped = None;
    'batches: for (number, batch) in pending.chunks(batch_size).enumerate() {
        for id in batch {
            if let Some(signal) = stop.requested() {
                stopped = Some(signal);
                break 'batches;
            }
            match stage.item(id).and_then(|item| task.process(&item, &context)) {
                Ok(outcome) => {
                    stage.own.stamp(id, outcome.record);
                    *tally.entry(outcome.tally).or_default() += 1;
                    processed += 1;
                    eprintln!("{name}: processed {id}");
                }
                Err(error) => {
                    failed += 1;
                    eprintln!("{name}: failed {id}: {error:#}");
                }
            }
            if let Some(signal) = stop.sleep(delay) {
                stopped = Some(signal);
                break 'batches;
            }
        }
        stage.own.save()?;
        let message = format!("batch {} of {batches}", number + 1);
        out.progress(processed + failed, total, Some(&message))?;
    }
    stage.own.save()?;

    let mut result = json!({ "processed": processed, "failed": failed, task.tally_name(): tally });
    if let Some(signal) = stopped {
        result["stopped"] = json!(signal.as_str());
        out.result(result)?;
        eprintln!("{name}: stopped on {signal} after {processed} documents; the rest stay pending");
        return Ok(stop::exit_status(signal));
    }
    out.result(result)?;
    eprintln!("{name}: run {run_id} done: {processed} processed, {failed} failed");
    // Documents that failed are counted in the result; the run itself succeeded.
    Ok(0)
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
