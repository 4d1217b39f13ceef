//! Usage through real daemons, supervisors and probes, on both backends: the CPU a probe burns in a grandchild
//! process is counted (the supervisor's `RUSAGE_CHILDREN`: the worker and what it waited for), the peak of its
//! largest process is recorded under a name that says so, and the worker's own usage lines are kept, the last
//! accepted one winning and a refused one said in the run's log.

use std::time::Duration;

use axum::http::StatusCode;
use scrinalia_shared::RunState;
use scrinalia_tests::{
    TestDb,
    api_harness::{TestApi, VIEWER},
    backend_tests,
    daemon_harness::{Setup, wait_finished},
};
use serde_json::json;

backend_tests!(
    the_cpu_of_a_grandchild_and_the_peak_of_the_largest_process_are_recorded,
    the_workers_last_accepted_usage_line_is_kept_and_a_refused_one_is_said,
);

const MIB: u64 = 1024 * 1024;

async fn the_cpu_of_a_grandchild_and_the_peak_of_the_largest_process_are_recorded(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let _daemon = setup.start_daemon("daemon", &[]);
    let options = json!({"burn_cpu_ms": 1000, "allocate_mb": 64, "duration_ms": 100});
    let run = setup.request(&t.db.api, "probe-1", options).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(60)).await;
    assert_eq!(run.state, RunState::Succeeded, "{run:?}");
    let usage = run.usage.expect("a run whose worker ran has its usage");
    assert_eq!(usage.measured_by, "rusage");
    let cpu = usage.cpu_seconds.expect("CPU measured");
    assert!(cpu >= 0.8, "the grandchild's second of CPU is counted: {cpu} s");
    assert!(usage.wall_seconds >= cpu * 0.5, "wall {} s, CPU {cpu} s", usage.wall_seconds);
    let peak = usage.peak_rss_largest_process_bytes.expect("peak measured");
    assert!(peak >= 64 * MIB, "the probe held 64 MiB; its peak was {} MiB", peak / MIB);
    assert_eq!(usage.reported, None, "the probe reported nothing of its own");

    // The API shows it, under the names that say how it was measured.
    let api = TestApi::new(t).await;
    let detail = api.get(&format!("/api/runs/{}", run.id), VIEWER).await.expect(StatusCode::OK, None);
    let shown = &detail["usage"];
    assert_eq!(shown["measured_by"], "rusage", "{shown}");
    assert!(shown["peak_rss_largest_process_bytes"].as_u64().is_some_and(|p| p >= 64 * MIB), "{shown}");
    assert!(shown.get("peak_memory_bytes").is_none(), "no tree-wide peak is claimed without a cgroup: {shown}");
}

async fn the_workers_last_accepted_usage_line_is_kept_and_a_refused_one_is_said(t: &TestDb) {
    let setup = Setup::new(t, |_| {});
    let _daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&t.db.api, "probe-1", json!({"report_usage": true})).await;
    let run = wait_finished(&t.db.api, run.id, Duration::from_secs(60)).await;
    assert_eq!(run.state, RunState::Succeeded, "a refused usage line never fails a run: {run:?}");
    let reported = run.usage.as_ref().and_then(|u| u.reported.clone()).expect("the worker's usage");
    assert_eq!((reported.tokens_in, reported.tokens_out), (Some(1200), Some(300)));
    assert_eq!((reported.cost, reported.currency.as_deref()), (Some(0.0042), Some("EUR")));
    let log = setup.run_log(&run);
    assert!(
        log.contains("a usage line was refused: unknown field `tokens`")
            && log.contains("the last accepted usage stays"),
        "{log}"
    );
}
