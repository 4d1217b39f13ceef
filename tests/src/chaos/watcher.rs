//! A watcher of the worker processes and the shared resources: every 200 ms it looks for workers executing a run
//! and checks that the ledger does not already call that run finished while its worker still executes, and it
//! samples `run_resources` (see [`Holds`]); once every run has ended, it reads what is still held.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use uuid::Uuid;

use super::resources::Holds;
use crate::{
    Stores,
    daemon_harness::{alive, realtime_ns},
};

/// What the watcher saw.
#[derive(Debug, Default)]
pub struct Watched {
    /// How many times it scanned the processes.
    pub scans: u64,
    /// Every worker process seen executing a run (`run` verb), by run.
    pub executions: HashMap<Uuid, BTreeSet<i32>>,
    /// Worker processes still executing a run that the ledger already called finished.
    pub violations: Vec<String>,
    /// The samples of `run_resources`.
    pub holds: Holds,
}

/// Scans the processes every 200 ms for workers executing a run (`<worker> run --run-id=<id>`) and checks that
/// the ledger does not already call that run finished while its worker still executes: the ledger is read
/// after the scan and the process is looked at again after the read, so a hit is a worker alive after its run
/// ended in the ledger.
pub struct Watcher {
    db: Stores,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Watched>,
}

impl Watcher {
    /// Starts watching.
    pub fn start(db: Stores) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let reader = db.clone();
        let task = tokio::spawn(async move {
            let mut watched = Watched::default();
            let mut reported = HashSet::new();
            while !flag.load(Ordering::Relaxed) {
                let seen = worker_processes();
                for (pid, run) in &seen {
                    watched.executions.entry(*run).or_default().insert(*pid);
                }
                if !seen.is_empty()
                    && let Ok(in_flight) = db.api.runs_in_flight().await
                {
                    let in_flight: HashSet<Uuid> = in_flight.iter().map(|r| r.id).collect();
                    for (pid, run) in seen.iter().filter(|(_, run)| !in_flight.contains(run)) {
                        let Ok(Some(row)) = db.api.get_run(*run).await else { continue };
                        if row.state.is_terminal() && executes(*pid, *run) && reported.insert(*run) {
                            watched.violations.push(format!(
                                "run {run} of {} is {} in the ledger (finished at {:?}, {:?}) but its worker, pid {pid}, \
                                 still executes",
                                row.worker, row.state, row.finished_at, row.error
                            ));
                        }
                    }
                }
                // One statement, so one snapshot of every holder; a read through a cut connection is skipped.
                if let Ok(holders) = db.daemon.resource_holders().await {
                    watched.holds.sample(&holders, realtime_ns());
                }
                watched.scans += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            watched
        });
        Self { db: reader, stop, task }
    }

    /// Stops watching; returns what it saw, with what `run_resources` still holds (called once every run has
    /// ended; read again through a cut connection).
    pub async fn finish(self) -> Watched {
        self.stop.store(true, Ordering::Relaxed);
        let mut watched = self.task.await.expect("the watcher");
        for _ in 0..20 {
            if let Ok(left) = self.db.daemon.resource_holders().await {
                watched.holds.at_end = Some(left);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        watched
    }
}

/// `(pid, run)` of every `scrinalia-demo-worker … run --run-id=<run>` process.
fn worker_processes() -> Vec<(i32, Uuid)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, run_of(pid)?)))
        .collect()
}

/// The run a worker process executes, from its command line.
fn run_of(pid: i32) -> Option<Uuid> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let program = Path::new(std::str::from_utf8(args.first()?).ok()?);
    if program.file_name()? != "scrinalia-demo-worker" || args.get(2) != Some(&&b"run"[..]) {
        return None;
    }
    // The daemon passes `--run-id=<run>`; `--run-id <run>` is read too.
    let id = args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix(b"--run-id") {
        Some(b"") => args.get(i + 1).copied(),
        Some(rest) => rest.strip_prefix(b"="),
        None => None,
    })?;
    Uuid::parse_str(std::str::from_utf8(id).ok()?).ok()
}

fn executes(pid: i32, run: Uuid) -> bool {
    alive(pid) && run_of(pid) == Some(run)
}
