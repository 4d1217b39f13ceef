//! The Prometheus alert rules shipped in `deploy/prometheus/`: `promtool check rules` accepts them and `promtool
//! test rules` shows each alert firing on the series that should raise it and not on the others (Debian's
//! `prometheus` package; `scripts/test` installs it). The gauge the run-without-progress alert reads measures
//! what it says, on both backends: the time since a running run's last progress report.

use std::{path::PathBuf, process::Command, time::Duration};

use scrinalia_tests::{TestDb, backend_tests, fixtures::*};
use serde_json::json;
use uuid::Uuid;

backend_tests!(a_running_run_s_progress_age_grows_until_it_reports,);

fn rules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus")
}

fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(rules_dir())
        .output()
        .unwrap_or_else(|e| panic!("promtool (Debian's prometheus package; scripts/test installs it): {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_shipped_rules_pass_promtool_check_and_their_tests() {
    let checked = promtool(&["check", "rules", "scrinalia-alerts.yml"]);
    assert!(checked.contains("SUCCESS: 6 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "scrinalia-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a test of its own.
    let rules = std::fs::read_to_string(rules_dir().join("scrinalia-alerts.yml")).expect("the rules");
    let tests = std::fs::read_to_string(rules_dir().join("scrinalia-alerts.test.yml")).expect("their tests");
    for line in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        assert!(tests.contains(&format!("alertname: {line}")), "alert {line} has no promtool test");
    }
}

async fn a_running_run_s_progress_age_grows_until_it_reports(t: &TestDb) {
    let id = insert(&t.db.api, "ocr").await.expect("insert").id;
    let daemon = Uuid::now_v7();
    t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, None).await.expect("claim");
    t.db.daemon.mark_started(id, daemon, "runs/x").await.expect("started");
    let age = || async {
        let ages = t.db.api.progress_ages().await.expect("ages");
        ages.iter().find(|(w, _)| w == "ocr").map(|(_, s)| *s).expect("the running run's age")
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let silent = age().await;
    assert!(silent >= 1.4, "no progress yet: the age counts from the start ({silent} s)");
    t.db.daemon.record_progress(id, daemon, &json!({"done": 1, "total": 10})).await.expect("progress");
    let reported = age().await;
    assert!(reported < silent, "a report resets it: {reported} s after {silent} s");
    t.db.daemon.finish_run(id, daemon, &succeeded()).await.expect("finish");
    assert!(t.db.api.progress_ages().await.expect("ages").is_empty(), "only running runs are measured");
}
