//! The archive workers' side of the protocol. `describe` reports the engine configuration and what the code
//! declares; `check` says whether the data folder (and, for the quality validator, its cleaning rule) is
//! there; `count-pending` counts the worker's pending set (or, for the conflict judge, says why it cannot);
//! `run` settles its worklist (the documents pending at its start, or, resuming or restarting, an earlier run's:
//! see `worklist.rs`), announces its configuration, then processes the worklist in batches; after each batch it
//! saves the stamps, journals the documents stamped, prints a checkpoint and reports progress, and on SIGTERM it
//! stops after the current document, saving, journaling and checkpointing what it finished.
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
    worklist::{Checkpoint, Journal, Plan, REFUSED, Refusal, Start},
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

/// `run`: processes its worklist (at most `limit` pending documents when `limit` > 0, for a fresh run),
/// `batch_size` at a time, sleeping `delay_ms` after each document so a run is visible in the panel. A checkpoint
/// it cannot follow ends it with [`REFUSED`] and a sentence on stderr before any work.
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

    let start = match Start::of(invocation.checkpoint.as_deref(), invocation.restart_of.as_deref()) {
        Ok(start) => start,
        Err(sentence) => return Ok(refused(name, &sentence)),
    };
    let mut stage = Stage::open(task, data, now)?;
    let mut pending = stage.pending();
    if limit > 0 {
        pending.truncate(limit);
    }
    let run_id = invocation.run_id.as_deref();
    let plan = match Plan::settle(data, name, run_id, start, pending, now) {
        Ok(plan) => plan,
        Err(error) => match error.downcast::<Refusal>() {
            Ok(Refusal(sentence)) => return Ok(refused(name, &sentence)),
            Err(error) => return Err(error),
        },
    };
    let config = run_config(task, invocation, data)?;
    out.config(&config)?;
    for note in &plan.notes {
        eprintln!("{name}: {note}");
    }
    let Plan { documents, worklist_of, from, finished, continues, .. } = plan;
    let total = documents.len();
    let shown_id = run_id.unwrap_or("none");
    let reference = config.source.as_ref().and_then(|s| s.reference.as_deref());
    let source = reference.map(|r| format!(" from {r}")).unwrap_or_default();
    let work = continues.unwrap_or_else(|| format!("{total} of {} documents pending", stage.seen()));
    eprintln!("{name}: run {shown_id} starts: {work}, batches of {batch_size}, {}{source}", config.model_name());
    out.progress(from, total, Some(if from > 0 { "resuming" } else { "starting" }))?;

    let context = Context { data: data.to_path_buf(), options: options.clone(), config, now };
    let journal = Journal::of(data, name);
    let (mut processed, mut failed, mut skipped) = (0_usize, 0_usize, 0_usize);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let rest = &documents[from..];
    let batches = rest.len().div_ceil(batch_size);
    let (mut position, mut checkpointed) = (from, from);
    let mut stopped = None;
    for (number, batch) in rest.chunks(batch_size).enumerate() {
        let mut stamped = Vec::new();
        for id in batch {
            if let Some(signal) = stop.requested() {
                stopped = Some(signal);
                break;
            }
            position += 1;
            if finished.contains(id) {
                skipped += 1;
                eprintln!("{name}: skipped {id}: the results journal shows it finished in this worklist already");
                continue;
            }
            match stage.item(id).and_then(|item| task.process(&item, &context)) {
                Ok(outcome) => {
                    stage.own.stamp(id, outcome.record);
                    stamped.push(json!({
                        "document": id, "run": run_id, "worklist_of": worklist_of, "stamp": task.stamp(),
                        "tally": outcome.tally,
                    }));
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
                break;
            }
        }
        // The stamps first, then the journal that proves them, then the checkpoint that relies on both.
        stage.own.save()?;
        journal.append(&stamped)?;
        if let Some(worklist_of) = worklist_of.as_ref().filter(|_| position > checkpointed) {
            out.checkpoint(&Checkpoint { worklist_of: worklist_of.clone(), done: position }.json())?;
            checkpointed = position;
        }
        if stopped.is_some() {
            break;
        }
        let message = format!("batch {} of {batches}", number + 1);
        out.progress(position, total, Some(&message))?;
    }
    stage.own.save()?;

    let mut result = json!({ "processed": processed, "failed": failed, task.tally_name(): tally });
    if skipped > 0 {
        result["skipped"] = json!(skipped);
    }
    if let Some(signal) = stopped {
        result["stopped"] = json!(signal.as_str());
        out.result(result)?;
        eprintln!(
            "{name}: stopped on {signal} after {processed} documents, {position} of the worklist's {total} finished; \
             the rest stay pending"
        );
        return Ok(stop::exit_status(signal));
    }
    out.result(result)?;
    eprintln!("{name}: run {shown_id} done: {processed} processed, {failed} failed");
    // Documents that failed are counted in the result; the run itself succeeded.
    Ok(0)
}

/// Says on stderr why the run cannot start as asked; the exit status.
fn refused(name: &str, sentence: &str) -> i32 {
    eprintln!("{name}: {sentence}");
    REFUSED
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
