//! The probe workers (`probe-1`, `probe-2`, `probe-3`, and any `probe-<n>`): no real work, but behaviour that tests
//! steer through options (duration, exit status, crash, ignoring SIGTERM, progress and output volume), and a ledger
//! of every execution in `$SCRINALIA_PROBE_LOG` so tests can prove what ran, when, where and with which arguments.

use std::{
    fs::OpenOptions,
    io::Write,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use serde_json::{Value, json};

use crate::{
    invocation::{Invocation, Kind, OptionSpec, Verb, opt},
    protocol::Protocol,
    stop::{self, Stop},
};

/// The environment variable naming the probes' JSON-lines ledger.
pub const LOG_ENV: &str = "SCRINALIA_PROBE_LOG";

/// The probes' names as listed by `help`; any `probe-<n>` (n a positive decimal number) is a probe too, so a
/// catalogue may declare as many as a test needs.
pub const NAMES: [&str; 4] = ["probe-1", "probe-2", "probe-3", "probe-<n>"];

/// Whether `name` is a probe: `probe-` and a positive decimal number without leading zeros.
pub fn is_probe(name: &str) -> bool {
    name.strip_prefix("probe-")
        .is_some_and(|n| !n.is_empty() && !n.starts_with('0') && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The options a probe accepts; `note` is free text that only shows up in the recorded arguments.
pub const OPTIONS: &[OptionSpec] = &[
    opt("duration_ms", Kind::Integer),
    opt("exit_code", Kind::Integer),
    opt("crash", Kind::Boolean),
    opt("ignore_sigterm", Kind::Boolean),
    opt("progress_steps", Kind::Integer),
    opt("output_lines", Kind::Integer),
    opt("note", Kind::Text),
];

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
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// Runs one probe execution; returns the exit status.
pub fn execute(invocation: &Invocation, out: &mut Protocol) -> anyhow::Result<i32> {
    let options = &invocation.options;
    let ignore_sigterm = options.boolean("ignore_sigterm", false);
    // Signals are blocked before any other thread exists, so none of them can receive SIGTERM by default.
    let stop = match invocation.verb {
        Verb::Run if ignore_sigterm => Some(Stop::ignoring_sigterm()?),
        Verb::Run => Some(Stop::on_sigterm()?),
        Verb::Describe | Verb::CountPending => None,
    };
    let ledger = Ledger {
        path: std::env::var_os(LOG_ENV).filter(|p| !p.is_empty()).map(PathBuf::from),
        worker: invocation.worker.clone(),
        verb: match invocation.verb {
            Verb::Describe => "describe",
            Verb::CountPending => "count-pending",
            Verb::Run => "run",
        },
        run_id: invocation.run_id.clone(),
    };
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let traceparent = std::env::var("TRACEPARENT").ok();
    ledger.record("start", json!({ "traceparent": traceparent, "args": args }))?;
    let (status, outcome): (i32, String) = match stop {
        None => {
            match invocation.verb {
                Verb::Describe => out.describe(&invocation.engine)?,
                _ => out.object(&json!({ "pending": 0 }))?,
            }
            (0, "exit".to_owned())
        }
        Some(stop) => match run(invocation, &stop, out)? {
            Ending::Exit(status) => (status, "exit".to_owned()),
            // "sigterm" (or "sigint" when stopped from a terminal).
            Ending::Signal(signal) => (stop::exit_status(signal), signal.as_str().to_lowercase()),
        },
    };
    ledger.record("end", json!({ "outcome": outcome, "exit_code": status }))?;
    Ok(status)
}

/// How a probe run ended by itself.
enum Ending {
    /// With this exit status.
    Exit(i32),
    /// Stopped by this signal.
    Signal(nix::sys::signal::Signal),
}

fn run(invocation: &Invocation, stop: &Stop, out: &mut Protocol) -> anyhow::Result<Ending> {
    let name = &invocation.worker;
    let options = &invocation.options;
    let duration = Duration::from_millis(u64::try_from(options.integer("duration_ms", 200)).unwrap_or(0));
    let exit_code = i32::try_from(options.integer("exit_code", 0)).unwrap_or(1);
    let crash = options.boolean("crash", false);
    let steps = u32::try_from(options.integer("progress_steps", 4)).unwrap_or(0);
    let lines = options.integer("output_lines", 2).max(0);
    let run_id = invocation.run_id.as_deref().unwrap_or("none");

    eprintln!(
        "{name}: run {run_id} starts (pid {}), {} ms, {steps} progress steps",
        std::process::id(),
        duration.as_millis()
    );
    let note = options.text("note", "");
    if !note.is_empty() {
        eprintln!("{name}: note {note:?}");
    }
    for line in 1..=lines {
        out.text(&format!("{name}: stdout line {line} of {lines}"))?;
        eprintln!("{name}: stderr line {line} of {lines}");
    }
    // The duration is cut into slices; progress is reported after each, and a crash comes after half of them.
    let slices = steps.max(1);
    for slice in 1..=slices {
        if let Some(signal) = stop.sleep(duration / slices) {
            eprintln!("{name}: stopping on {signal}, as asked");
            return Ok(Ending::Signal(signal));
        }
        if steps > 0 {
            out.progress(slice as usize, steps as usize, Some(&format!("step {slice}")))?;
        }
        if crash && 2 * slice >= slices {
            eprintln!("{name}: crashing with SIGABRT, as asked");
            std::process::abort();
        }
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
mod tests {
    use super::is_probe;

    #[test]
    fn any_numbered_probe_is_a_probe() {
        for name in ["probe-1", "probe-3", "probe-4", "probe-27", "probe-123456789"] {
            assert!(is_probe(name), "{name}");
        }
        for name in ["probe-", "probe-0", "probe-07", "probe-1x", "probe--1", "probe-1234567890", "probe", "embed"] {
            assert!(!is_probe(name), "{name}");
        }
    }
}
