//! Backlog-driven runs and freshness across real daemons and the API, on both backends. The workers are a small shell
//! script whose `count-pending` answers what a file holds (the test writes it), whose `run` waits while a hold file
//! exists and then empties the queue. With three daemons, a count that rises past the threshold gets exactly one run
//! once it has been quiet (not three), recorded with its reason; a count that keeps rising is run at the max delay;
//! nothing is requested while a run is in flight, nor while the worker is paused (its freshness breach then says so
//! first, and its resume lets the backlog run). A worker whose label no live daemon has is reported behind its
//! freshness target with that label named (worker view, health, `/metrics`), and the shipped alert rule fires on the
//! exported series.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use reqwest::{Method, StatusCode};
use scrinalia_shared::{Role, WorkerSpec};
use scrinalia_testkit::{config::worker, stack::Stack};
use scrinalia_tests::{
    Binaries, TestDb,
    api_harness::{OPERATOR, VIEWER},
    backend_tests, eventually, free_port, start_daemon,
};
use serde_json::{Value, json};

backend_tests!(
    three_daemons_request_one_run_once_the_count_is_quiet,
    a_count_that_keeps_rising_is_run_at_the_max_delay,
    nothing_is_requested_while_a_run_is_in_flight,
    nothing_is_requested_while_the_worker_is_paused,
    a_label_no_daemon_has_breaches_freshness_with_the_label_named,
);

/// The workers' script: `$1` is the worker's name, `$2` the verb. `<dir>/<name>.pending` holds the count,
/// `<dir>/<name>.oldest` (if any) the oldest pending document's time, and `<dir>/<name>.hold` holds a run.
fn script(dir: &Path) -> PathBuf {
    let path = dir.join("worker.sh");
    let text = format!(
        "name=$1; verb=$2; d='{dir}'\n\
         case $verb in\n\
           count-pending) n=$(cat \"$d/$name.pending\" 2>/dev/null || echo 0)\n\
             if [ -s \"$d/$name.oldest\" ]; then echo \"{{\\\"pending\\\": $n, \\\"oldest_pending_at\\\": \\\"$(cat \"$d/$name.oldest\")\\\"}}\"\n\
             else echo \"{{\\\"pending\\\": $n}}\"; fi;;\n\
           describe) echo '{{\"engine\": null, \"preset\": null, \"model\": null, \"endpoint\": null}}';;\n\
           check) echo '{{\"ready\": true}}';;\n\
           run) while [ -e \"$d/$name.hold\" ]; do sleep 0.1; done; echo 0 > \"$d/$name.pending\"; echo '{{\"result\": {{}}}}';;\n\
           *) exit 2;;\n\
         esac\n",
        dir = dir.display()
    );
    std::fs::write(&path, text).expect("write the workers' script");
    path
}

fn set(dir: &Path, file: &str, text: &str) {
    // Written whole, then renamed: a count never reads half a number.
    let tmp = dir.join(format!("{file}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, dir.join(file)).expect("rename");
}

/// The API and `daemons` daemons over `specs` (edited by `edit`), counted by the chores once an hour: only the
/// triggers ask for counts.
async fn start(
    t: &TestDb,
    specs: Vec<WorkerSpec>,
    daemons: usize,
) -> (Stack, Vec<scrinalia_testkit::process::Process>) {
    let config = t
        .config()
        .test_daemon(|d| {
            d.queue_count_interval_seconds = 3600;
            d.poll_seconds = 1;
        })
        .with(|f| f.api.listen = ([127, 0, 0, 1], free_port()).into())
        .token("vera-viewer", Role::Viewer, VIEWER)
        .token("otto-operator", Role::Operator, OPERATOR)
        .workers(specs);
    let stack =
        Stack::start(&Binaries::of_this_test(), t.dir.path(), &config, false).await.unwrap_or_else(|e| panic!("{e:#}"));
    let mut started = Vec::new();
    for i in 0..daemons {
        started.push(start_daemon(t.dir.path(), &format!("daemon-{i}"), &stack.config, &[]).await);
    }
    (stack, started)
}

fn triggered(dir: &Path, name: &str, n: i64, quiet: i64, max: Option<i64>) -> WorkerSpec {
    let script = script(dir).display().to_string();
    let mut spec = worker(name, &["/bin/sh", &script, name]);
    (spec.when_pending_at_least, spec.quiet_seconds, spec.max_delay_seconds) = (Some(n), Some(quiet), max);
    spec
}

async fn runs_of(stack: &Stack, name: &str) -> Vec<Value> {
    let page = stack.get(&format!("/api/runs?worker={name}"), VIEWER).await.expect(StatusCode::OK, None);
    page["runs"].as_array().cloned().unwrap_or_default()
}

async fn fires_of(stack: &Stack, name: &str) -> Vec<Value> {
    let path = format!("/api/workers/{name}/backlog-fires");
    let view = stack.get(&path, VIEWER).await.expect(StatusCode::OK, None);
    view["fires"].as_array().cloned().unwrap_or_default()
}

async fn queue_of(stack: &Stack, name: &str) -> Value {
    stack.get(&format!("/api/workers/{name}"), VIEWER).await.expect(StatusCode::OK, None)["queue"].clone()
}

async fn three_daemons_request_one_run_once_the_count_is_quiet(t: &TestDb) {
    let dir = t.dir.path();
    set(dir, "digest.pending", "5");
    let (stack, daemons) = start(t, vec![triggered(dir, "digest", 20, 3, Some(120))], 3).await;
    eventually(Duration::from_secs(30), "a first count of 5", || async {
        (queue_of(&stack, "digest").await["pending"] == 5).then_some(())
    })
    .await;
    let rose = Instant::now();
    set(dir, "digest.pending", "30");
    let run = eventually(Duration::from_secs(30), "a run requested by the backlog", || async {
        runs_of(&stack, "digest").await.into_iter().next()
    })
    .await;
    assert!(rose.elapsed() >= Duration::from_secs(3), "requested before the count was quiet for 3 s");
    assert_eq!(run["requested_by"], "backlog", "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    eventually(Duration::from_secs(30), "the run's end and a count after it", || async {
        let run = stack.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
        (run["state"] == "succeeded" && queue_of(&stack, "digest").await["pending"] == 0).then_some(())
    })
    .await;
    let runs = runs_of(&stack, "digest").await;
    assert_eq!(runs.len(), 1, "one run for three daemons: {runs:#?}");
    let fires = fires_of(&stack, "digest").await;
    assert_eq!(fires.len(), 1, "one fire: {fires:#?}");
    let reason = fires[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("30 pending for ") && reason.ends_with(" s"), "{reason}");
    assert_eq!((fires[0]["pending"].as_i64(), fires[0]["run_id"].as_str()), (Some(30), Some(id.as_str())));
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

async fn a_count_that_keeps_rising_is_run_at_the_max_delay(t: &TestDb) {
    let dir = t.dir.path().to_owned();
    set(&dir, "rising.hold", "");
    let (stack, daemons) = start(t, vec![triggered(&dir, "rising", 10, 7, Some(8))], 1).await;
    // More every half second: each count (every 3.5 s) is higher than the one before, so never quiet for 7 s.
    let grow = {
        let dir = dir.clone();
        tokio::spawn(async move {
            for n in 10.. {
                set(&dir, "rising.pending", &n.to_string());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let fire = eventually(Duration::from_secs(40), "a fire at the max delay", || async {
        fires_of(&stack, "rising").await.into_iter().next()
    })
    .await;
    grow.abort();
    let reason = fire["reason"].as_str().unwrap_or_default();
    assert!(reason.ends_with("pending, waited the max delay of 8 s"), "{reason}");
    let runs = runs_of(&stack, "rising").await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["id"], fire["run_id"]);
    std::fs::remove_file(dir.join("rising.hold")).expect("release the run");
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

async fn nothing_is_requested_while_a_run_is_in_flight(t: &TestDb) {
    let dir = t.dir.path();
    set(dir, "busy.hold", "");
    let (stack, daemons) = start(t, vec![triggered(dir, "busy", 5, 2, None)], 2).await;
    let manual = stack.json(Method::POST, "/api/workers/busy/runs", OPERATOR, json!({})).await;
    let id = manual.expect(StatusCode::CREATED, None)["id"].as_str().expect("an id").to_owned();
    eventually(Duration::from_secs(30), "the manual run running", || async {
        let run = stack.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
        (run["state"] == "running").then_some(())
    })
    .await;
    set(dir, "busy.pending", "50");
    let first = eventually(Duration::from_secs(30), "a count of 50", || async {
        let queue = queue_of(&stack, "busy").await;
        (queue["pending"] == 50).then(|| queue["measured_at"].as_str().map(str::to_owned)).flatten()
    })
    .await;
    let first: chrono::DateTime<chrono::Utc> = first.parse().expect("a time");
    // Counts every second (quiet 2 s / 2): wait for one taken 4 s after the first, well past the quiet time.
    eventually(Duration::from_secs(30), "a count 4 s later, the count quiet all along", || async {
        let queue = queue_of(&stack, "busy").await;
        let at: Option<chrono::DateTime<chrono::Utc>> = queue["measured_at"].as_str().and_then(|s| s.parse().ok());
        at.filter(|at| *at - first >= chrono::Duration::seconds(4)).map(drop)
    })
    .await;
    assert_eq!(fires_of(&stack, "busy").await, Vec::<Value>::new(), "no fire while the run is in flight");
    assert_eq!(runs_of(&stack, "busy").await.len(), 1, "only the manual run");
    std::fs::remove_file(dir.join("busy.hold")).expect("release the run");
    eventually(Duration::from_secs(30), "the manual run's end", || async {
        let run = stack.get(&format!("/api/runs/{id}"), VIEWER).await.expect(StatusCode::OK, None);
        (run["state"] == "succeeded").then_some(())
    })
    .await;
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

async fn nothing_is_requested_while_the_worker_is_paused(t: &TestDb) {
    let dir = t.dir.path();
    let mut spec = triggered(dir, "held", 5, 2, None);
    spec.fresh_within_seconds = Some(1);
    let (stack, daemons) = start(t, vec![spec], 2).await;
    let pause = json!({"reason": "the model server is down"});
    stack.json(Method::POST, "/api/workers/held/pause", OPERATOR, pause).await.expect(StatusCode::OK, None);
    set(dir, "held.pending", "50");
    let first = eventually(Duration::from_secs(30), "a count of 50", || async {
        let queue = queue_of(&stack, "held").await;
        (queue["pending"] == 50).then(|| queue["measured_at"].as_str().map(str::to_owned)).flatten()
    })
    .await;
    let first: chrono::DateTime<chrono::Utc> = first.parse().expect("a time");
    // Counted every second (quiet 2 s / 2): a count 4 s after the first, quiet all along, would have fired.
    eventually(Duration::from_secs(30), "a count 4 s later, the count quiet all along", || async {
        let queue = queue_of(&stack, "held").await;
        let at: Option<chrono::DateTime<chrono::Utc>> = queue["measured_at"].as_str().and_then(|s| s.parse().ok());
        at.filter(|at| *at - first >= chrono::Duration::seconds(4)).map(drop)
    })
    .await;
    assert_eq!(fires_of(&stack, "held").await, Vec::<Value>::new(), "no fire while the worker is paused");
    assert_eq!(runs_of(&stack, "held").await, Vec::<Value>::new(), "no run while the worker is paused");
    // Behind its freshness target, and the pause is the reason given first.
    let view = stack.get("/api/workers/held", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(view["freshness"]["breached"], true, "{view:#}");
    let why = view["freshness"]["reason"].as_str().unwrap_or_default();
    assert!(why.starts_with("Paused"), "{why}");

    // Resumed: the backlog, still there and quiet, gets its one run.
    let resume = json!({"reason": "the model server is back"});
    stack.json(Method::POST, "/api/workers/held/resume", OPERATOR, resume).await.expect(StatusCode::OK, None);
    let run = eventually(Duration::from_secs(30), "a run requested by the backlog after the resume", || async {
        runs_of(&stack, "held").await.into_iter().next()
    })
    .await;
    assert_eq!(run["requested_by"], "backlog", "{run}");
    let fires = fires_of(&stack, "held").await;
    assert_eq!(fires.len(), 1, "{fires:#?}");
    assert_eq!(fires[0]["run_id"], run["id"]);
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

async fn a_label_no_daemon_has_breaches_freshness_with_the_label_named(t: &TestDb) {
    let dir = t.dir.path();
    let script = script(dir).display().to_string();
    let mut spec = worker("embed", &["/bin/sh", &script, "embed"]);
    (spec.labels, spec.fresh_within_seconds) = (vec!["gpu".into()], Some(5));
    set(dir, "embed.pending", "7");
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    set(dir, "embed.oldest", &hour_ago.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let (stack, daemons) = start(t, vec![spec], 1).await;
    let freshness = eventually(Duration::from_secs(30), "a breach", || async {
        let view = stack.get("/api/workers/embed", VIEWER).await.expect(StatusCode::OK, None);
        (view["freshness"]["breached"] == true).then(|| view["freshness"].clone())
    })
    .await;
    let reason = freshness["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("No daemon with label gpu has ever run: 7 pending"), "{freshness}");
    assert_eq!(freshness["within_seconds"], 5);
    assert!(freshness["age_seconds"].as_i64().is_some_and(|a| a >= 3600), "{freshness}");

    let health = stack.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
    let check = health["checks"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "worker:embed")).cloned();
    let check = check.unwrap_or_else(|| panic!("no check of embed: {health}"));
    assert_eq!(check["status"], "degraded", "{check}");
    assert!(check["error"].as_str().is_some_and(|e| e.contains("label gpu")), "{check}");

    let metrics = stack.get("/metrics", VIEWER).await;
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("scrinalia_worker_freshness_breached{"))
        .unwrap_or_else(|| panic!("no freshness series: {text}"));
    let (series, value) = line.rsplit_once(' ').expect("a sample");
    assert_eq!(
        (series, value.parse::<f64>().ok()),
        ("scrinalia_worker_freshness_breached{worker=\"embed\"}", Some(1.0))
    );
    assert!(text.contains("scrinalia_worker_freshness_age_seconds{worker=\"embed\"} "), "{text}");
    alert_fires_on(dir, series);
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
}

/// The shipped rule `ScrinaliaWorkerNotFresh` fires on `series` (as the API exports it) held at 1 for 6 minutes.
fn alert_fires_on(dir: &Path, series: &str) {
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/scrinalia-alerts.yml");
    let (name, labels) = series.split_once('{').expect("labels");
    let series = format!("{name}{{instance=\"api-1\",{labels}");
    let test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      \
         - series: '{series}'\n        values: '1x10'\n    alert_rule_test:\n      - eval_time: 6m\n        \
         alertname: ScrinaliaWorkerNotFresh\n        exp_alerts:\n          - exp_labels:\n              \
         severity: warning\n              worker: embed\n            exp_annotations:\n              summary: \
         \"Worker embed is behind its freshness target\"\n              description: \"{description}\"\n",
        rules = rules.display(),
        description = description("embed"),
    );
    let path = dir.join("freshness.test.yml");
    std::fs::write(&path, test).expect("write the promtool test");
    let output = std::process::Command::new("promtool").args(["test", "rules"]).arg(&path).output().expect("promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("SUCCESS"), "{text}");
}

/// The rule's description for `worker`, as Prometheus renders the folded text of the rules file.
fn description(worker: &str) -> String {
    format!(
        "The oldest pending document of {worker} (or, when its count does not say, the time since its last \
         successful run while work is pending) is older than its fresh_within_seconds \
         (scrinalia_worker_freshness_age_seconds). `scrinalia worker {worker}` and `scrinalia health` say why: a \
         label no live daemon has, failing runs, a run in flight too long, a paused worker."
    )
}
