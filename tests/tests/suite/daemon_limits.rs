//! Limits through real daemons, supervisors and probes, on the cgroup controllers this machine has, on both
//! backends: a probe allocating 300 MiB under `memory_max = "128MiB"` ends `failed`/`out_of_memory` with its
//! sentence while its daemon and a sibling run on it go on; the same probe without a limit succeeds and its
//! recorded peak is at least 300 MiB; a run with `cpu_max` is counted by its cgroup (the whole tree's CPU). Every
//! run cgroup is made under the test process's own cgroup (the daemons are its children) and removed at the end.
//! A daemon that does not enforce a limit (cgroups off) starts, health and the worker card say so, and the runs
//! go on, their logs saying it too; a `cpu_max` above the host's cores is clamped to them and said (informational).

use std::{path::PathBuf, time::Duration};

use reqwest::{Method, StatusCode};
use scrinalia_shared::{EndReason, RunState, WorkerSpec};
use scrinalia_tests::{
    Kind, TestDb, backend_tests,
    daemon_harness::{Setup, probe, wait_finished},
    demo_worker, eventually,
    system::{OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

backend_tests!(
    a_run_over_its_memory_limit_ends_out_of_memory_and_its_siblings_go_on,
    a_run_with_cpu_max_is_counted_by_its_cgroup_which_is_removed,
);

const MIB: u64 = 1024 * 1024;

/// `probe-4`, limited by `edit`.
fn limited(edit: impl FnOnce(&mut WorkerSpec)) -> WorkerSpec {
    let mut spec = probe(&demo_worker(), "probe-4", 120);
    edit(&mut spec);
    spec
}

/// The `runs` directories the daemons of this test process make, one per v1 controller (or the v2 one).
fn run_cgroup_dirs() -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let base = match controllers {
            "" => PathBuf::from("/sys/fs/cgroup"),
            c if c.split(',').any(|x| ["memory", "cpu", "cpuacct"].contains(&x)) => {
                PathBuf::from("/sys/fs/cgroup").join(c)
            }
            _ => continue,
        };
        dirs.push(base.join(path.trim_start_matches('/')).join("runs"));
    }
    dirs
}

/// The cgroups of `run` left anywhere once it ended (the daemon removes them before it writes the run's end).
fn cgroup_left(run: uuid::Uuid) -> Vec<PathBuf> {
    run_cgroup_dirs().into_iter().map(|d| d.join(run.to_string())).filter(|d| d.exists()).collect()
}

async fn a_run_over_its_memory_limit_ends_out_of_memory_and_its_siblings_go_on(t: &TestDb) {
    let config = Setup::config(t, |d| d.capacity = 3).worker(limited(|w| {
        w.memory_max = Some(serde_json::from_value(json!("128MiB")).expect("a size"));
    }));
    let setup = Setup::with(t, config);
    let mut daemon = setup.start_daemon("daemon", &[]);
    let sibling = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 3000})).await;
    let hungry = setup.request(&t.db.api, "probe-4", json!({"allocate_mb": 300, "duration_ms": 100})).await;
    let ended = wait_finished(&t.db.api, hungry.id, Duration::from_secs(60)).await;
    assert_eq!((ended.state, ended.end_reason), (RunState::Failed, Some(EndReason::OutOfMemory)), "{ended:?}");
    let error = ended.error.clone().unwrap_or_default();
    assert!(error.starts_with("exceeded its memory limit of 128 MiB (peak "), "{error}");
    let usage = ended.usage.clone().expect("its usage");
    assert!(usage.measured_by.starts_with("cgroup v"), "{usage:?}");
    assert!(usage.peak_memory_bytes.is_some_and(|p| p >= 100 * MIB), "the tree's peak is the limit's: {usage:?}");
    assert_eq!(cgroup_left(hungry.id), Vec::<PathBuf>::new(), "the run's cgroup is removed");

    // The daemon and the sibling run were not what the kernel killed.
    let sibling = wait_finished(&t.db.api, sibling.id, Duration::from_secs(60)).await;
    assert_eq!(sibling.state, RunState::Succeeded, "{sibling:?}");
    assert_eq!(daemon.exited(), None, "the daemon lives on:\n{}", daemon.output());

    // Without a limit the same allocation succeeds, and its peak is recorded under the name that says whose.
    let free = setup.request(&t.db.api, "probe-1", json!({"allocate_mb": 300, "duration_ms": 100})).await;
    let free = wait_finished(&t.db.api, free.id, Duration::from_secs(60)).await;
    assert_eq!(free.state, RunState::Succeeded, "{free:?}");
    let usage = free.usage.expect("its usage");
    assert_eq!((usage.measured_by.as_str(), usage.peak_memory_bytes), ("rusage", None));
    let peak = usage.peak_rss_largest_process_bytes.expect("measured");
    assert!(peak >= 300 * MIB, "peak {} MiB", peak / MIB);
}

async fn a_run_with_cpu_max_is_counted_by_its_cgroup_which_is_removed(t: &TestDb) {
    let config = Setup::config(t, |_| {}).worker(limited(|w| w.cpu_max = Some(1.0)));
    let setup = Setup::with(t, config);
    let _daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&t.db.api, "probe-4", json!({"burn_cpu_ms": 1000, "duration_ms": 100})).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(60)).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    let usage = run.usage.clone().expect("its usage");
    assert!(usage.measured_by.starts_with("cgroup v"), "{usage:?}");
    let cpu = usage.cpu_seconds.expect("CPU counted");
    assert!(cpu >= 0.8, "the grandchild's second of CPU, counted by the cgroup: {cpu} s");
    assert_eq!(cgroup_left(run.id), Vec::<PathBuf>::new(), "the run's cgroup is removed");
    let log = setup.run_log(&run);
    assert!(!log.contains("not enforced"), "this host enforces cpu_max:\n{log}");
}

async fn get(system: &System, path: &str) -> Value {
    system.http(Method::GET, path, VIEWER, None).await.expect("answer").expect(StatusCode::OK, None)
}

/// The health check of `worker`.
async fn health_of(system: &System, worker: &str) -> Value {
    let health = get(system, "/api/health").await;
    let checks = health["checks"].as_array().cloned().unwrap_or_default();
    checks.iter().find(|c| c["name"] == format!("worker:{worker}")).cloned().unwrap_or(Value::Null)
}

/// Triggers probe-4 with `options` through the API and waits for the run to end: its detail, and its log.
async fn run_probe_4(system: &System, options: Value) -> (Value, String) {
    let body = json!({ "options": options });
    let reply = system.http(Method::POST, "/api/workers/probe-4/runs", OPERATOR, Some(body)).await.expect("answer");
    let id = reply.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    let path = format!("/api/runs/{id}");
    let run = eventually(Duration::from_secs(60), "the run to end", || async {
        let run = system.http(Method::GET, &path, VIEWER, None).await.ok()?.json();
        (run["state"] != "queued" && run["state"] != "running").then_some(run)
    })
    .await;
    let log = system.http(Method::GET, &format!("{path}/log"), VIEWER, None).await.expect("answer").text();
    (run, log)
}

async fn a_limit_this_host_does_not_enforce_is_said_and_the_runs_go_on(kind: Kind) {
    let worker = limited(|w| {
        w.memory_max = Some(serde_json::from_value(json!("128MiB")).expect("a size"));
        w.cpu_max = Some(1.0);
    });
    let plain = probe(&demo_worker(), "probe-1", 120);
    let system = System::start(kind, |c| c.worker(plain).worker(worker).with(|f| f.daemon.cgroups = false)).await;
    let notes = get(&system, "/api/workers/probe-4").await["limit_notes"].clone();
    let why = "cgroups are turned off for this daemon (daemon.cgroups = false)";
    let said: Vec<String> = serde_json::from_value(notes).expect("notes on the card");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("cpu_max not enforced on host ") && said[0].ends_with(why), "{said:?}");
    assert!(said[1].starts_with("memory_max not enforced on host ") && said[1].ends_with(why), "{said:?}");
    let plain = get(&system, "/api/workers/probe-1").await;
    assert!(plain.get("limit_notes").is_none(), "a worker without limits has none");

    let check = health_of(&system, "probe-4").await;
    assert_eq!(check["status"], "degraded", "{check}");
    assert!(check["error"].as_str().is_some_and(|e| e.contains("memory_max not enforced on host")), "{check}");

    // The run goes on without its limits, and its log says so.
    let (run, log) = run_probe_4(&system, json!({"allocate_mb": 200, "duration_ms": 100})).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["usage"]["measured_by"], "rusage", "no cgroup, so rusage: {}", run["usage"]);
    assert!(log.contains("scrinalia: memory_max not enforced on this host"), "{log}");
    system.cleanup().await;
}

/// A `cpu_max` above the host's cores: the daemon clamps it to them, and the card and the run's log say so.
async fn a_cpu_max_above_the_hosts_cores_is_clamped_and_said(kind: Kind) {
    let plain = probe(&demo_worker(), "probe-1", 120);
    let system = System::start(kind, |c| c.worker(plain).worker(limited(|w| w.cpu_max = Some(1024.0)))).await;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let said: Vec<String> = eventually(Duration::from_secs(30), "the card's note", || async {
        let worker = get(&system, "/api/workers/probe-4").await;
        serde_json::from_value(worker.get("limit_notes")?.clone()).ok()
    })
    .await;
    assert_eq!(said.len(), 1, "{said:?}");
    let note = &said[0];
    assert!(note.starts_with(&format!("cpu_max 1024 clamped to the {cores} cores of host ")), "{note}");
    let check = health_of(&system, "probe-4").await;
    assert_eq!(check["details"]["limits"], json!(said), "{check}");
    assert_ne!(check["status"], "degraded", "a clamp is informational: {check}");

    let (run, log) = run_probe_4(&system, json!({"duration_ms": 100})).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert!(run["usage"]["measured_by"].as_str().is_some_and(|m| m.starts_with("cgroup v")), "{}", run["usage"]);
    assert!(log.contains(&format!("scrinalia: cpu_max 1024 clamped to this host's {cores} cores")), "{log}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cpu_max_above_the_hosts_cores_is_clamped_and_said() {
    a_cpu_max_above_the_hosts_cores_is_clamped_and_said(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_cpu_max_above_the_hosts_cores_is_clamped_and_said() {
    a_cpu_max_above_the_hosts_cores_is_clamped_and_said(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_limit_this_host_does_not_enforce_is_said_and_the_runs_go_on() {
    a_limit_this_host_does_not_enforce_is_said_and_the_runs_go_on(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_limit_this_host_does_not_enforce_is_said_and_the_runs_go_on() {
    a_limit_this_host_does_not_enforce_is_said_and_the_runs_go_on(Kind::Sqlite).await;
}
