//! The probe workers (`probe-1`, `probe-2`, `probe-3`, and any `probe-<n>`): no real work, but behaviour that tests
//! steer through options (duration, exit status, crash, ignoring SIGTERM, progress, checkpoints and output
//! volume), and a ledger of every execution in `$SCRINALIA_PROBE_LOG` so tests can prove what ran, when, where,
//! with which arguments and from which checkpoint: a start line records the parsed `SCRINALIA_CHECKPOINT` (null
//! without one; text that is no JSON is kept as `checkpoint_text`) and `SCRINALIA_RESTART_OF`. `run` prints
//! `checkpoints` lines `{"checkpoint": {"step": i}}` spread over its duration (after `silent_after_ms`, no
//! progress, item or checkpoint line: the ledger records a `silent` line then, for the stall watchdog's tests),
//! and with `oversized_checkpoint`
//! one checkpoint just over the daemon's 64 KiB at the end. With `items`, it reports item lines (every
//! `failed_every`-th failed, in three classes): all at the start, or with checkpoints, the block before each
//! checkpoint (a resumed run goes on after the items its checkpoint counts), each block recorded in the ledger
//! before it is printed (`probe_items.rs`); `malformed_items` prints refused item lines first. It reports only the items of its scope
//! (`SCRINALIA_ITEMS_ONLY`) and reports those it must skip (`SCRINALIA_ITEMS_SKIP`) as skipped, untouched. `check` answers ready unless
//! `$SCRINALIA_PROBE_NOT_READY` holds a sentence, which is then the reason. A probe declares the `shards`
//! capability: given `SCRINALIA_SHARD`, it reports only the items of that shard, and its start line records it.
//! The start line also records every `SCRINALIA_RESOURCE_<NAME>` it was given (its slots of daemon-scoped resources).
//! A probe declares `yield`: asked with SIGUSR1, it goes on to its next checkpoint (the time between two stands for
//! a batch), prints it and exits 75, its ledger's end line saying `yielded`; at its last checkpoint, or without
//! checkpoints, there is nothing to yield and it runs to its end.

use std::{
    fs::OpenOptions,
    io::Write,
    path::PathBuf,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use scrinalia_wire::YIELDED_EXIT_STATUS;
use serde_json::{Value, json};

use crate::{
    config::EngineConfig,
    invocation::{Invocation, Verb},
    item_lists::ItemLists,
    options,
    probe_items::{ItemOutput, WriteTimes, resumed_after},
    probe_options::OPTIONS,
    probe_usage,
    protocol::{MAX_CHECKPOINT_BYTES, Protocol},
    stop::{self, Stop},
};

/// The environment variable naming the probes' JSON-lines ledger.
pub const LOG_ENV: &str = "SCRINALIA_PROBE_LOG";

/// The environment variable that makes `check` answer not ready, with its value as the reason.
pub const NOT_READY_ENV: &str = "SCRINALIA_PROBE_NOT_READY";

/// The probes' names as listed by `help`; any `probe-<n>` (n a positive decimal number) is a probe too, so a
/// catalogue may declare as many as a test needs.
pub const NAMES: [&str; 4] = ["probe-1", "probe-2", "probe-3", "probe-<n>"];

/// Whether `name` is a probe: `probe-` and a positive decimal number without leading zeros.
pub fn is_probe(name: &str) -> bool {
    name.strip_prefix("probe-")
        .is_some_and(|n| !n.is_empty() && !n.starts_with('0') && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What a probe can do: report items, take a scope and a skip list, checkpoint and resume, take a shard, yield.
fn capabilities() -> Value {
    json!({ "items": true, "scope": true, "checkpoints": true, "shards": true, "yield": true })
}

/// `describe`'s `declared` section of a probe: its options, and no engine of its own.
pub fn declared() -> Value {
    json!({ "options": options::declared(OPTIONS), "engine": null, "preset": null, "presets": {} })
}

/// The answer of `check`: ready, unless the environment says otherwise.
fn readiness(not_ready: Option<String>) -> Result<(), String> {
    match not_ready.filter(|reason| !reason.trim().is_empty()) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// One line of the probe ledger, appended with a single `write` to a file opened with `O_APPEND`, so lines of
/// concurrent probes never interleave.
struct Ledger {
    path: Option<PathBuf>,
    worker: String,
    verb: &'static str,
    run_id: Option<String>,
}

impl Ledger {
    fn record(&self, event: &str, extra: Value) -> anyhow::Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        let mut line = json!({
            "event": event,
            "worker": self.worker,
            "verb": self.verb,
            "run_id": self.run_id,
            "pid": std::process::id(),
            "at_ns": now_ns(),
        });
        if let (Some(line), Value::Object(extra)) = (line.as_object_mut(), extra) {
            line.extend(extra);
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("open the probe log {}", path.display()))?;
        file.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| file.flush())
            .with_context(|| format!("append to the probe log {}", path.display()))
    }

    /// Records items `from..=to` before they are printed (nothing for an empty range or without a ledger), so
    /// that what the ledger holds is at least what the worker printed.
    fn items(&self, output: &ItemOutput, (from, to): (i64, i64)) -> anyhow::Result<()> {
        if self.path.is_none() || from > to {
            return Ok(());
        }
        self.record("items", output.record((from, to)))
    }
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// Runs one probe execution; returns the exit status.
pub fn execute(invocation: &Invocation, out: &mut Protocol) -> anyhow::Result<i32> {
    let options = &invocation.options;
    let ignore_sigterm = options.boolean("ignore_sigterm");
    // Signals are blocked before any other thread exists, so none of them can receive SIGTERM by default.
    let stop = match invocation.verb {
        Verb::Run if ignore_sigterm => Some(Stop::ignoring_sigterm()?),
        Verb::Run => Some(Stop::on_sigterm()?),
        Verb::Describe | Verb::CountPending | Verb::Check => None,
    };
    let ledger = Ledger {
        path: std::env::var_os(LOG_ENV).filter(|p| !p.is_empty()).map(PathBuf::from),
        worker: invocation.worker.clone(),
        verb: invocation.verb.name(),
        run_id: invocation.run_id.clone(),
    };
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let traceparent = std::env::var("TRACEPARENT").ok();
    let shard = invocation.shard.map(|shard| shard.to_string());
    let resources: serde_json::Map<String, Value> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SCRINALIA_RESOURCE_"))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let mut start = json!({ "traceparent": traceparent, "args": args, "shard": shard, "resources": resources });
    start.as_object_mut().into_iter().for_each(|line| line.extend(continued(invocation)));
    ledger.record("start", start)?;
    let mut writes = Value::Null;
    let (status, outcome): (i32, String) = match stop {
        None => {
            match invocation.verb {
                Verb::Describe => {
                    out.describe(&EngineConfig::from_flags(&invocation.engine), declared(), capabilities())?
                }
                Verb::Check => out.check(&readiness(std::env::var(NOT_READY_ENV).ok()))?,
                Verb::CountPending | Verb::Run => out.object(&json!({ "pending": 0 }))?,
            }
            (0, "exit".to_owned())
        }
        Some(stop) => match run(invocation, &stop, (out, &ledger), &mut writes)? {
            Ending::Exit(status) => (status, "exit".to_owned()),
            Ending::Yielded => (YIELDED_EXIT_STATUS, "yielded".to_owned()),
            // "sigterm" (or "sigint" when stopped from a terminal).
            Ending::Signal(signal) => (stop::exit_status(signal), signal.as_str().to_lowercase()),
        },
    };
    ledger.record("end", json!({ "outcome": outcome, "exit_code": status, "writes": writes }))?;
    Ok(status)
}

/// What the probe log's start line says a run continues: `checkpoint` (the parsed `SCRINALIA_CHECKPOINT`, or
/// null), `restart_of`, and `checkpoint_text` when the checkpoint is no JSON.
fn continued(invocation: &Invocation) -> serde_json::Map<String, Value> {
    let mut fields = serde_json::Map::new();
    let text = invocation.checkpoint.as_deref();
    let parsed = text.map(serde_json::from_str::<Value>);
    fields.insert("checkpoint".into(), parsed.as_ref().and_then(|p| p.as_ref().ok()).cloned().unwrap_or(Value::Null));
    if let (Some(text), Some(Err(_))) = (text, &parsed) {
        fields.insert("checkpoint_text".into(), json!(text));
    }
    fields.insert("restart_of".into(), json!(invocation.restart_of));
    fields
}

/// How a probe run ended by itself.
enum Ending {
    /// With this exit status.
    Exit(i32),
    /// Stopped by this signal.
    Signal(nix::sys::signal::Signal),
    /// Asked to yield, it stopped at a checkpoint.
    Yielded,
}

/// Whether a probe asked to yield (`asked`) stops at checkpoint `i` of `checkpoints`: at any but the last, after
/// which nothing is left to resume.
fn yields_at(i: u32, checkpoints: u32, asked: bool) -> bool {
    asked && i < checkpoints
}

/// Something a probe run does at a moment of its duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Beat {
    /// Progress line `i` of the steps.
    Progress(u32),
    /// The block of items checkpoint `i` stands for, halfway since the checkpoint before: a run stopped between
    /// the two has reported items its last checkpoint does not cover, which its resume reports again.
    Items(u32),
    /// Checkpoint line `i`.
    Checkpoint(u32),
    /// Abort, as `crash` asks.
    Crash,
    /// The checkpoint over the size limit.
    Oversized,
    /// The end of the duration.
    End,
}

/// What a run does when: progress step `i` of `steps` at `i / steps` of the duration, checkpoint `i` of
/// `checkpoints` at `i / checkpoints` (with `items`, its block of items halfway since the one before), the crash
/// after half the progress steps (at the end without any), the oversized checkpoint at the end. At one moment
/// progress comes first, then items, then checkpoints, then the crash.
fn timeline(
    duration: Duration,
    steps: u32,
    (checkpoints, items): (u32, bool),
    crash: bool,
    oversized: bool,
) -> Vec<(Duration, Beat)> {
    let at = |i: u32, n: u32| duration * i / n;
    let mut beats: Vec<(Duration, Beat)> = (1..=steps).map(|i| (at(i, steps), Beat::Progress(i))).collect();
    beats.extend((1..=checkpoints).map(|i| (at(i, checkpoints), Beat::Checkpoint(i))));
    if items {
        beats.extend((1..=checkpoints).map(|i| (at(2 * i - 1, 2 * checkpoints), Beat::Items(i))));
    }
    if crash {
        let slices = steps.max(1);
        beats.push((at(slices.div_ceil(2), slices), Beat::Crash));
    }
    if oversized {
        beats.push((duration, Beat::Oversized));
    }
    beats.push((duration, Beat::End));
    beats.sort();
    beats
}

/// A checkpoint whose JSON text is one byte over [`MAX_CHECKPOINT_BYTES`], so the daemon refuses it (the line,
/// with its wrapping, still fits the daemon's longest relayed line).
fn oversized_checkpoint() -> Value {
    let bare = json!({ "oversized": true, "padding": "" }).to_string().len();
    json!({ "oversized": true, "padding": "x".repeat(MAX_CHECKPOINT_BYTES + 1 - bare) })
}

/// Runs the probe; `writes` gets how long its item lines took to write, when it printed some.
fn run(
    invocation: &Invocation,
    stop: &Stop,
    (out, ledger): (&mut Protocol, &Ledger),
    writes: &mut Value,
) -> anyhow::Result<Ending> {
    let name = &invocation.worker;
    let options = &invocation.options;
    let duration = Duration::from_millis(u64::try_from(options.integer("duration_ms")).unwrap_or(0));
    let exit_code = i32::try_from(options.integer("exit_code")).unwrap_or(1);
    let crash = options.boolean("crash");
    let steps = u32::try_from(options.integer("progress_steps")).unwrap_or(0);
    let checkpoints = u32::try_from(options.integer("checkpoints")).unwrap_or(0);
    let lines = options.integer("output_lines").max(0);
    let run_id = invocation.run_id.as_deref().unwrap_or("none");

    out.config(&EngineConfig::from_flags(&invocation.engine))?;

    eprintln!(
        "{name}: run {run_id} starts (pid {}), {} ms, {steps} progress steps, {checkpoints} checkpoints",
        std::process::id(),
        duration.as_millis()
    );
    if let Some(checkpoint) = &invocation.checkpoint {
        eprintln!("{name}: resumes from the checkpoint {checkpoint}");
    }
    if let Some(earlier) = &invocation.restart_of {
        eprintln!("{name}: starts over run {earlier}");
    }
    if let Some(shard) = invocation.shard {
        eprintln!("{name}: reports only the items of shard {shard}");
    }
    let note = options.text("note");
    if !note.is_empty() {
        eprintln!("{name}: note {note:?}");
    }
    for line in 1..=lines {
        out.text(&format!("{name}: stdout line {line} of {lines}"))?;
        eprintln!("{name}: stderr line {line} of {lines}");
    }
    let _held = probe_usage::allocate(u64::try_from(options.integer("allocate_mb")).unwrap_or(0));
    let burn = u64::try_from(options.integer("burn_cpu_ms")).unwrap_or(0);
    if burn > 0 {
        probe_usage::burn_in_grandchild(burn)?;
    }
    if options.boolean("report_usage") {
        probe_usage::report(out)?;
    }
    let (items, failed_every) = (options.integer("items").max(0), options.integer("failed_every").max(0));
    for i in 1..=options.integer("malformed_items").max(0) {
        out.item(&format!("malformed-{i}"), "maybe", None, None)?;
    }
    // Without checkpoints every item comes at once; with some, item block j before checkpoint j, and a resumed
    // run goes on after the items its checkpoint counts, skipping the checkpoints behind it.
    let lists = ItemLists::of(invocation)?;
    if let Some(only) = &lists.only {
        eprintln!("{name}: scoped to {} items", only.len());
    }
    if !lists.skip.is_empty() {
        eprintln!("{name}: skips {} quarantined items", lists.skip.len());
    }
    let as_text = options.boolean("item_text");
    let pause = Duration::from_millis(u64::try_from(options.integer("item_ms")).unwrap_or(0));
    let mut output = ItemOutput { lists, failed_every, as_text, times: WriteTimes::default(), pause };
    // A resume goes on after the items its checkpoint counts; the checkpoints behind it are not printed again.
    let resumed = if checkpoints > 0 { resumed_after(invocation.checkpoint.as_deref()).min(items) } else { 0 };
    let mut items_printed = resumed;
    if checkpoints == 0 {
        ledger.items(&output, (1, items))?;
        output.print(out, (1, items))?;
        items_printed = items;
    }
    let started = Instant::now();
    // With `silent_after_ms`, the probe goes silent then (the ledger says when), as a worker stuck on a document.
    let quiet_at =
        u64::try_from(options.integer("silent_after_ms")).ok().filter(|&ms| ms > 0).map(Duration::from_millis);
    let mut silent = false;
    let beats = (checkpoints, items > 0);
    for (at, beat) in timeline(duration, steps, beats, crash, options.boolean("oversized_checkpoint")) {
        if let Some(quiet) = quiet_at.filter(|&quiet| !silent && at > quiet) {
            if let Some(signal) = stop.sleep(quiet.saturating_sub(started.elapsed())) {
                eprintln!("{name}: stopping on {signal}, as asked");
                return Ok(Ending::Signal(signal));
            }
            silent = true;
            ledger.record("silent", json!({ "after_ms": quiet.as_millis() }))?;
            eprintln!("{name}: goes silent after {} ms, as asked", quiet.as_millis());
        }
        if let Some(signal) = stop.sleep(at.saturating_sub(started.elapsed())) {
            eprintln!("{name}: stopping on {signal}, as asked");
            return Ok(Ending::Signal(signal));
        }
        // Silent: no progress, item or checkpoint line; the crash, the oversized checkpoint and the end still come.
        if silent && !matches!(beat, Beat::Crash | Beat::Oversized | Beat::End) {
            continue;
        }
        match beat {
            Beat::Progress(i) => out.progress(i as usize, steps as usize, Some(&format!("step {i}")))?,
            Beat::Items(i) => {
                let upto = items * i64::from(i) / i64::from(checkpoints);
                if upto > items_printed {
                    ledger.items(&output, (items_printed + 1, upto))?;
                    output.print(out, (items_printed + 1, upto))?;
                    items_printed = upto;
                }
            }
            Beat::Checkpoint(i) => {
                let upto = items * i64::from(i) / i64::from(checkpoints);
                if items > 0 && upto <= resumed {
                    continue;
                }
                ledger.items(&output, (items_printed + 1, upto))?;
                output.print(out, (items_printed + 1, upto))?;
                items_printed = items_printed.max(upto);
                let checkpoint = if items > 0 { json!({ "step": i, "items": upto }) } else { json!({ "step": i }) };
                out.checkpoint(&checkpoint)?;
                if yields_at(i, checkpoints, stop.yield_requested()) {
                    eprintln!("{name}: yielding at checkpoint {i} of {checkpoints}, as asked");
                    return Ok(Ending::Yielded);
                }
            }
            Beat::Crash => {
                eprintln!("{name}: crashing with SIGABRT, as asked");
                std::process::abort();
            }
            Beat::Oversized => {
                eprintln!("{name}: printing a checkpoint over {MAX_CHECKPOINT_BYTES} bytes, as asked");
                out.checkpoint(&oversized_checkpoint())?;
            }
            Beat::End => {}
        }
    }
    if items > 0 {
        *writes = output.times.summary();
    }
    if exit_code != 0 {
        eprintln!("{name}: exiting with status {exit_code}, as asked");
        return Ok(Ending::Exit(exit_code));
    }
    out.result(json!({ "processed": steps, "failed": 0 }))?;
    eprintln!("{name}: run {run_id} done");
    Ok(Ending::Exit(0))
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
