//! The archive workers' side of the protocol. `describe` reports the engine configuration and what the code
//! declares; `check` says whether the data folder (and, for the quality validator, its cleaning rule) is
//! there; `count-pending` counts the worker's pending set (or, for the conflict judge, says why it cannot);
//! `run` settles its worklist (the documents pending at its start, or, resuming or restarting, an earlier run's:
//! see `worklist.rs`), announces its configuration, then processes the worklist in batches; after each batch it
//! saves the stamps, journals the documents stamped, prints the batch's item lines and a checkpoint and reports
//! progress, and on SIGTERM it stops after the current document, saving, journaling and checkpointing what it
//! finished; asked to yield (SIGUSR1), it finishes the batch it is on as always, then exits 75 after the batch's
//! checkpoint (at the last batch there is nothing left to yield, so it just ends). A run honours its item lists (`item_lists.rs`): only the documents of its scope, never a quarantined
//! one; a document a task fails is a failed item, which does not fail the run. A sharded run (`SCRINALIA_SHARD`)
//! works only on the documents of its shard, as if the others were outside its scope: its worklist, progress,
//! counts and journal are its share's (each journal line names the shard), and `count-pending` given a shard
//! counts that share. A worker whose configuration
//! names a model reports after each batch the tokens its run would have sent and received ([`Tokens`]).
//!
//! Time is a parameter (`now`, Unix seconds) so tests decide what has arrived in staging.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::Write,
    path::Path,
    time::Duration,
};

use anyhow::Context as _;
use scrinalia_wire::{YIELDED_EXIT_STATUS, shard::Shard};
use serde_json::{Value, json};

use crate::{
    config::EngineConfig,
    invocation::{ITEMS_ONLY_ENV, ITEMS_SKIP_ENV, Invocation, SHARD_ENV},
    item_lists::ItemLists,
    pipeline::Stage,
    protocol::Protocol,
    rules,
    staging::Schedule,
    stop::{self, Stop},
    task::{Context, Failure, Task},
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
    out.describe(&config, task.declared(), task.capabilities())?;
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

/// `count-pending`: `{"pending": N}`, or for the conflict judge `{"unmeasurable": …, "done": N}`; given a shard,
/// only the documents of that shard count.
pub fn count_pending(
    task: Task,
    data: &Path,
    now: u64,
    shard: Option<Shard>,
    out: &mut Protocol<impl Write>,
) -> anyhow::Result<i32> {
    let stage = Stage::open(task, data, now)?;
    let held = |id: &str| shard.is_none_or(|shard| shard.holds(id));
    if task == Task::ConflictJudge {
        out.object(&json!({ "unmeasurable": UNMEASURABLE, "done": stage.done(held) }))?;
    } else {
        out.object(&json!({ "pending": stage.pending().iter().filter(|id| held(id)).count() }))?;
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
///
/// Every document it handles is an item line: `succeeded` once its stamp is saved and journaled (with the rest
/// of its batch, before the batch's checkpoint), `failed` with a class and a sentence (it stays pending), or
/// `skipped`: quarantined (`SCRINALIA_ITEMS_SKIP`: never processed, stamped or journaled), `already_done` (a
/// resume's document the journal shows finished), and for a scoped run (`SCRINALIA_ITEMS_ONLY`, which narrows the
/// pending set) each id of the scope it does not get to, `not_pending` or `over_limit`. Failed documents do not
/// fail the run: it exits 0 and its result counts them, by class.
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
    let lists = ItemLists::of(invocation)?;
    let mut stage = Stage::open(task, data, now)?;
    // A fresh worklist: the pending documents of the scope and the shard, less the quarantined ones, at most
    // `limit`.
    let mut pending = stage.pending();
    pending.retain(|id| !lists.out_of_scope(id));
    let quarantined_now: Vec<String> = pending.iter().filter(|id| lists.skips(id)).cloned().collect();
    pending.retain(|id| !lists.skips(id));
    let beyond_limit = if limit > 0 && pending.len() > limit { pending.split_off(limit) } else { Vec::new() };
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
    let Plan { documents, worklist_of, drawn_now, from, finished, continues, .. } = plan;
    let total = documents.len();
    let shown_id = run_id.unwrap_or("none");
    let reference = config.source.as_ref().and_then(|s| s.reference.as_deref());
    let source = reference.map(|r| format!(" from {r}")).unwrap_or_default();
    let seen = stage.seen(|id| lists.in_shard(id));
    let work = continues.unwrap_or_else(|| match quarantined_now.len() {
        0 => format!("{total} of {seen} documents pending"),
        left_out => format!("{total} of {seen} documents pending, {left_out} quarantined left out"),
    });
    eprintln!("{name}: run {shown_id} starts: {work}, batches of {batch_size}, {}{source}", config.model_name());
    if let Some(shard) = lists.shard {
        eprintln!(
            "{name}: shard {shard} ({SHARD_ENV}): only the documents of shard {} of {}",
            shard.index, shard.count
        );
    }
    if let Some(only) = &lists.only {
        eprintln!("{name}: scoped to {} documents ({ITEMS_ONLY_ENV})", only.len());
    }
    if !lists.skip.is_empty() {
        eprintln!("{name}: quarantined, to be left untouched ({ITEMS_SKIP_ENV}): {} documents", lists.skip.len());
    }

    // What this run does not get to, said first: the quarantined documents a fresh worklist left out, and the
    // ids of its scope that are not in its worklist (those of another shard are that shard's to report).
    let mut items = Items::default();
    if drawn_now {
        for id in &quarantined_now {
            items.quarantined(name, id);
        }
    }
    if let Some(only) = &lists.only {
        let listed: BTreeSet<&str> = documents.iter().map(String::as_str).collect();
        let reported: BTreeSet<&str> =
            if drawn_now { quarantined_now.iter().map(String::as_str).collect() } else { BTreeSet::new() };
        let unlisted = |id: &&String| !listed.contains(id.as_str()) && !reported.contains(id.as_str());
        for id in only.iter().filter(unlisted).filter(|id| lists.in_shard(id)) {
            if drawn_now && beyond_limit.contains(id) {
                let sentence = format!("It is pending, but beyond this run's limit of {limit} documents.");
                items.skipped(id, "over_limit", sentence);
            } else {
                let sentence = if drawn_now {
                    format!(
                        "It is not pending for {name}: it has not arrived, the workers {name} reads from have not \
                         stamped it, or {name} has stamped it already."
                    )
                } else {
                    "It is not in the worklist this run continues.".to_owned()
                };
                items.skipped(id, "not_pending", sentence);
            }
        }
    }
    items.flush(out)?;
    out.progress(from, total, Some(if from > 0 { "resuming" } else { "starting" }))?;

    let context = Context { data: data.to_path_buf(), options: options.clone(), config, now };
    let journal = Journal::of(data, name);
    let (mut processed, mut failed, mut skipped) = (0_usize, 0_usize, 0_usize);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let rest = &documents[from..];
    let batches = rest.len().div_ceil(batch_size);
    let (mut position, mut checkpointed) = (from, from);
    let (mut stopped, mut yielded) = (None, false);
    // Only a model is paid in tokens: a worker without one (the transfer, the language detection) reports none.
    let mut tokens = context.config.model.is_some().then(Tokens::default);
    for (number, batch) in rest.chunks(batch_size).enumerate() {
        let mut stamped = Vec::new();
        for id in batch {
            if let Some(signal) = stop.requested() {
                stopped = Some(signal);
                break;
            }
            position += 1;
            if lists.out_of_scope(id) {
                // A resumed or restarted worklist holds documents outside this run's scope or shard: not its items.
                continue;
            }
            if finished.contains(id) {
                skipped += 1;
                eprintln!("{name}: skipped {id}: the results journal shows it finished in this worklist already");
                let sentence = "The results journal shows it finished in this worklist already.".to_owned();
                items.skipped(id, "already_done", sentence);
                continue;
            }
            if lists.skips(id) {
                items.quarantined(name, id);
                continue;
            }
            let done = stage.item(id).map_err(|e| Failure { class: "unreadable", sentence: format!("{e:#}.") });
            let chars = done.as_ref().map_or(0, |item| item.document.text().chars().count());
            match done.and_then(|item| task.process(&item, &context).map_err(failure)) {
                Ok(outcome) => {
                    if let Some(tokens) = tokens.as_mut() {
                        tokens.document(task, chars);
                    }
                    stage.own.stamp(id, outcome.record);
                    let mut line = json!({
                        "document": id, "run": run_id, "worklist_of": worklist_of, "stamp": task.stamp(),
                        "tally": outcome.tally,
                    });
                    if let Some(shard) = lists.shard {
                        line["shard"] = json!(shard.to_string());
                    }
                    stamped.push(line);
                    *tally.entry(outcome.tally).or_default() += 1;
                    processed += 1;
                    items.succeeded(id);
                    eprintln!("{name}: processed {id}");
                }
                Err(Failure { class, sentence }) => {
                    failed += 1;
                    eprintln!("{name}: failed {id} ({class}): {sentence}");
                    items.failed(id, class, sentence);
                }
            }
            if let Some(signal) = stop.sleep(delay) {
                stopped = Some(signal);
                break;
            }
        }
        // The stamps first, then the journal that proves them, then the batch's items, then the checkpoint that
        // relies on all of them.
        stage.own.save()?;
        journal.append(&stamped)?;
        items.flush(out)?;
        if let Some(worklist_of) = worklist_of.as_ref().filter(|_| position > checkpointed) {
            out.checkpoint(&Checkpoint { worklist_of: worklist_of.clone(), done: position }.json())?;
            checkpointed = position;
        }
        if let Some(tokens) = &tokens {
            out.object(&tokens.line())?;
        }
        if stopped.is_some() {
            break;
        }
        // A yield waits for the end of a batch, where all of it is saved, journaled and checkpointed: a resume
        // from that checkpoint starts with the next document. Without a checkpoint there is nowhere to resume.
        if stop.yield_requested() && worklist_of.is_some() && number + 1 < batches {
            yielded = true;
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
    if let Some(shard) = lists.shard {
        result["shard"] = json!(shard.to_string());
    }
    items.count_into(&mut result);
    if let Some(signal) = stopped {
        result["stopped"] = json!(signal.as_str());
        out.result(result)?;
        eprintln!(
            "{name}: stopped on {signal} after {processed} documents, {position} of the worklist's {total} finished; \
             the rest stay pending"
        );
        return Ok(stop::exit_status(signal));
    }
    if yielded {
        result["yielded"] = json!(true);
        out.result(result)?;
        eprintln!(
            "{name}: yielded as asked after {processed} documents, {position} of the worklist's {total} finished \
             and checkpointed; a resume goes on from there"
        );
        return Ok(YIELDED_EXIT_STATUS);
    }
    out.result(result)?;
    let quarantined = items.skipped.get("quarantined").copied().unwrap_or(0);
    eprintln!(
        "{name}: run {shown_id} done: {processed} processed, {failed} failed, {quarantined} quarantined untouched"
    );
    // Documents that failed are counted in the result and reported as items; the run itself succeeded.
    Ok(0)
}

/// The tokens a run's model calls would have cost, so far: a document of `n` characters is about `n / 4` tokens
/// in (a token is about four characters of text), and the model writes back a share of that, by task
/// ([`output_share`]). A failed document reached no model (the summaries refuse an empty or overlong letter
/// before sending it), so it costs nothing. The demo's engines (ollama, spaCy) run locally: no money is spent,
/// so the usage line has no `cost` and no `currency`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tokens {
    tokens_in: u64,
    tokens_out: u64,
}

impl Tokens {
    /// Counts one document of `chars` characters that `task`'s model read.
    fn document(&mut self, task: Task, chars: usize) {
        let read = u64::try_from(chars).unwrap_or(u64::MAX).div_ceil(4);
        let (numerator, denominator) = output_share(task);
        self.tokens_in += read;
        self.tokens_out += read * numerator / denominator;
    }

    /// The protocol line, cumulative for the run: `{"usage": {"tokens_in": n, "tokens_out": m}}`.
    fn line(&self) -> Value {
        json!({ "usage": { "tokens_in": self.tokens_in, "tokens_out": self.tokens_out } })
    }
}

/// How many tokens `task`'s model writes for each token it reads: a summary an eighth of the letter, a verdict
/// or a list of tags or names a little, an embedding none (it returns numbers, not text).
fn output_share(task: Task) -> (u64, u64) {
    match task {
        Task::Summarize => (1, 8),
        Task::EntityExtract | Task::QualityValidator => (1, 10),
        Task::TagSuggest | Task::ConflictJudge => (1, 20),
        Task::TopicCluster => (1, 40),
        Task::Embed | Task::Transfer | Task::LanguageDetect => (0, 1),
    }
}

/// A task's error as a failed item: a [`Failure`] as it is, anything else of class `error`.
fn failure(error: anyhow::Error) -> Failure {
    match error.downcast::<Failure>() {
        Ok(failure) => failure,
        Err(error) => Failure { class: "error", sentence: format!("{error:#}.") },
    }
}

/// The item lines of a run, held until what they say is kept, and their counts for its result.
#[derive(Debug, Default)]
struct Items {
    /// (id, outcome, class, error), not printed yet.
    waiting: Vec<(String, &'static str, Option<&'static str>, Option<String>)>,
    /// Failed items by class.
    failures: BTreeMap<&'static str, usize>,
    /// Skipped items by class.
    skipped: BTreeMap<&'static str, usize>,
}

impl Items {
    fn succeeded(&mut self, id: &str) {
        self.waiting.push((id.to_owned(), "succeeded", None, None));
    }

    fn failed(&mut self, id: &str, class: &'static str, sentence: String) {
        *self.failures.entry(class).or_default() += 1;
        self.waiting.push((id.to_owned(), "failed", Some(class), Some(sentence)));
    }

    fn skipped(&mut self, id: &str, class: &'static str, sentence: String) {
        *self.skipped.entry(class).or_default() += 1;
        self.waiting.push((id.to_owned(), "skipped", Some(class), Some(sentence)));
    }

    /// A quarantined document, left untouched.
    fn quarantined(&mut self, name: &str, id: &str) {
        eprintln!("{name}: skipped {id}: it is quarantined ({ITEMS_SKIP_ENV}), so it is left untouched");
        self.skipped(id, "quarantined", "It is quarantined, so this run left it untouched.".to_owned());
    }

    /// Prints the waiting lines.
    fn flush(&mut self, out: &mut Protocol<impl Write>) -> anyhow::Result<()> {
        for (id, outcome, class, error) in self.waiting.drain(..) {
            out.item(&id, outcome, class, error.as_deref())?;
        }
        Ok(())
    }

    /// Adds the counts a result shows: `failures` by class, and `quarantined`, `not_pending` and `over_limit`
    /// (`already_done` is the result's `skipped`), each only when there are some.
    fn count_into(&self, result: &mut Value) {
        if !self.failures.is_empty() {
            result["failures"] = json!(self.failures);
        }
        for class in ["quarantined", "not_pending", "over_limit"] {
            if let Some(count) = self.skipped.get(class) {
                result[class] = json!(count);
            }
        }
    }
}

/// Says on stderr why the run cannot start as asked; the exit status.
fn refused(name: &str, sentence: &str) -> i32 {
    eprintln!("{name}: {sentence}");
    REFUSED
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
