//! The chaos suite's harness (`tests/tests/suite/chaos.rs`, ignored; `scripts/chaos` runs it), in these parts: the
//! [`cluster`] of three API processes whose every answer is recorded, the [`fleet`] of three daemon slots that the
//! suite kills, freezes, stops and drains (each fault recorded with its time), the [`watcher`] that looks for
//! worker processes of runs the ledger already calls finished and samples who holds the shared [`resources`],
//! the [`scheduling`], the checkpoints and [`resumes`], the [`items`] and the [`shards`] under the faults, and the
//! [`invariants`], each a
//! function named for what it checks, run on the evidence at the end.

pub mod cluster;
pub mod fleet;
pub mod invariants;
pub mod items;
pub mod resources;
pub mod resumes;
pub mod scheduling;
pub mod shards;
pub mod watcher;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use rand::{Rng, seq::IndexedRandom};
use scrinalia_shared::{
    ApiStore, OptionSpec, Role, Run, Settings, WorkerSpec,
    runs::{Cursor, RunFilter},
};
use serde_json::{Value, json};
use uuid::Uuid;

pub use self::{
    cluster::{Answer, Apis, READS, cut_under_load},
    fleet::{Fault, FaultKind, Fleet},
    invariants::{Evidence, Figures, Verdict, check},
    watcher::{Watched, Watcher},
};
use crate::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER},
    daemon_harness::{Setup, probe},
    demo_worker,
};

/// The daemons' lease: short, so that a fault resolves within seconds.
pub const LEASE: Duration = Duration::from_secs(3);
/// How much later than the lease after its owner's death an `interrupted` may come: recovery sweeps every
/// lease/3 (±20 %), on a machine loaded by six processes and their workers.
pub const SLACK: Duration = Duration::from_secs(3);
/// How many probe workers the catalogue has (`probe-1` … `probe-<PROBES>`; `probe-3` times out after 2 s; the
/// workers of [`resources::RESOURCES`] share slots, those of [`resumes::RESUMED`] are resumed by their policy).
pub const PROBES: usize = 14;
/// How many daemons run at once.
pub const DAEMONS: usize = 3;
/// How many API processes serve.
pub const APIS: usize = 3;

/// The configuration of the whole cluster (daemons and APIs read the same file; each API gets its port from
/// `SCRINALIA__API__LISTEN`): the harness's probes, the demo catalogue, more probes, tokens for each role.
pub fn setup(db: &TestDb) -> Setup {
    let bin = demo_worker();
    let config = Setup::config(db, |d| {
        (d.capacity, d.lease_seconds, d.heartbeat_seconds, d.gone_after_seconds) = (4, LEASE.as_secs(), 1, 3);
        (d.cancel_grace_seconds, d.poll_seconds, d.drain_seconds, d.queue_count_interval_seconds) = (1, 2, 2, 10);
        // The demo's embeddings hold the daemon-scoped gpu: each daemon has one, as the demo's daemon does.
        d.resources = [(resources::DEMO_GPU.to_owned(), 1)].into();
    })
    .with(|f| (f.api.request_timeout_seconds, f.api.events_poll_ms) = (10, 100))
    .token("vera-viewer", Role::Viewer, VIEWER)
    .token("otto-operator", Role::Operator, OPERATOR)
    .token("ada-admin", Role::Admin, ADMIN);
    let demo = demo_settings();
    let mut config = config
        .workers(demo_catalogue(&demo, &bin, &db.dir.path().join("demo")))
        .workers((4..=PROBES).map(|n| probe(&bin, &format!("probe-{n}"), 120)))
        .with(scheduling::configure)
        .with(resources::configure)
        .with(resumes::configure);
    config.file.engines = demo.catalogue.engines.clone();
    Setup::with(db, config)
}

/// `deploy/demo.toml`, loaded as the binaries load it.
fn demo_settings() -> Settings {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml");
    Settings::load_from(Some(&path), Vec::new()).unwrap_or_else(|e| panic!("{e}"))
}

/// The nine archive workers of `deploy/demo.toml`, run by the demo worker at `bin` on the demo data at `data`.
/// The file leaves their options to the code, and a daemon learns them from `describe` only once it has described
/// the worker, while the chaos traffic sends `batch_size` and `delay_ms` from the first second: so the options
/// each worker's `describe` declares are written into this catalogue, as an operator could write them in the file.
fn demo_catalogue(demo: &Settings, bin: &Path, data: &Path) -> Vec<WorkerSpec> {
    let archive: Vec<WorkerSpec> = demo
        .catalogue
        .workers
        .iter()
        .filter(|w| !w.name.starts_with("probe-"))
        .map(|w| {
            let mut spec = w.clone();
            spec.command[0] = bin.display().to_string();
            if spec.options.is_empty() {
                spec.options = declared_options(&spec, data);
            }
            spec
        })
        .collect();
    assert_eq!(archive.len(), 9, "deploy/demo.toml has the nine archive workers");
    archive
}

/// The options `spec`'s worker declares in its `describe` answer, as catalogue options.
fn declared_options(spec: &WorkerSpec, data: &Path) -> Vec<OptionSpec> {
    let output = std::process::Command::new(&spec.command[0])
        .args(&spec.command[1..])
        .arg("describe")
        .env("SCRINALIA_DEMO_DATA", data)
        .output()
        .unwrap_or_else(|e| panic!("describe {}: {e}", spec.name));
    assert!(output.status.success(), "describe {}: {}", spec.name, String::from_utf8_lossy(&output.stderr));
    let described: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    let declared = described["declared"]["options"].as_array().cloned().unwrap_or_default();
    declared
        .iter()
        .map(|option| {
            // The whole declaration where the catalogue's option type takes bounds; else the keys it has.
            let known = ["name", "type", "default", "choices", "description"];
            let fields: serde_json::Map<String, Value> =
                known.iter().filter_map(|k| option.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect();
            serde_json::from_value(option.clone())
                .or_else(|_| serde_json::from_value(Value::Object(fields)))
                .unwrap_or_else(|e| panic!("{}: {option}: {e}", spec.name))
        })
        .collect()
}

/// How a request steers its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Steer {
    /// A demo archive worker with random batch size and pace.
    Demo,
    /// A probe of 100–500 ms.
    Short,
    /// A probe of 3–8 s.
    Long,
    /// A probe that exits with status 3.
    Fails,
    /// A probe that aborts (SIGABRT) halfway.
    Crashes,
    /// A probe of 3–8 s that ignores SIGTERM.
    IgnoresSigterm,
}

/// A random request body for `worker`, and how it steers it.
pub fn request_body(worker: &str, rng: &mut impl Rng, note: &str) -> (Steer, Value) {
    if !worker.starts_with("probe-") {
        let options = json!({"batch_size": rng.random_range(1..=20), "delay_ms": rng.random_range(0..=40)});
        return (Steer::Demo, json!({ "options": options }));
    }
    let resumed = resumes::RESUMED.contains(&worker);
    let steer =
        [(Steer::Short, 35), (Steer::Long, 20), (Steer::Fails, 15), (Steer::Crashes, 10), (Steer::IgnoresSigterm, 20)]
            .choose_weighted(rng, |(_, w)| *w)
            .map(|(s, _)| *s)
            .unwrap_or(Steer::Short);
    // A resumed probe's runs are long, so that a fault finds them running and the policy has something to resume.
    let steer = if resumed && steer == Steer::Short { Steer::Long } else { steer };
    let mut options = json!({"progress_steps": rng.random_range(1..=6), "note": note});
    // Checkpoints in half the probes' runs (all of the resumed probes'), so that an interrupted run often has
    // one for the operator or the policy to resume from, and often none.
    let checkpoints = resumed || rng.random_bool(0.5);
    if checkpoints {
        options["checkpoints"] = json!(rng.random_range(1..=8));
    }
    // Items in every run of a resumed probe and in half the others (some failing), before each checkpoint when
    // there are checkpoints: what the items invariants hold the ledger against.
    if resumed || rng.random_bool(0.5) {
        options["items"] = json!(rng.random_range(10..=200));
        options["failed_every"] = json!(rng.random_range(2..=9));
    }
    let (duration, extra) = match steer {
        Steer::Short | Steer::Demo => (rng.random_range(100..=500), json!({})),
        Steer::Long => (rng.random_range(3_000..=8_000), json!({})),
        Steer::Fails => (rng.random_range(100..=1_500), json!({"exit_code": 3})),
        Steer::Crashes => (rng.random_range(200..=2_000), json!({"crash": true})),
        Steer::IgnoresSigterm => (rng.random_range(3_000..=8_000), json!({"ignore_sigterm": true})),
    };
    options["duration_ms"] = json!(duration);
    if let (Some(o), Value::Object(extra)) = (options.as_object_mut(), extra) {
        o.extend(extra);
    }
    match shards::shards_for(worker, rng) {
        Some(n) => (steer, json!({ "options": options, "shards": n })),
        None => (steer, json!({ "options": options })),
    }
}

/// A run request the suite made and got 201 for.
#[derive(Debug, Clone)]
pub struct Created {
    /// The run.
    pub id: Uuid,
    /// Its worker.
    pub worker: String,
    /// How it steers its worker.
    pub steer: Steer,
}

/// Every row of the ledger.
pub async fn ledger(db: &ApiStore) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut after = None;
    loop {
        let filter = RunFilter { limit: 500, after, ..RunFilter::default() };
        let page = db.list_runs(&filter).await.expect("read the ledger");
        runs.extend(page.runs);
        match page.next.as_deref().and_then(Cursor::decode) {
            Some(next) => after = Some(next),
            None => return runs,
        }
    }
}

/// The last lines of a log.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Every log of the cluster's processes that mentions a panic.
pub fn panics(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("panicked")))
        .collect()
}
