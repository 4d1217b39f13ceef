//! `scrinalia schedules`, `scrinalia pipelines` and the lineage of `scrinalia run show` against a running system:
//! the real `scrinalia-api` and `scrinalia-daemon` on a fresh database, three probes of `scrinalia-demo-worker`
//! and a pipeline `chain` of probe-1 then probe-2. Each test checks what an operator or a script relies on: the
//! output, the API's JSON with `--json`, and the documented exit code with the API's sentence.

use scrinalia_shared::catalogue::PipelineSpec;
use scrinalia_tests::{
    Kind,
    daemon_harness::{probe, with_defaults},
    demo_worker,
    system::{Cli as Outcome, OPERATOR, System, VIEWER},
};
use serde_json::{Value, json};

/// The system with three probes and the pipeline `chain` of probe-1 then probe-2.
async fn start(kind: Kind) -> System {
    let bin = demo_worker();
    let defaults = [("output_lines", json!(2)), ("exit_code", json!(0))];
    let probes = ["probe-1", "probe-2", "probe-3"].map(|name| with_defaults(probe(&bin, name, 120), &defaults));
    System::start(kind, |config| {
        config
            .with(|f| {
                f.pipelines = vec![PipelineSpec {
                    name: "chain".into(),
                    description: Some("probe-1, then probe-2".into()),
                    steps: vec!["probe-1".into(), "probe-2".into()],
                    tags: Vec::new(),
                }];
            })
            .workers(probes)
    })
    .await
}

fn id_of(json: &Value) -> String {
    json["id"].as_str().unwrap_or_else(|| panic!("an id in {json}")).to_owned()
}

/// Create, list, preview, edit, pause and resume with reasons, show with the audit trail; a bad expression
/// prints the API's sentence naming its field and exits 7; the refusals exit with their codes. A schedule that
/// fires every second shows its fires, and its runs say which schedule and fire requested them.
async fn schedules_are_created_listed_previewed_paused_and_audited(kind: Kind) {
    let system = start(kind).await;
    assert_eq!(system.cli(&["schedules", "--json"]).await.expect(0).json(), json!([]));
    let empty = system.cli(&["schedules"]).await;
    assert!(empty.expect(0).stdout.is_empty() && empty.stderr.contains("No schedules"), "{empty:#?}");

    // A preview: three fire times, as the API computes them.
    let preview = system.cli(&["schedules", "preview", "*/5 * * * *", "--time-zone", "Europe/Berlin"]).await;
    preview.expect(0).has(&["*/5 * * * * in Europe/Berlin fires next at"]);
    assert_eq!(preview.stdout.lines().filter(|l| l.starts_with("  20")).count(), 3, "{preview:#?}");
    let json = system.cli(&["schedules", "preview", "@daily", "--json"]).await.expect(0).json();
    assert_eq!((json["time_zone"].as_str(), json["upcoming"].as_array().map(Vec::len)), (Some("UTC"), Some(3)));

    // A bad expression or zone: the API's sentence, naming the field at fault, and exit 7.
    let bad = system.cli(&["schedules", "preview", "0 3 * 13 *"]).await;
    bad.expect(7);
    assert!(bad.stderr.contains("month 13 is out of range") && bad.stdout.is_empty(), "{bad:#?}");
    let args = ["schedules", "create", "bad", "--worker", "probe-1", "--cron", "61 * * * *", "--reason", "r"];
    let bad = system.cli(&args).await;
    assert!(bad.expect(7).stderr.contains("minute 61 is out of range"), "{bad:#?}");
    let args = ["schedules", "preview", "@daily", "--time-zone", "Mars/Olympus"];
    assert!(system.cli(&args).await.expect(7).stderr.contains("is not an IANA time zone"));

    let create = [
        "schedules",
        "create",
        "nightly",
        "--worker",
        "probe-1",
        "--cron",
        "0 3 * * *",
        "--time-zone",
        "Europe/Berlin",
        "--overlap",
        "queue",
        "--missed",
        "once",
        "-o",
        "duration_ms=100",
        "--reason",
        "the nightly probe",
    ];
    let created = system.cli(&create).await;
    created.expect(0).has(&["Created schedule nightly.", "target     worker probe-1", "next fires "]);
    // Taken names, a viewer, an unknown worker and a missing reason are refused with their codes.
    let again = system.cli(&create).await;
    assert!(again.expect(6).stderr.contains("nightly"), "{again:#?}");
    system.cli_as(VIEWER, &create).await.expect(4);
    let args = ["schedules", "create", "x", "--worker", "no-such", "--cron", "@daily", "--reason", "r"];
    assert!(system.cli(&args).await.expect(7).stderr.contains("no-such"));
    system.cli(&["schedules", "pause", "nightly"]).await.expect(2);
    system.cli(&["schedules", "show", "no-such-schedule"]).await.expect(5);

    // The listing: a table, and the API's JSON.
    let table = system.cli(&["schedules"]).await;
    let header = table.expect(0).stdout.lines().next().unwrap_or_default().to_owned();
    for column in ["NAME", "TARGET", "CRON", "ZONE", "STATE", "NEXT FIRE", "LAST FIRE"] {
        assert!(header.contains(column), "{column} in {header:?}");
    }
    table.has(&["nightly", "worker probe-1", "0 3 * * *", "Europe/Berlin", "enabled", "never"]);
    assert!(!table.stdout.contains('\x1b'), "no colour on a pipe");
    let listed = system.cli(&["schedules", "--json"]).await.expect(0).json();
    let nightly = &listed[0];
    assert_eq!((nightly["name"].as_str(), nightly["overlap"].as_str()), (Some("nightly"), Some("queue")));
    assert_eq!(nightly["upcoming"].as_array().map(Vec::len), Some(3), "{nightly}");
    assert_eq!(nightly["arguments"], json!({"options": {"duration_ms": 100}}));

    // Pause and resume with reasons.
    let paused = system.cli(&["schedules", "pause", "nightly", "--reason", "maintenance window"]).await;
    paused.expect(0).has(&["Schedule nightly is paused"]);
    let shown = system.cli(&["schedules", "show", "nightly", "--json"]).await.expect(0).json();
    assert_eq!((shown["enabled"].as_bool(), shown["upcoming"].as_array().map(Vec::len)), (Some(false), Some(0)));
    system.cli(&["schedules"]).await.expect(0).has(&["paused"]);
    let resumed = system.cli(&["schedules", "resume", "nightly", "--reason", "window over"]).await;
    resumed.expect(0).has(&["Schedule nightly is resumed; it fires next at"]);

    // Edit: the flags given change, the rest stays (options merge).
    let args = ["schedules", "edit", "nightly", "--cron", "30 4 * * *", "-o", "progress_steps=2", "--reason", "later"];
    system.cli(&args).await.expect(0).has(&["Changed schedule nightly.", "30 4 * * * in Europe/Berlin"]);
    let shown = system.cli(&["schedules", "show", "nightly", "--json"]).await.expect(0).json();
    assert_eq!((shown["cron"].as_str(), shown["missed"].as_str()), (Some("30 4 * * *"), Some("once")));
    assert_eq!(shown["arguments"], json!({"options": {"duration_ms": 100, "progress_steps": 2}}));

    // Show: the definition, the next fires and the audit trail with every reason.
    let shown = system.cli(&["schedules", "show", "nightly"]).await;
    shown.expect(0).has(&["schedule   nightly (", "overlap    queue", "Last fires:", "none yet", "Audit trail:"]);
    for part in ["the nightly probe", "maintenance window", "window over", "cron: 0 3 * * * → 30 4 * * *", "otto"] {
        assert!(shown.stdout.contains(part), "{part:?} is missing: {shown:#?}");
    }
    let audit = system.cli(&["schedules", "audit", "nightly", "--json"]).await.expect(0).json();
    let actions: Vec<&str> = audit.as_array().expect("entries").iter().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(actions, ["change", "resume", "pause", "create"], "newest first");

    // A schedule that fires every second: its fires, and its runs' origin.
    let args = [
        "schedules",
        "create",
        "each-second",
        "--worker",
        "probe-2",
        "--cron",
        "* * * * * *",
        "-o",
        "duration_ms=50",
        "--reason",
        "watch it fire",
    ];
    system.cli(&args).await.expect(0);
    let fires = system
        .json_until(&["schedules", "fires", "each-second", "--json"], "a requested fire", |f| {
            f.as_array().is_some_and(|f| f.iter().any(|f| f["outcome"] == "requested"))
        })
        .await;
    system.cli(&["schedules", "pause", "each-second", "--reason", "seen it"]).await.expect(0);
    let fire = fires.as_array().and_then(|f| f.iter().find(|f| f["outcome"] == "requested")).expect("a fire");
    let run = fire["run_id"].as_str().expect("the fire's run").to_owned();
    system.cli(&["schedules", "fires", "each-second"]).await.expect(0).has(&["FIRE TIME", "requested", &run]);
    system.cli(&["schedules"]).await.expect(0).has(&["each-second", "worker probe-2", "paused"]);
    let shown = system.cli(&["run", "show", &run]).await;
    shown.expect(0).has(&["schedule   each-second (", ", the fire of "]);
    let deleted = system.cli(&["schedules", "delete", "each-second", "--reason", "done with it"]).await;
    deleted.expect(0).has(&["Deleted schedule each-second"]);
    system.cli(&["schedules", "show", "each-second"]).await.expect(5);
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schedules_are_created_listed_previewed_paused_and_audited() {
    schedules_are_created_listed_previewed_paused_and_audited(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schedules_are_created_listed_previewed_paused_and_audited() {
    schedules_are_created_listed_previewed_paused_and_audited(Kind::Postgres).await;
}

/// A pipeline is listed with its steps; a run of it is shown step by step, a second one while it is in flight
/// exits 6 with the API's sentence, cancelling it ends it; a run to the end shows each step's run, and a step's
/// run says which pipeline run and step it is. A run that is retried shows its chain and when the retry waits.
async fn pipelines_run_show_cancel_and_runs_show_their_lineage(kind: Kind) {
    let system = start(kind).await;
    let listed = system.cli(&["pipelines"]).await;
    listed.expect(0).has(&["PIPELINE", "chain", "probe-1 → probe-2", "never", "probe-1, then probe-2"]);
    let json = system.cli(&["pipelines", "--json"]).await.expect(0).json();
    assert_eq!(json[0]["steps"], json!(["probe-1", "probe-2"]));

    let started = system.cli(&["pipelines", "run", "chain", "-o", "probe-1.duration_ms=30000"]).await;
    started.expect(0).has(&["Started pipeline run ", " of chain; its step 1/2 (probe-1) is run "]);
    let id = started.stdout.split_whitespace().nth(3).expect("the pipeline run's id").to_owned();
    let second = system.cli(&["pipelines", "run", "chain"]).await;
    second.expect(6);
    assert!(second.stderr.contains(&id) && second.stdout.is_empty(), "the 409 names the run in flight: {second:#?}");
    system.cli(&["pipelines", "run", "chain", "-o", "duration_ms=5"]).await.expect(2);
    system.cli(&["pipelines", "run", "no-such-pipeline"]).await.expect(5);
    system.cli_as(VIEWER, &["pipelines", "run", "chain"]).await.expect(4);

    system
        .json_until(&["pipelines", "show", &id, "--json"], "the first step running", |p| {
            p["runs"][0]["state"] == "running"
        })
        .await;
    let shown = system.cli(&["pipelines", "show", &id]).await;
    shown.expect(0).has(&["pipeline     chain", "state        running", "STEP", "ATTEMPT"]);
    let row = |o: &Outcome, step: &str| {
        o.stdout.lines().find(|l| l.starts_with(&format!("{step} "))).unwrap_or_default().to_owned()
    };
    let first = row(&shown, "1");
    let cells: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(
        (cells.get(1), cells.get(3), cells.get(4)),
        (Some(&"probe-1"), Some(&"running"), Some(&"1")),
        "{shown:#?}"
    );
    assert!(row(&shown, "2").contains("pending"), "{shown:#?}");
    system.cli(&["pipelines", "cancel", &id]).await.expect(0).has(&["Cancellation of pipeline run"]);
    system.json_until(&["pipelines", "show", &id, "--json"], "the run cancelled", |p| p["state"] == "cancelled").await;
    system.cli(&["pipelines", "runs", "chain"]).await.expect(0).has(&[&id, "cancelled", "otto"]);

    // A run to the end: both steps succeed, and a step's run names its pipeline run and step.
    let started = system.cli(&["pipelines", "run", "chain", "--json", "-o", "probe-2.duration_ms=20"]).await;
    let id = id_of(&started.expect(0).json());
    let done = system
        .json_until(&["pipelines", "show", &id, "--json"], "the run to succeed", |p| p["state"] == "succeeded")
        .await;
    let step_run = done["runs"][1]["id"].as_str().expect("the second step's run").to_owned();
    let shown = system.cli(&["pipelines", "show", &id]).await;
    assert!(row(&shown, "2").contains(&step_run) && row(&shown, "2").contains("succeeded"), "{shown:#?}");
    let run = system.cli(&["run", "show", &step_run]).await;
    run.expect(0).has(&[&format!("pipeline   run {id}, step 2")]);
    system.cli(&["pipelines"]).await.expect(0).has(&["succeeded"]);

    // A run that fails is retried; the retry waits for its delay, and both show the chain.
    let http = reqwest::Client::new();
    let body = json!({"options": {"exit_code": 3, "duration_ms": 20},
        "retry": {"max_attempts": 3, "initial_delay_seconds": 120}});
    let response = http
        .post(format!("{}/api/workers/probe-3/runs", system.api_url))
        .bearer_auth(OPERATOR)
        .json(&body)
        .send()
        .await
        .expect("request a run");
    let first: Value = response.json().await.expect("the run");
    let first = id_of(&first);
    let detail = system
        .json_until(&["run", "show", &first, "--json"], "the retry", |r| {
            r["chain"].as_array().is_some_and(|c| c.len() == 2)
        })
        .await;
    let retry = detail["chain"][1]["id"].as_str().expect("the retry").to_owned();
    let shown = system.cli(&["run", "show", &first]).await;
    shown.expect(0).has(&[
        "attempt    1 of 3",
        &format!("retried by {retry} (attempt 2, queued)"),
        "chain      1 failed",
    ]);
    let shown = system.cli(&["run", "show", &retry]).await;
    shown.expect(0).has(&[&format!("attempt    2 of 3, a retry of {first}"), "not before ", "(this run)"]);
    system.cli(&["cancel", &retry]).await.expect(0);
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pipelines_run_show_cancel_and_runs_show_their_lineage() {
    pipelines_run_show_cancel_and_runs_show_their_lineage(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pipelines_run_show_cancel_and_runs_show_their_lineage() {
    pipelines_run_show_cancel_and_runs_show_their_lineage(Kind::Postgres).await;
}
