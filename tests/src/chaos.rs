//! Helpers of the chaos suite (`tests/tests/chaos.rs`, ignored; `scripts/chaos` runs it): a catalogue of the nine
//! demo workers and many probes, three API processes whose every answer is recorded, three daemon slots that
//! the suite kills, freezes, stops and drains (each fault recorded with its time), a watcher that looks for
//! worker processes of runs the ledger already calls finished, and the final check of the invariants from the
//! ledger, the probes' own execution records and the recorded answers.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use rand::{Rng, seq::IndexedRandom};
use reqwest::Method;
use scrinalia_shared::{
    Database,
    auth::hash_token,
    db::{Cursor, Run, RunFilter, RunState},
};
use serde_json::{Value, json};
use sqlx::Connection;
use uuid::Uuid;

use crate::{
    TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER, free_port},
    bin_path,
    daemon_harness::{Setup, alive, at_ns, probe_workers, realtime_ns},
    eventually,
    process::Process,
};

/// The daemons' lease: short, so that a fault resolves within seconds.
pub const LEASE: Duration = Duration::from_secs(3);
/// How much later than the lease after its owner's death an `interrupted` may come: recovery sweeps every
/// lease/3 (±20 %), on a machine loaded by six processes and their workers.
pub const SLACK: Duration = Duration::from_secs(3);
/// How many probe workers the catalogue has (`probe-1` … `probe-<PROBES>`; `probe-3` times out after 2 s).
pub const PROBES: usize = 12;
/// How many daemons run at once.
pub const DAEMONS: usize = 3;
/// How many API processes serve.
pub const APIS: usize = 3;

const DAEMON_KEYS: [(&str, &str); 8] = [
    ("capacity", "4"),
    ("lease_seconds", "3"),
    ("heartbeat_seconds", "1"),
    ("gone_after_seconds", "3"),
    ("cancel_grace_seconds", "1"),
    ("poll_seconds", "2"),
    ("drain_seconds", "2"),
    ("queue_count_interval_seconds", "10"),
];

/// The configuration of the whole cluster (daemons and APIs read the same file; each API gets its port from
/// `SCRINALIA__API__LISTEN`): the harness's probes, the demo catalogue, more probes, tokens for each role.
pub fn setup(db: &TestDb) -> Setup {
    let bin = bin_path("scrinalia-demo-worker");
    let names: Vec<String> = (4..=PROBES).map(|n| format!("probe-{n}")).collect();
    let probes: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 120)).collect();
    let extra = format!(
        r#"[api]
request_timeout_seconds = 10
events_poll_ms = 100

[auth]
tokens = [
  {{ name = "vera-viewer", role = "viewer", hash = "{viewer}" }},
  {{ name = "otto-operator", role = "operator", hash = "{operator}" }},
  {{ name = "ada-admin", role = "admin", hash = "{admin}" }},
]

{demo}
{probes}"#,
        viewer = hash_token(VIEWER),
        operator = hash_token(OPERATOR),
        admin = hash_token(ADMIN),
        demo = demo_catalogue(&bin),
        probes = probe_workers(&bin, &probes),
    );
    Setup::new(db, &DAEMON_KEYS, &extra)
}

/// The engines and the nine archive workers of `deploy/demo.toml`, exactly as declared there (its probes are
/// left out: the harness declares its own), with the demo worker's absolute path.
pub fn demo_catalogue(bin: &Path) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let start = text.find("\n[engines.").expect("deploy/demo.toml declares engines");
    let end =
        text.find("\n[[workers]]\nname = \"probe-1\"").expect("deploy/demo.toml declares probe-1 after the archive");
    let slice = text[start..end]
        .replace(r#"command = ["scrinalia-demo-worker","#, &format!("command = [\"{}\",", bin.display()));
    assert_eq!(slice.matches("[[workers]]").count(), 9, "deploy/demo.toml has nine archive workers before its probes");
    slice
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
    let steer =
        [(Steer::Short, 35), (Steer::Long, 20), (Steer::Fails, 15), (Steer::Crashes, 10), (Steer::IgnoresSigterm, 20)]
            .choose_weighted(rng, |(_, w)| *w)
            .map(|(s, _)| *s)
            .unwrap_or(Steer::Short);
    let mut options = json!({"progress_steps": rng.random_range(1..=6), "note": note});
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
    (steer, json!({ "options": options }))
}

/// One answer of an API process (or the lack of one).
#[derive(Debug, Clone)]
pub struct Answer {
    /// Which API process.
    pub api: usize,
    /// `METHOD path`.
    pub request: String,
    /// The status; `None` when no answer came.
    pub status: Option<u16>,
    /// The body of an answer that is not 2xx (cut), or the transport error.
    pub body: String,
}

/// The three API processes and a client that records every answer.
pub struct Apis {
    /// The processes.
    pub processes: Vec<Process>,
    /// Their base URLs.
    pub bases: Vec<String>,
    client: reqwest::Client,
    answers: Mutex<Vec<Answer>>,
}

impl Apis {
    /// Starts `APIS` processes on `setup`'s configuration and waits until each is ready.
    pub async fn start(setup: &Setup) -> Self {
        let config = setup.config.display().to_string();
        let (mut processes, mut bases) = (Vec::new(), Vec::new());
        for i in 0..APIS {
            let listen = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
            let env = [("SCRINALIA__API__LISTEN", listen.as_str())];
            let name = format!("api-{i}");
            processes.push(Process::start("scrinalia-api", &name, &setup.dir, &["--config", &config, "serve"], &env));
            bases.push(format!("http://{listen}"));
        }
        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("an HTTP client");
        for (process, base) in processes.iter().zip(&bases) {
            let ready = format!("{base}/readyz");
            eventually(
                Duration::from_secs(30),
                &format!("{} to be ready:\n{}", process.name, process.output()),
                || {
                    let request = client.get(&ready).send();
                    async move { request.await.ok().filter(|r| r.status() == reqwest::StatusCode::OK) }
                },
            )
            .await;
        }
        Self { processes, bases, client, answers: Mutex::default() }
    }

    /// Sends a request to API process `api` and records its answer; returns the status and the JSON body
    /// (`Null` when the body is not JSON).
    pub async fn call(
        &self,
        api: usize,
        method: Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (Option<u16>, Value) {
        let mut request = self.client.request(method.clone(), format!("{}{path}", self.bases[api])).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let (status, text) = match request.send().await {
            Ok(response) => (Some(response.status().as_u16()), response.text().await.unwrap_or_default()),
            Err(e) => (None, format!("no answer: {e}")),
        };
        let kept = if status.is_some_and(|s| s < 300) { String::new() } else { text.chars().take(400).collect() };
        let request = format!("{method} {path}");
        self.answers.lock().expect("answers").push(Answer { api, request, status, body: kept });
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Every answer so far.
    pub fn answers(&self) -> Vec<Answer> {
        self.answers.lock().expect("answers").clone()
    }

    /// The daemons as `GET /api/daemons` lists them (empty when the answer is not 200).
    pub async fn daemons(&self, api: usize) -> Vec<Value> {
        match self.call(api, Method::GET, "/api/daemons", VIEWER, None).await {
            (Some(200), body) => body["daemons"].as_array().cloned().unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

/// What the suite did to a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL.
    Kill,
    /// SIGSTOP for longer than the lease, then SIGCONT.
    Stop,
    /// SIGTERM (it drains for `drain_seconds`, then interrupts its runs and exits).
    Terminate,
    /// `POST /api/daemons/{id}/drain` (it finishes its runs, then exits).
    Drain,
}

/// One fault, at `CLOCK_REALTIME` ns (comparable with the database clock and the probes' records).
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// What.
    pub kind: FaultKind,
    /// To which daemon (its registry id).
    pub daemon: Uuid,
    /// When.
    pub at_ns: i128,
}

/// Where a daemon slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Running (its id is known once the registry lists its pid).
    Up,
    /// SIGSTOPped until then.
    Frozen(Instant),
    /// SIGKILLed; a new daemon starts then.
    Dead(Instant),
    /// SIGTERMed or drained since then; replaced once it exits.
    Leaving(Instant),
}

/// One of the daemon slots.
pub struct Slot {
    /// The daemon, when one is running (or frozen, or leaving).
    pub process: Option<Process>,
    /// Its registry id, once known.
    pub id: Option<Uuid>,
    /// Where it is.
    pub phase: Phase,
}

/// The daemons, the faults done to them and what went wrong with them.
pub struct Fleet {
    /// The slots.
    pub slots: Vec<Slot>,
    /// Every fault, in order.
    pub faults: Vec<Fault>,
    /// Daemons started so far.
    pub started: usize,
    /// Unexpected exits, failed stops, daemons that did not leave.
    pub problems: Vec<String>,
}

impl Fleet {
    /// Starts `DAEMONS` daemons.
    pub fn start(setup: &Setup) -> Self {
        let mut fleet = Self { slots: Vec::new(), faults: Vec::new(), started: 0, problems: Vec::new() };
        for _ in 0..DAEMONS {
            let process = fleet.spawn(setup);
            fleet.slots.push(Slot { process: Some(process), id: None, phase: Phase::Up });
        }
        fleet
    }

    fn spawn(&mut self, setup: &Setup) -> Process {
        self.started += 1;
        setup.start_daemon(&format!("daemon-{:02}", self.started), &[])
    }

    fn replace(&mut self, setup: &Setup, i: usize) {
        let process = self.spawn(setup);
        self.slots[i] = Slot { process: Some(process), id: None, phase: Phase::Up };
    }

    /// Learns the registry ids of running daemons from `GET /api/daemons` (matching pids).
    pub async fn identify(&mut self, apis: &Apis, api: usize) {
        if !self.slots.iter().any(|s| s.id.is_none() && s.phase == Phase::Up) {
            return;
        }
        let listed = apis.daemons(api).await;
        let known: HashSet<Uuid> = self.slots.iter().filter_map(|s| s.id).collect();
        for slot in self.slots.iter_mut().filter(|s| s.id.is_none() && s.phase == Phase::Up) {
            let Some(pid) = slot.process.as_ref().and_then(|p| p.child.id()) else { continue };
            slot.id = listed
                .iter()
                .filter(|d| d["pid"].as_i64() == Some(i64::from(pid)) && d["state"] == "active")
                .filter_map(|d| d["id"].as_str().and_then(|s| Uuid::parse_str(s).ok()))
                .find(|id| !known.contains(id));
        }
    }

    /// Thaws, restarts and replaces daemons whose time has come; notices daemons that exited by themselves.
    pub fn tick(&mut self, setup: &Setup) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            match self.slots[i].phase {
                Phase::Frozen(until) if until <= now => {
                    if let Some(p) = &self.slots[i].process {
                        p.signal(Signal::SIGCONT);
                    }
                    self.slots[i].phase = Phase::Up;
                }
                Phase::Dead(until) if until <= now => self.replace(setup, i),
                Phase::Leaving(since) => {
                    let Some(process) = self.slots[i].process.as_mut() else { continue };
                    match process.child.try_wait() {
                        Ok(Some(status)) => {
                            if !status.success() {
                                let tail = tail(&process.output());
                                self.problems
                                    .push(format!("{} exited with {status} when stopped:\n{tail}", process.name));
                            }
                            self.replace(setup, i);
                        }
                        _ if since.elapsed() > Duration::from_secs(40) => {
                            let tail = tail(&process.output());
                            self.problems
                                .push(format!("{} did not exit 40 s after SIGTERM or drain:\n{tail}", process.name));
                            process.signal(Signal::SIGKILL);
                            self.replace(setup, i);
                        }
                        _ => {}
                    }
                }
                Phase::Up => {
                    let Some(process) = self.slots[i].process.as_mut() else { continue };
                    if let Ok(Some(status)) = process.child.try_wait() {
                        let tail = tail(&process.output());
                        self.problems.push(format!("{} exited by itself with {status}:\n{tail}", process.name));
                        self.replace(setup, i);
                    }
                }
                Phase::Frozen(_) | Phase::Dead(_) => {}
            }
        }
    }

    /// The slots that are up with a known id: the only ones the suite faults.
    pub fn eligible(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.slots[i].phase == Phase::Up && self.slots[i].id.is_some()).collect()
    }

    /// Picks the target of a fault among the eligible slots, favouring daemons that hold runs (as
    /// `GET /api/daemons` says), so that most faults have something to interrupt.
    pub async fn pick(&self, apis: &Apis, api: usize, rng: &mut impl Rng) -> Option<usize> {
        let listed = apis.daemons(api).await;
        let held = |i: usize| {
            let id = self.slots[i].id.map(|id| id.to_string());
            listed.iter().find(|d| d["id"].as_str() == id.as_deref()).and_then(|d| d["runs_in_flight"].as_u64())
        };
        self.eligible().choose_weighted(rng, |&i| 1 + 3 * held(i).unwrap_or(0)).ok().copied()
    }

    fn record(&mut self, i: usize, kind: FaultKind) {
        let daemon = self.slots[i].id.expect("only identified daemons are faulted");
        self.faults.push(Fault { kind, daemon, at_ns: realtime_ns() });
    }

    /// SIGKILL; a new daemon starts after `restart_after`.
    pub async fn kill(&mut self, i: usize, restart_after: Duration) {
        let Some(mut process) = self.slots[i].process.take() else { return };
        process.signal(Signal::SIGKILL);
        self.record(i, FaultKind::Kill);
        let _ = process.wait(Duration::from_secs(10)).await;
        self.slots[i].phase = Phase::Dead(Instant::now() + restart_after);
    }

    /// SIGSTOP for `frozen_for`, then SIGCONT.
    pub fn stop(&mut self, i: usize, frozen_for: Duration) {
        let Some(process) = &self.slots[i].process else { return };
        process.signal(Signal::SIGSTOP);
        self.record(i, FaultKind::Stop);
        self.slots[i].phase = Phase::Frozen(Instant::now() + frozen_for);
    }

    /// SIGTERM; replaced once it has exited.
    pub fn terminate(&mut self, i: usize) {
        let Some(process) = &self.slots[i].process else { return };
        process.signal(Signal::SIGTERM);
        self.record(i, FaultKind::Terminate);
        self.slots[i].phase = Phase::Leaving(Instant::now());
    }

    /// Drains the daemon through API process `api`; replaced once it has exited. Returns the status.
    pub async fn drain(&mut self, i: usize, apis: &Apis, api: usize) -> Option<u16> {
        let id = self.slots[i].id?;
        let at_ns = realtime_ns();
        let (status, _) = apis.call(api, Method::POST, &format!("/api/daemons/{id}/drain"), ADMIN, None).await;
        if status == Some(202) {
            self.faults.push(Fault { kind: FaultKind::Drain, daemon: id, at_ns });
            self.slots[i].phase = Phase::Leaving(Instant::now());
        }
        status
    }

    /// Thaws and restarts every daemon at once and waits (at most `timeout`) until `DAEMONS` daemons are up and
    /// identified.
    pub async fn settle(&mut self, setup: &Setup, apis: &Apis, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            for slot in &mut self.slots {
                if let Phase::Frozen(_) | Phase::Dead(_) = slot.phase {
                    slot.phase = match slot.phase {
                        Phase::Frozen(_) => Phase::Frozen(now),
                        _ => Phase::Dead(now),
                    };
                }
            }
            self.tick(setup);
            self.identify(apis, 0).await;
            if self.slots.iter().all(|s| s.phase == Phase::Up && s.id.is_some()) {
                return;
            }
            if now > deadline {
                self.problems.push(format!("the daemons were not all up {timeout:?} after the faults stopped"));
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM to every daemon; each must exit 0.
    pub async fn shutdown(&mut self) {
        for slot in &mut self.slots {
            if let Some(process) = &slot.process {
                process.signal(Signal::SIGCONT);
                process.signal(Signal::SIGTERM);
            }
        }
        for slot in &mut self.slots {
            if let Some(process) = slot.process.as_mut() {
                let code = process.wait(Duration::from_secs(30)).await;
                if code != Some(0) {
                    let tail = tail(&process.output());
                    self.problems.push(format!("{} exited with {code:?} on SIGTERM at the end:\n{tail}", process.name));
                }
            }
        }
    }
}

/// The last lines of a log.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The reads a panel makes, by index.
pub const READS: [&str; 4] = ["/api/runs?limit=100", "/api/workers", "/api/daemons", "/api/runs?state=running"];

/// Cuts every connection to the test database while requests are certainly in flight through every API
/// process: a transaction locks the ledger, 12 reads of it are sent and wait for the lock in the database, then
/// every other connection is terminated and the lock released. Returns how many connections were terminated.
pub async fn cut_under_load(apis: &Apis, url: &str) -> i64 {
    let mut admin = sqlx::PgConnection::connect(url).await.expect("a connection to the test database");
    sqlx::query("begin").execute(&mut admin).await.expect("begin");
    sqlx::query("lock table worker_runs in access exclusive mode").execute(&mut admin).await.expect("lock the ledger");
    let reads = (0..12usize).map(|i| apis.call(i % APIS, Method::GET, READS[i % READS.len()], VIEWER, None));
    let cut = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let n = sqlx::query_scalar(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity \
             where datname = current_database() and pid <> pg_backend_pid()",
        )
        .fetch_one(&mut admin)
        .await
        .expect("terminate the connections");
        sqlx::query("rollback").execute(&mut admin).await.expect("release the lock");
        n
    };
    tokio::join!(futures::future::join_all(reads), cut).1
}

/// What the watcher saw.
#[derive(Debug, Default)]
pub struct Watched {
    /// How many times it scanned the processes.
    pub scans: u64,
    /// Every worker process seen executing a run (`run` verb), by run.
    pub executions: HashMap<Uuid, BTreeSet<i32>>,
    /// Worker processes still executing a run that the ledger already called finished.
    pub violations: Vec<String>,
}

/// Scans the processes every 200 ms for workers executing a run (`<worker> run --run-id <id>`) and checks that
/// the ledger does not already call that run finished while its worker still executes: the ledger is read
/// after the scan and the process is looked at again after the read, so a hit is a worker alive after its run
/// ended in the ledger.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Watched>,
}

impl Watcher {
    /// Starts watching.
    pub fn start(db: Database) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut watched = Watched::default();
            let mut reported = HashSet::new();
            while !flag.load(Ordering::Relaxed) {
                let seen = worker_processes();
                for (pid, run) in &seen {
                    watched.executions.entry(*run).or_default().insert(*pid);
                }
                if !seen.is_empty()
                    && let Ok(in_flight) = db.runs_in_flight().await
                {
                    let in_flight: HashSet<Uuid> = in_flight.iter().map(|r| r.id).collect();
                    for (pid, run) in seen.iter().filter(|(_, run)| !in_flight.contains(run)) {
                        let Ok(Some(row)) = db.get_run(*run).await else { continue };
                        if row.state.is_terminal() && executes(*pid, *run) && reported.insert(*run) {
                            watched.violations.push(format!(
                                "run {run} of {} is {} in the ledger (finished at {:?}, {:?}) but its worker, pid {pid}, \
                                 still executes",
                                row.worker, row.state, row.finished_at, row.error
                            ));
                        }
                    }
                }
                watched.scans += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            watched
        });
        Self { stop, task }
    }

    /// Stops watching; returns what it saw.
    pub async fn finish(self) -> Watched {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the watcher")
    }
}

/// `(pid, run)` of every `scrinalia-demo-worker … run --run-id <run>` process.
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
    let at = args.iter().position(|a| *a == b"--run-id")?;
    Uuid::parse_str(std::str::from_utf8(args.get(at + 1)?).ok()?).ok()
}

fn executes(pid: i32, run: Uuid) -> bool {
    alive(pid) && run_of(pid) == Some(run)
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
pub async fn ledger(db: &Database) -> Vec<Run> {
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

/// Everything the final check looks at.
pub struct Evidence<'a> {
    /// The configuration (for the probes' records).
    pub setup: &'a Setup,
    /// The ledger at the end.
    pub runs: Vec<Run>,
    /// The 201s.
    pub created: Vec<Created>,
    /// Every answer of the APIs.
    pub answers: Vec<Answer>,
    /// Every fault done to a daemon.
    pub faults: Vec<Fault>,
    /// Connection cuts: when, and how many backends.
    pub cuts: Vec<(i128, i64)>,
    /// What the watcher saw.
    pub watched: Watched,
    /// Daemons started.
    pub daemons_started: usize,
}

/// The figures of a chaos run.
#[derive(Debug, Default)]
pub struct Figures {
    /// Runs in the ledger by state.
    pub runs: BTreeMap<String, usize>,
    /// Answers by status (`none` when no answer came).
    pub answers: BTreeMap<String, usize>,
    /// Faults by kind.
    pub faults: BTreeMap<String, usize>,
    /// Connection cuts and the backends they terminated.
    pub cuts: (usize, i64),
    /// Interruptions by reason.
    pub interruptions: BTreeMap<String, usize>,
    /// The longest time from an owner's death to its run's `interrupted`.
    pub worst_to_interrupted: Option<Duration>,
    /// Probe executions recorded by the probes themselves, and how many of them ended without an end line.
    pub probe_executions: (usize, usize),
    /// Worker processes the watcher saw, and its scans.
    pub watched: (usize, u64),
    /// Daemons started.
    pub daemons_started: usize,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list =
            |m: &BTreeMap<String, usize>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        let total = |m: &BTreeMap<String, usize>| m.values().sum::<usize>();
        writeln!(f, "| figure | value |\n|---|---|")?;
        writeln!(f, "| runs | {} ({}) |", total(&self.runs), list(&self.runs))?;
        writeln!(f, "| requests answered | {} ({}) |", total(&self.answers), list(&self.answers))?;
        writeln!(f, "| kills (SIGKILL) | {} |", self.faults.get("kill").copied().unwrap_or(0))?;
        writeln!(f, "| stops (SIGSTOP past the lease) | {} |", self.faults.get("stop").copied().unwrap_or(0))?;
        writeln!(f, "| SIGTERM restarts | {} |", self.faults.get("terminate").copied().unwrap_or(0))?;
        writeln!(f, "| drains | {} |", self.faults.get("drain").copied().unwrap_or(0))?;
        writeln!(f, "| connection cuts | {} ({} backends) |", self.cuts.0, self.cuts.1)?;
        writeln!(f, "| daemons started | {} |", self.daemons_started)?;
        writeln!(f, "| interruptions | {} ({}) |", total(&self.interruptions), list(&self.interruptions))?;
        let worst = self.worst_to_interrupted.map_or("none".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
        let bound = (LEASE + SLACK).as_secs();
        writeln!(f, "| worst death → interrupted | {worst} (lease {} s, bound {bound} s) |", LEASE.as_secs())?;
        writeln!(
            f,
            "| probe executions | {} ({} without an end line) |",
            self.probe_executions.0, self.probe_executions.1
        )?;
        write!(f, "| worker processes watched | {} over {} scans |", self.watched.0, self.watched.1)
    }
}

/// The violations found and the figures.
pub struct Verdict {
    /// Each broken invariant, as a sentence.
    pub violations: Vec<String>,
    /// The figures.
    pub figures: Figures,
}

fn ns(t: Option<chrono::DateTime<chrono::Utc>>) -> Option<i128> {
    t.map(at_ns)
}

/// Checks every invariant of the chaos suite.
pub fn check(evidence: Evidence<'_>) -> Verdict {
    let mut v = Vec::new();
    let mut figures = Figures { daemons_started: evidence.daemons_started, ..Figures::default() };
    let by_id: HashMap<Uuid, &Run> = evidence.runs.iter().map(|r| (r.id, r)).collect();

    // Every answer: no 5xx, no missing answer, nothing the suite did not expect.
    for a in &evidence.answers {
        let key = a.status.map_or("none".to_owned(), |s| s.to_string());
        *figures.answers.entry(key).or_default() += 1;
        let expected: &[u16] = match a.request.split(' ').next() {
            Some("GET") => &[200],
            _ if a.request.ends_with("/runs") => &[201, 409],
            _ if a.request.ends_with("/cancel") => &[202, 409],
            _ if a.request.ends_with("/drain") => &[202, 409],
            _ => &[],
        };
        if !a.status.is_some_and(|s| expected.contains(&s)) {
            v.push(format!("API {} answered {:?} to {}: {}", a.api, a.status, a.request, a.body));
        }
    }

    // Every 201 has its row, of its worker; every row came from a 201.
    let created: HashMap<Uuid, &Created> = evidence.created.iter().map(|c| (c.id, c)).collect();
    for c in &evidence.created {
        match by_id.get(&c.id) {
            None => v.push(format!("the 201 for run {} of {} has no row in the ledger", c.id, c.worker)),
            Some(r) if r.worker != c.worker => {
                v.push(format!("run {} is of {} in the ledger, {} in its 201", c.id, r.worker, c.worker))
            }
            Some(_) => {}
        }
    }
    for r in &evidence.runs {
        *figures.runs.entry(r.state.to_string()).or_default() += 1;
        if !created.contains_key(&r.id) {
            v.push(format!("run {} of {} is in the ledger without a 201", r.id, r.worker));
        }
    }

    // Every run terminal, each ending consistent with how it was steered; every interruption with its reason,
    // within the lease and the slack of its owner's death.
    let bound = i128::try_from((LEASE + SLACK).as_nanos()).unwrap_or(i128::MAX);
    for f in &evidence.faults {
        *figures.faults.entry(format!("{:?}", f.kind).to_lowercase()).or_default() += 1;
    }
    for r in &evidence.runs {
        let error = r.error.as_deref().unwrap_or("");
        let steer = created.get(&r.id).map(|c| c.steer);
        let finished = ns(r.finished_at);
        match r.state {
            RunState::Queued | RunState::Running => {
                v.push(format!("run {} of {} is still {}", r.id, r.worker, r.state))
            }
            RunState::Succeeded => {
                if matches!(steer, Some(Steer::Fails | Steer::Crashes)) {
                    v.push(format!("run {} of {} succeeded although steered {steer:?}", r.id, r.worker));
                }
            }
            RunState::Failed => {
                let explained = match steer {
                    Some(Steer::Fails) => error.starts_with("exited with status 3"),
                    Some(Steer::Crashes) => error.starts_with("killed by signal"),
                    _ => false,
                } || (r.worker == "probe-3" && error.starts_with("timed out after 2 s"));
                if !explained {
                    v.push(format!("run {} of {} ({steer:?}) failed unexpectedly: {error:?}", r.id, r.worker));
                }
            }
            RunState::Cancelled => {
                if r.cancel_requested_at.is_none() || !error.starts_with("cancelled by ") {
                    v.push(format!("run {} of {} is cancelled without a request: {error:?}", r.id, r.worker));
                }
            }
            RunState::Interrupted => {
                let reason = if error.starts_with("owner lost: daemon ") {
                    "owner lost"
                } else if error.starts_with("lease lost: ") {
                    "lease lost"
                } else if error == "daemon shutdown" {
                    "daemon shutdown"
                } else {
                    v.push(format!("run {} of {} is interrupted without a known reason: {error:?}", r.id, r.worker));
                    "other"
                };
                *figures.interruptions.entry(reason.to_owned()).or_default() += 1;
                let owner = r.daemon_id;
                let faults_before = |kinds: &[FaultKind]| {
                    evidence
                        .faults
                        .iter()
                        .filter(|f| Some(f.daemon) == owner && kinds.contains(&f.kind))
                        .filter(|f| finished.is_some_and(|t| f.at_ns <= t))
                        .map(|f| f.at_ns)
                        .max()
                };
                match reason {
                    "owner lost" | "lease lost" => match (faults_before(&[FaultKind::Kill, FaultKind::Stop]), finished)
                    {
                        (Some(death), Some(t)) => {
                            let took = t - death;
                            let took_d = Duration::from_nanos(u64::try_from(took).unwrap_or(0));
                            if figures.worst_to_interrupted.is_none_or(|w| took_d > w) {
                                figures.worst_to_interrupted = Some(took_d);
                            }
                            if took > bound {
                                v.push(format!(
                                    "run {} of {} became interrupted {} ms after its owner {owner:?} was killed or \
                                     frozen (bound {} ms): {error}",
                                    r.id,
                                    r.worker,
                                    took / 1_000_000,
                                    bound / 1_000_000
                                ));
                            }
                        }
                        _ => v.push(format!(
                            "run {} of {} is interrupted ({error}) although its owner {owner:?} was neither killed nor \
                             frozen before",
                            r.id, r.worker
                        )),
                    },
                    "daemon shutdown" if faults_before(&[FaultKind::Terminate]).is_none() => v.push(format!(
                        "run {} of {} is interrupted by a shutdown although its owner {owner:?} got no SIGTERM",
                        r.id, r.worker
                    )),
                    _ => {}
                }
            }
        }
    }

    // The probes' own records: each run executed at most once, inside its claim, and never two executions of one
    // worker at once.
    let events: Vec<_> = evidence.setup.probe_events().into_iter().filter(|e| e.verb == "run").collect();
    let mut starts: HashMap<String, Vec<&crate::daemon_harness::ProbeEvent>> = HashMap::new();
    let mut ends: HashMap<String, i128> = HashMap::new();
    for e in &events {
        let Some(run) = &e.run_id else {
            v.push(format!("a probe execution of {} has no run id", e.worker));
            continue;
        };
        match e.event.as_str() {
            "start" => starts.entry(run.clone()).or_default().push(e),
            _ => {
                ends.insert(run.clone(), e.at_ns);
            }
        }
    }
    figures.probe_executions =
        (starts.values().map(Vec::len).sum(), starts.keys().filter(|r| !ends.contains_key(*r)).count());
    let mut intervals: BTreeMap<String, Vec<(i128, i128, String)>> = BTreeMap::new();
    for (run, s) in &starts {
        if s.len() > 1 {
            let pids: Vec<i32> = s.iter().map(|e| e.pid).collect();
            v.push(format!("run {run} was executed {} times (pids {pids:?})", s.len()));
        }
        let Some(row) = Uuid::parse_str(run).ok().and_then(|id| by_id.get(&id)) else {
            v.push(format!("a probe executed run {run}, which is not in the ledger"));
            continue;
        };
        let start = s[0].at_ns;
        if row.worker != s[0].worker {
            v.push(format!("run {run} is of {} but probe {} executed it", row.worker, s[0].worker));
        }
        let (claimed, finished) = (ns(row.claimed_at), ns(row.finished_at));
        if claimed.is_none_or(|c| start < c) {
            v.push(format!("run {run} started executing before it was claimed ({claimed:?} > {start})"));
        }
        let end = ends.get(run).copied();
        // A probe killed by SIGKILL writes no end line; it ended at the latest when its run ended in the ledger.
        let until = end.or(finished).unwrap_or(i128::MAX);
        if let (Some(end), Some(fin)) = (end, finished)
            && end > fin + 1_000
        {
            v.push(format!(
                "run {run} of {} was {} in the ledger {} ms before its probe stopped executing",
                row.worker,
                row.state,
                (end - fin) / 1_000_000
            ));
        }
        if finished.is_some_and(|fin| start > fin + 1_000) {
            v.push(format!("run {run} of {} started executing after it ended in the ledger", row.worker));
        }
        intervals.entry(row.worker.clone()).or_default().push((start, until, run.clone()));
    }
    // The ledger's own record of each worker: claims never overlap (a finished_at of an interrupted run is when
    // recovery noticed, later than the worker's death, so this is conservative).
    for r in evidence.runs.iter().filter(|r| r.claimed_at.is_some()) {
        let (Some(c), f) = (ns(r.claimed_at), ns(r.finished_at)) else { continue };
        intervals.entry(format!("ledger:{}", r.worker)).or_default().push((
            c,
            f.unwrap_or(i128::MAX),
            r.id.to_string(),
        ));
    }
    for (worker, list) in &mut intervals {
        list.sort();
        for pair in list.windows(2) {
            let ((_, end_a, run_a), (start_b, _, run_b)) = (&pair[0], &pair[1]);
            if start_b < end_a {
                v.push(format!(
                    "two executions of {worker} overlap by {} ms: run {run_a} and run {run_b}",
                    (end_a - start_b) / 1_000_000
                ));
            }
        }
    }

    // What the watcher saw: no worker alive after its run ended, no run executed by two processes.
    for (run, pids) in &evidence.watched.executions {
        if pids.len() > 1 && by_id.contains_key(run) {
            v.push(format!("run {run} was seen executing in {} processes: {pids:?}", pids.len()));
        }
    }
    v.extend(evidence.watched.violations.iter().cloned());
    figures.watched =
        (evidence.watched.executions.keys().filter(|r| by_id.contains_key(*r)).count(), evidence.watched.scans);
    figures.cuts = (evidence.cuts.len(), evidence.cuts.iter().map(|(_, n)| n).sum());
    Verdict { violations: v, figures }
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
