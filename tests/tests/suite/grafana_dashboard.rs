//! The Grafana dashboard shipped in `deploy/grafana/scrinalia.json` (Grafana itself is not installed here): every
//! PromQL expression of its panels parses (`promtool check rules` on a rules file with each expression as a
//! recording rule, Grafana's variables replaced by what they stand for), and every metric it names — in its
//! panels and its template variables — is one the real API or daemon exports, as read from their `/metrics` after
//! a run (so that the histograms and counters have samples). The names come from the scrape, never from a list
//! kept here. One backend: the metric names do not depend on it.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use scrinalia_shared::RunState;
use scrinalia_tests::{TestDb, daemon_harness::wait_finished, eventually};
use serde_json::{Value, json};
use uuid::Uuid;

fn dashboard_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/scrinalia.json")
}

/// Every `expr` of the dashboard (its panels' targets, nested rows included), in order.
fn expressions(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(e)) => found.push(e.clone()),
                    _ => expressions(v, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| expressions(v, found)),
        _ => {}
    }
}

/// The expression as Prometheus receives it from Grafana: its interval variables become a duration, a
/// multi-value variable a regular expression matching all.
fn as_sent(expr: &str) -> String {
    ["$__rate_interval", "$__interval", "$__range"]
        .iter()
        .fold(expr.to_owned(), |e, var| e.replace(var, "5m"))
        .replace("\"$worker\"", "\".*\"")
}

/// The `scrinalia_*` names in a text.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("scrinalia_"))
        .map(str::to_owned)
        .collect()
}

/// The names a `/metrics` text exports: every sample's name, and each family of its `# TYPE` lines with the
/// suffixes its samples take (`_total` of a counter, `_bucket`, `_sum` and `_count` of a histogram).
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(family) = line.strip_prefix("# TYPE ").and_then(|rest| rest.split_whitespace().next()) {
            for suffix in ["", "_total", "_bucket", "_sum", "_count"] {
                names.insert(format!("{family}{suffix}"));
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

async fn scrape(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(response.status(), reqwest::StatusCode::OK, "GET {url}");
    response.text().await.expect("the body")
}

#[test]
fn every_expression_of_the_dashboard_parses_with_promtool() {
    let text = std::fs::read_to_string(dashboard_path()).expect("deploy/grafana/scrinalia.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "scrinalia", "a stable uid, so that links to it survive a re-import");
    let mut found = Vec::new();
    expressions(&dashboard["panels"], &mut found);
    assert!(found.len() >= 20, "the dashboard's expressions: {found:#?}");
    // YAML takes JSON: each expression is a recording rule, written without any quoting of its own.
    let rules: Vec<Value> = found
        .iter()
        .enumerate()
        .map(|(i, e)| json!({ "record": format!("dashboard:expression_{i}"), "expr": as_sent(e) }))
        .collect();
    let dir = tempfile::tempdir().expect("a folder");
    let file = dir.path().join("dashboard-rules.yml");
    std::fs::write(&file, json!({ "groups": [{ "name": "dashboard", "rules": rules }] }).to_string())
        .expect("write the rules");
    let output = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("promtool (Debian's prometheus package; scripts/test installs it): {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool refuses an expression of the dashboard:\n{said}\n{found:#?}");
    assert!(said.contains(&format!("SUCCESS: {} rules found", found.len())), "{said}");
    // Every panel has at least one query, and every query its own refId.
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().map(Vec::len).unwrap_or_default();
        assert!(targets > 0, "panel {} has no query", panel["title"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_is_exported_by_the_api_or_the_daemon() {
    let db = TestDb::sqlite().await;
    // probe-1 has a freshness target, so that the freshness gauges the dashboard reads are exported.
    let super::telemetry_metrics::Exporters { daemon, api, api_port, daemon_url, api_url, client } =
        super::telemetry_metrics::start_exporters(&db, 0).await;
    // A run, so that the counters and histograms by worker and outcome have samples, longer than a third of the
    // harness's 3 s lease so that its lease is renewed; and a queue measured.
    let run: Value = client
        .post(format!("http://127.0.0.1:{api_port}/api/workers/probe-1/runs"))
        .json(&json!({"options": {"duration_ms": 2500}}))
        .send()
        .await
        .expect("trigger")
        .json()
        .await
        .expect("the run");
    let id: Uuid = run["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no run: {run}"));
    let done = wait_finished(&db.db.api, id, Duration::from_secs(30)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    let exported = eventually(Duration::from_secs(30), "both processes to export the run and a queue", || async {
        let names: BTreeSet<String> = [&daemon_url, &api_url]
            .into_iter()
            .map(|url| scrape(&client, url))
            .collect::<futures::future::JoinAll<_>>()
            .await
            .iter()
            .flat_map(|text| exported_names(text))
            .collect();
        let ready = [
            "scrinalia_runs_finished_total",
            "scrinalia_run_duration_seconds_bucket",
            "scrinalia_lease_renewals_total",
            "scrinalia_queue_pending",
        ];
        ready.iter().all(|n| names.contains(*n)).then_some(names)
    })
    .await;

    let text = std::fs::read_to_string(dashboard_path()).expect("deploy/grafana/scrinalia.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut found = Vec::new();
    expressions(&dashboard["panels"], &mut found);
    let mut named: BTreeSet<String> = found.iter().flat_map(|e| metric_names(e)).collect();
    // The worker variable's query reads a metric too.
    named.extend(metric_names(&dashboard["templating"].to_string()));
    let missing: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "the dashboard reads {missing:?}, which neither the API nor the daemon exports");
    // The metrics the dashboard is for are all on it.
    for wanted in [
        "scrinalia_queue_pending",
        "scrinalia_queue_oldest_wait_seconds",
        "scrinalia_runs_finished_total",
        "scrinalia_run_duration_seconds_bucket",
        "scrinalia_daemons_alive",
        "scrinalia_queue_wait_seconds_bucket",
        "scrinalia_worker_freshness_age_seconds",
        "scrinalia_worker_freshness_breached",
        "scrinalia_worker_paused",
    ] {
        assert!(named.contains(wanted), "the dashboard has no panel over {wanted}");
    }
    drop(api);
    drop(daemon);
    db.cleanup().await;
}
