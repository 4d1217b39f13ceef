//! The probe workers of the tests and benchmarks (`scrinalia-demo-worker probe-<n>`, steered by their options:
//! how long they take, how they end, what they print), and the ledger they keep of what executed when and from
//! which checkpoint (`SCRINALIA_PROBE_LOG`), which tests compare with the database's.

use std::path::Path;

use scrinalia_shared::{OptionType, WorkerSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{option, worker};

/// A probe called `name` (run by the demo worker at `bin`) that times out after `timeout_seconds`, with every
/// steering option: `duration_ms` (default 200, as the probe's code declares it), `exit_code`, `crash`,
/// `ignore_sigterm`, `progress_steps`, `output_lines`, `note`, the checkpoints and the items they report, and
/// what they cost (`burn_cpu_ms`, `allocate_mb`, `report_usage`).
pub fn probe(bin: &Path, name: &str, timeout_seconds: u64) -> WorkerSpec {
    let bin = bin.display().to_string();
    let mut spec = worker(name, &[&bin, name]);
    spec.timeout_seconds = timeout_seconds;
    spec.options = vec![
        option("duration_ms", OptionType::Integer, Some(json!(200))),
        option("exit_code", OptionType::Integer, None),
        option("crash", OptionType::Boolean, None),
        option("ignore_sigterm", OptionType::Boolean, None),
        option("progress_steps", OptionType::Integer, None),
        option("output_lines", OptionType::Integer, None),
        option("note", OptionType::String, None),
        option("checkpoints", OptionType::Integer, None),
        option("oversized_checkpoint", OptionType::Boolean, None),
        option("items", OptionType::Integer, None),
        option("failed_every", OptionType::Integer, None),
        option("malformed_items", OptionType::Integer, None),
        option("item_text", OptionType::Boolean, None),
        option("burn_cpu_ms", OptionType::Integer, None),
        option("allocate_mb", OptionType::Integer, None),
        option("report_usage", OptionType::Boolean, None),
        option("silent_after_ms", OptionType::Integer, None),
    ];
    spec
}

/// `spec` with the catalogue defaults of some of its options changed (an option it does not have is a mistake).
/// The probes declare their own defaults in their code, which win once the probe has been described (a daemon
/// describes its workers as it starts), and the difference is shown as a disagreement: this steers runs that
/// start before that, and tests of the disagreement itself. Steer other runs through their arguments or an
/// override.
pub fn with_defaults(mut spec: WorkerSpec, defaults: &[(&str, Value)]) -> WorkerSpec {
    for (name, value) in defaults {
        let option = spec.options.iter_mut().find(|o| o.name == *name);
        option.unwrap_or_else(|| panic!("{} has no option {name}", spec.name)).default = Some(value.clone());
    }
    spec
}

/// One line of the probes' ledger.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeEvent {
    /// `start`, `items` or `end`.
    pub event: String,
    /// The probe's name.
    pub worker: String,
    /// `run`, `count-pending`, `check` or `describe`.
    pub verb: String,
    /// The run, for `run`.
    pub run_id: Option<String>,
    /// The probe's pid.
    pub pid: i32,
    /// `CLOCK_REALTIME` ns.
    pub at_ns: i128,
    /// The `TRACEPARENT` it was given.
    pub traceparent: Option<String>,
    /// `exit`, `sigterm` or `yielded` (end lines).
    pub outcome: Option<String>,
    /// The exit status (end lines).
    pub exit_code: Option<i32>,
    /// The probe's command-line arguments (start lines).
    #[serde(default)]
    pub args: Vec<String>,
    /// The checkpoint it was started with, the parsed `SCRINALIA_CHECKPOINT` of a resume (start lines; `None`
    /// without one).
    #[serde(default)]
    pub checkpoint: Option<Value>,
    /// `SCRINALIA_SHARD`, the shard it was given, `i/N` (start lines).
    #[serde(default)]
    pub shard: Option<String>,
    /// Each `SCRINALIA_RESOURCE_<NAME>` it was given, the slot of a daemon-scoped resource, by variable (start
    /// lines; `{"SCRINALIA_RESOURCE_GPU": "0"}`).
    #[serde(default)]
    pub resources: std::collections::BTreeMap<String, String>,
    /// `SCRINALIA_RESTART_OF`, the run a restart starts over (start lines).
    #[serde(default)]
    pub restart_of: Option<String>,
    /// The first item number of a block recorded before it was printed (`items` lines).
    #[serde(default)]
    pub from: Option<i64>,
    /// The last item number of the block.
    #[serde(default)]
    pub to: Option<i64>,
    /// How many items of the block succeeded.
    #[serde(default)]
    pub succeeded: Option<i64>,
    /// The ids of the block that failed.
    #[serde(default)]
    pub failed: Option<Vec<String>>,
    /// The ids of the block that were skipped.
    #[serde(default)]
    pub skipped: Option<Vec<String>>,
}

impl ProbeEvent {
    /// The block of items of an `items` line.
    pub fn block(&self) -> Option<ItemBlock> {
        Some(ItemBlock {
            from: self.from?,
            to: self.to?,
            succeeded: self.succeeded?,
            failed: self.failed.clone()?,
            skipped: self.skipped.clone()?,
        })
    }
}

/// A block of items a probe printed right after recording it: items `from..=to` of its numbering, how many of
/// them succeeded, and the ids that failed and were skipped (items outside the run's scope are left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemBlock {
    /// The first item number of the block.
    pub from: i64,
    /// The last.
    pub to: i64,
    /// How many succeeded.
    pub succeeded: i64,
    /// The ids that failed.
    pub failed: Vec<String>,
    /// The ids that were skipped.
    pub skipped: Vec<String>,
}

/// Every line of the probes' ledger at `path` so far. A line counts once its newline is there: a probe may be
/// writing the last one as it is read.
pub fn probe_events(path: &Path) -> Vec<ProbeEvent> {
    whole_lines(&std::fs::read_to_string(path).unwrap_or_default())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The lines of `text` that end with a newline, without it: what a reader of a file that is being appended to
/// can trust.
pub fn whole_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n').filter_map(|l| l.strip_suffix('\n'))
}
