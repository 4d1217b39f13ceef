//! `scrinalia-bench all --quick`, the built bench binary against the test PostgreSQL server and SQLite files, with
//! the binaries beside it: every bench runs at its smallest size, exits 0 and prints its figures, so that no bench
//! rots unseen (a migration that adds a table a bench's reset must empty, an option it no longer reads). The
//! figures of a run beside the rest of the suite measure nothing; only that they are there is asserted.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Stdio,
    time::{Duration, Instant},
};

use scrinalia_tests::{bin_path, postgres_admin_url};
use serde_json::Value;
use tokio::process::Command;

/// Each bench of `all` and the backends it measures.
const BENCHES: [(&str, &[&str]); 12] = [
    ("latency", &["PostgreSQL", "SQLite"]),
    ("drain", &["PostgreSQL", "SQLite"]),
    ("http", &["PostgreSQL"]),
    ("recovery", &["PostgreSQL"]),
    ("idle", &["PostgreSQL", "SQLite"]),
    ("items", &["PostgreSQL", "SQLite"]),
    ("counts", &["PostgreSQL", "SQLite"]),
    ("schedules", &["PostgreSQL", "SQLite"]),
    ("resources", &["PostgreSQL", "SQLite"]),
    ("claim-during-prune", &["PostgreSQL"]),
    ("streams", &["PostgreSQL"]),
    ("shards", &["PostgreSQL"]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bench_runs_at_its_smallest_size_and_prints_its_figures() {
    let started = Instant::now();
    let child = Command::new(bin_path("scrinalia-bench"))
        .args(["all", "--quick", "--json", "--pg", &postgres_admin_url()])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    // A generous bound for a loaded machine: on a quiet one it takes about a minute.
    let output = tokio::time::timeout(Duration::from_secs(600), child)
        .await
        .expect("scrinalia-bench all --quick ends within 10 minutes")
        .expect("run scrinalia-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "scrinalia-bench all --quick failed ({}):\n{stderr}", output.status);
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}):\n{}", String::from_utf8_lossy(&output.stdout)));
    let figures = report["figures"].as_array().expect("figures");
    let mut backends: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for figure in figures {
        let bench = figure["bench"].as_str().expect("a bench");
        backends.entry(bench).or_default().insert(figure["backend"].as_str().expect("a backend"));
        assert!(figure["value"].is_number(), "a figure without a value: {figure}\n{stderr}");
    }
    for (bench, expected) in BENCHES {
        let found = backends.remove(bench).unwrap_or_default();
        assert_eq!(found, expected.iter().copied().collect(), "the backends {bench} printed figures of:\n{stderr}");
    }
    assert!(backends.is_empty(), "figures of benches `all` does not run: {backends:?}");
    assert!(report["machine"].is_object(), "the machine's description: {report}");
    eprintln!("scrinalia-bench all --quick: {} figures in {:.0} s", figures.len(), started.elapsed().as_secs_f64());
}
