//! The archive workers' side of the protocol: `count-pending` counts the documents that lack the worker's stamp
//! (or, for the conflict judge, says why it cannot), and `run` processes them in batches, saving the stamps and
//! reporting progress after each batch, and stopping after the current document on SIGTERM.

use std::{collections::BTreeMap, time::Duration};

use serde_json::json;

use crate::{
    corpus::{self, Corpus},
    invocation::Invocation,
    protocol::Protocol,
    stamps::StampBook,
    stop::{self, Stop},
    task::{Context, Task},
};

/// Why the conflict judge's queue is not counted.
pub const UNMEASURABLE: &str = "The conflict judge's pending set is the trigram product of every document's tags and \
entities, too costly to count; the number already judged is shown instead.";

/// `count-pending`: `{"pending": N}`, or for the conflict judge `{"unmeasurable": …, "done": N}`.
pub fn count_pending(task: Task, out: &mut Protocol) -> anyhow::Result<i32> {
    let data = corpus::data_dir();
    let corpus = Corpus::open(&data)?;
    let book = StampBook::load(&data, task.name(), task.stamp())?;
    if task == Task::ConflictJudge {
        let done = corpus.documents.iter().filter(|d| book.has(&d.id)).count();
        out.object(&json!({ "unmeasurable": UNMEASURABLE, "done": done }))?;
    } else {
        let pending = corpus.documents.iter().filter(|d| !book.has(&d.id)).count();
        out.object(&json!({ "pending": pending }))?;
    }
    Ok(0)
}

/// `run`: processes the unstamped documents (at most `limit` of them when `limit` > 0), `batch_size` at a
/// time, sleeping `delay_ms` after each so a run is visible in the panel.
pub fn run(task: Task, invocation: &Invocation, stop: &Stop, out: &mut Protocol) -> anyhow::Result<i32> {
    let name = task.name();
    let options = &invocation.options;
    let batch_size = usize::try_from(options.integer("batch_size", 10)).unwrap_or(1).max(1);
    let delay = Duration::from_millis(u64::try_from(options.integer("delay_ms", 20)).unwrap_or(0));
    let limit = usize::try_from(options.integer("limit", 0)).unwrap_or(0);

    let data = corpus::data_dir();
    let corpus = Corpus::open(&data)?;
    let mut book = StampBook::load(&data, name, task.stamp())?;
    let mut pending: Vec<_> = corpus.documents.iter().filter(|d| !book.has(&d.id)).collect();
    if limit > 0 {
        pending.truncate(limit);
    }
    let total = pending.len();
    let run_id = invocation.run_id.as_deref().unwrap_or("none");
    eprintln!(
        "{name}: run {run_id} starts: {total} of {} documents pending, batches of {batch_size}",
        corpus.documents.len()
    );
    out.progress(0, total, Some("starting"))?;

    let context = Context { data, options: options.clone(), engine: invocation.engine.clone() };
    let (mut processed, mut failed) = (0_usize, 0_usize);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let batches = total.div_ceil(batch_size);
    let mut stopped = None;
    'batches: for (number, batch) in pending.chunks(batch_size).enumerate() {
        for document in batch {
            if let Some(signal) = stop.requested() {
                stopped = Some(signal);
                break 'batches;
            }
            match task.process(document, &context) {
                Ok(outcome) => {
                    book.stamp(&document.id, outcome.record);
                    *tally.entry(outcome.tally).or_default() += 1;
                    processed += 1;
                    eprintln!("{name}: processed {}", document.id);
                }
                Err(error) => {
                    failed += 1;
                    eprintln!("{name}: failed {}: {error:#}", document.id);
                }
            }
            if let Some(signal) = stop.sleep(delay) {
                stopped = Some(signal);
                break 'batches;
            }
        }
        book.save()?;
        let message = format!("batch {} of {batches}", number + 1);
        out.progress(processed + failed, total, Some(&message))?;
    }
    book.save()?;

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
