//! `scrinalia resources` against the real `scrinalia-api` on a fresh database of each backend, with one
//! `model-server` of capacity 1 in the catalogue: the listing for people and with `--json`, `set` and `reset` with
//! their sentence, the audit trail, and the documented exit code with the API's sentence for each refusal.

use std::{process::Stdio, time::Duration};

use scrinalia_shared::{ResourceSpec, Role};
use scrinalia_tests::{
    Process, TestDb, backend_tests, bin_path,
    daemon_harness::{probe, with_defaults},
    demo_worker, eventually, free_port,
};
use serde_json::{Value, json};
use tokio::process::Command;

backend_tests!(resources_are_listed_set_reset_and_audited,);

const ADMIN: &str = "scr_cli_resources_admin";
const VIEWER: &str = "scr_cli_resources_viewer";

/// What one run of the CLI did.
#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "expected exit code {code}; got {self:#?}");
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }

    fn has(&self, parts: &[&str]) -> &Self {
        for part in parts {
            assert!(self.stdout.contains(part), "{part:?} is missing from stdout: {self:#?}");
        }
        self
    }

    fn says(&self, part: &str) -> &Self {
        assert!(self.stderr.contains(part), "{part:?} is missing from stderr: {self:#?}");
        self
    }
}

/// The API alone (resources need no daemon) on `t`; returns it and its URL once it answers.
async fn start_api(t: &TestDb) -> (Process, String) {
    let port = free_port();
    let mut worker = with_defaults(probe(&demo_worker(), "probe-1", 120), &[("output_lines", json!(1))]);
    worker.resources = vec!["model-server".into()];
    let config = t
        .config()
        .with(|f| {
            f.database.max_connections = 5;
            f.api.listen = ([127, 0, 0, 1], port).into();
            f.resources = vec![ResourceSpec {
                name: "model-server".into(),
                capacity: 1,
                description: Some("the archive's one Ollama server".into()),
                scope: Default::default(),
                starts_per_minute: None,
                preempt_after_seconds: None,
                preempt_grace_seconds: None,
            }];
        })
        .token("ada", Role::Admin, ADMIN)
        .token("vera", Role::Viewer, VIEWER)
        .worker(worker);
    let config = t.write_config(&config, "config").display().to_string();
    let api = scrinalia_tests::start("scrinalia-api", "api", t.dir.path(), &["--config", &config], &[]);
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let resources = format!("{url}/api/resources");
    eventually(Duration::from_secs(30), "the API to answer", || {
        let request = http.get(&resources).bearer_auth(VIEWER).send();
        async move { request.await.ok()?.status().is_success().then_some(()) }
    })
    .await;
    (api, url)
}

/// Runs `scrinalia args…` against `url` with `token` (and nothing inherited that could steer it).
async fn scrinalia(url: &str, token: &str, args: &[&str]) -> Outcome {
    let mut command = Command::new(bin_path("scrinalia"));
    command
        .args(args)
        .env_remove("SCRINALIA_API")
        .env_remove("SCRINALIA_TOKEN")
        .envs([("SCRINALIA_API", url), ("SCRINALIA_TOKEN", token)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("scrinalia {args:?} did not finish within 60 s"))
        .expect("run scrinalia");
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The listing, `set` with its sentence and what `--json` then says, the audit trail both ways, `reset`, and the
/// refusals: a capacity of 0 (7, the API's sentence), an unknown resource (5), a viewer (4), no reason (2).
async fn resources_are_listed_set_reset_and_audited(t: &TestDb) {
    let (api, url) = start_api(t).await;
    let cli = |token: &'static str, args: &'static [&str]| scrinalia(&url, token, args);

    cli(VIEWER, &["resources"]).await.expect(0).has(&["RESOURCE", "model-server", "0/1", "catalogue", "Ollama"]);
    let listed = cli(VIEWER, &["resources", "--json"]).await.expect(0).json();
    assert_eq!(listed["resources"][0]["capacity"], 1, "{listed}");
    assert_eq!(listed["resources"][0]["source"], "default", "{listed}");

    cli(ADMIN, &["resources", "set", "model-server", "2", "--reason", "a second GPU is in"])
        .await
        .expect(0)
        .has(&["Resource model-server has capacity 2 (an override; the catalogue says 1)", "no run holds it now"]);
    let listed = cli(VIEWER, &["resources", "--json"]).await.expect(0).json();
    let r = &listed["resources"][0];
    assert_eq!(
        (r["capacity"].clone(), r["source"].clone(), r["updated_by"].clone()),
        (json!(2), json!("override"), json!("ada"))
    );
    cli(VIEWER, &["resources"]).await.expect(0).has(&["0/2", "override by ada at"]);
    let set = cli(ADMIN, &["resources", "set", "model-server", "3", "--reason", "x", "--json"]).await.expect(0).json();
    assert_eq!(set["capacity"], 3, "--json prints the API's resource: {set}");

    cli(ADMIN, &["resources", "set", "model-server", "0", "--reason", "off"]).await.expect(7).says("A capacity of 0");
    cli(ADMIN, &["resources", "set", "gpu-box", "2", "--reason", "r"]).await.expect(5).says("There is no resource");
    cli(VIEWER, &["resources", "set", "model-server", "4", "--reason", "r"]).await.expect(4).says("admin role");
    cli(ADMIN, &["resources", "set", "model-server", "4"]).await.expect(2);

    cli(ADMIN, &["resources", "reset", "model-server", "--reason", "the GPU went back"])
        .await
        .expect(0)
        .has(&["capacity 1 (the catalogue's)"]);
    let trail = cli(VIEWER, &["resources", "audit", "model-server", "--json"]).await.expect(0).json();
    let changes: Vec<(Value, Value, Value)> = trail["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (e["before"].clone(), e["after"].clone(), e["reason"].clone()))
        .collect();
    assert_eq!(
        changes,
        [
            (json!(3), Value::Null, json!("the GPU went back")),
            (json!(2), json!(3), json!("x")),
            (Value::Null, json!(2), json!("a second GPU is in")),
        ]
    );
    cli(VIEWER, &["resources", "audit", "model-server", "--limit", "1"]).await.expect(0).has(&[
        "WHEN",
        "ada",
        "3 → catalogue",
        "the GPU went back",
    ]);
    drop(api);
}
