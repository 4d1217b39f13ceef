//! The archive's own kind of worker, plugged in unchanged: the example package of adapters/python/examples
//! (SQLAlchemy models and a `sessionmaker`, registries with `PRESETS`, workers whose `count_pending(db, …)` and
//! `execute(db, …)` take the session first) driven by the real daemon and read through the real API, on both
//! backends. Each test copies the package so that it can edit the code as a developer would.
//!
//! Every command goes through a one-line shell wrapper that appends the arguments the daemon passed to a file
//! before it runs the adapter, so a test sees exactly which flags a worker got.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use reqwest::{Method, StatusCode};
use scrinalia_shared::{Role, WorkerSpec};
use scrinalia_testkit::{
    config::{option, worker},
    stack::Stack,
};
use scrinalia_tests::{
    Binaries, TestDb,
    api_harness::{ADMIN, OPERATOR, VIEWER},
    backend_tests, eventually, free_port,
};
use serde_json::{Value, json};

backend_tests!(
    a_seed_shaped_module_describes_counts_and_runs_with_its_session_committed_or_rolled_back,
    the_code_is_the_one_source_of_defaults_and_a_disagreeing_catalogue_is_named,
    an_engine_from_a_cleaning_rule_is_read_reported_and_never_passed_as_flags,
    a_seed_shaped_module_reports_items_and_takes_a_scope_and_a_skip_list,
);

const WAIT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

fn python() -> String {
    std::env::var("SCRINALIA_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A copy of the example package with its own archive database, and the stack running it.
struct Archive {
    stack: Stack,
    package: PathBuf,
    database: PathBuf,
    argv: PathBuf,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's folder");
    for entry in std::fs::read_dir(from).expect("read the example package") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

impl Archive {
    /// Copies the package, creates its database with ten documents and starts the API and a daemon whose
    /// catalogue runs `tag-suggest` and `quality-validator` from the copy; `edit` adjusts the two entries.
    async fn start(t: &TestDb, edit: impl FnOnce(&mut WorkerSpec, &mut WorkerSpec)) -> Self {
        let dir = t.dir.path();
        let root = dir.join("py");
        copy_dir(&repo().join("adapters/python/examples/archive"), &root.join("archive"));
        let database = dir.join("archive.sqlite");
        let env = [("PYTHONPATH", root.display().to_string()), ("ARCHIVE_DATABASE_URL", sqlite_url(&database))];
        let setup = "from archive.db import create_schema, SessionLocal, Document\n\
                     create_schema()\n\
                     with SessionLocal() as db:\n    \
                         db.add_all([Document(id=i, text=f'document {i} about archives, curators and collections') \
                         for i in range(1, 11)])\n    \
                         db.commit()\n";
        let made = Command::new(python()).args(["-c", setup]).envs(env.clone()).output().expect("run python");
        assert!(
            made.status.success(),
            "the archive database (SQLAlchemy is needed; scripts/test installs it): {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let argv = dir.join("argv.log");
        let command = |module: &str| {
            let script = format!(
                "printf '{module} %s\\n' \"$*\" >> '{}'; exec {} '{}' --session archive.db:SessionLocal \
                 --registries archive.engines:REGISTRIES {module} \"$@\"",
                argv.display(),
                python(),
                repo().join("adapters/python/scrinalia_worker.py").display()
            );
            let mut spec = worker(module.rsplit('.').next().unwrap_or(module), &["/bin/sh", "-c", &script, "worker"]);
            spec.env = env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            spec.timeout_seconds = 120;
            spec
        };
        let mut tags = command("archive.workers.tag_suggest");
        tags.name = "tag-suggest".into();
        let mut validator = command("archive.workers.quality_validator");
        validator.name = "quality-validator".into();
        edit(&mut tags, &mut validator);
        let config = t
            .config()
            .test_daemon(|d| (d.poll_seconds, d.queue_count_timeout_seconds) = (1, 60))
            .with(|f| {
                f.api.listen = ([127, 0, 0, 1], free_port()).into();
                f.api.events_poll_ms = 100;
                // The catalogue names the engine's server and one preset (as the code's registry has it); the
                // other presets come from the registry.
                f.engines.insert(
                    "ollama".into(),
                    scrinalia_shared::Engine {
                        kind: "none".into(),
                        url: Some("http://127.0.0.1:11434".into()),
                        presets: [("fast".to_owned(), "llama3.2:1b".to_owned())].into(),
                        description: None,
                    },
                );
            })
            .token("vera-viewer", Role::Viewer, VIEWER)
            .token("otto-operator", Role::Operator, OPERATOR)
            .token("ada-admin", Role::Admin, ADMIN)
            .workers([tags, validator]);
        let stack =
            Stack::start(&Binaries::of_this_test(), dir, &config, true).await.unwrap_or_else(|e| panic!("{e:#}"));
        Self { stack, package: root.join("archive"), database, argv }
    }

    /// Runs `sql` on the archive database (through Python's sqlite3: the test needs no SQLite of its own).
    fn archive_sql(&self, sql: &str) -> Value {
        let script = format!(
            "import json, sqlite3\nc = sqlite3.connect({:?})\nrows = c.execute({sql:?}).fetchall()\nc.commit()\n\
             print(json.dumps(rows))",
            self.database.display().to_string()
        );
        let out = Command::new(python()).args(["-c", &script]).output().expect("run python");
        assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("rows as JSON")
    }

    fn stamps(&self, stamp: &str) -> i64 {
        self.archive_sql(&format!("select count(*) from stamps where stamp = '{stamp}'"))[0][0].as_i64().expect("n")
    }

    async fn worker(&self, name: &str) -> Value {
        self.stack.get(&format!("/api/workers/{name}"), VIEWER).await.expect(StatusCode::OK, None)
    }

    /// Waits until the worker's stored description satisfies `done`.
    async fn described(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        eventually(WAIT, what, || async {
            let view = self.worker(name).await;
            done(&view).then_some(view)
        })
        .await
    }

    async fn ask(&self, name: &str, chore: &str) -> Value {
        let path = format!("/api/workers/{name}/{chore}");
        self.stack.json(Method::POST, &path, OPERATOR, json!({})).await.expect(StatusCode::ACCEPTED, None)
    }

    async fn trigger(&self, name: &str, options: Value) -> Value {
        let path = format!("/api/workers/{name}/runs");
        self.stack
            .json(Method::POST, &path, OPERATOR, json!({"options": options}))
            .await
            .expect(StatusCode::CREATED, None)
    }

    async fn finished(&self, id: &Value) -> Value {
        let path = format!("/api/runs/{}", id.as_str().expect("an id"));
        eventually(WAIT, "the run's end", || async {
            let run = self.stack.get(&path, VIEWER).await.expect(StatusCode::OK, None);
            (!matches!(run["state"].as_str(), Some("queued" | "running"))).then_some(run)
        })
        .await
    }

    /// The arguments the wrapper recorded for `verb` of the worker module `module` (`tag_suggest`, …).
    fn argv(&self, module: &str, verb: &str) -> Vec<String> {
        let text = std::fs::read_to_string(&self.argv).unwrap_or_default();
        let prefix = format!("archive.workers.{module} ");
        let args = text.lines().filter_map(|l| l.strip_prefix(prefix.as_str()));
        args.filter(|a| a.split(' ').next() == Some(verb)).map(str::to_owned).collect()
    }
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite:///{}", path.display())
}

fn declared_default(view: &Value, option: &str) -> Value {
    view["described"]["description"]["declared"]["options"]
        .as_array()
        .and_then(|options| options.iter().find(|o| o["name"] == option))
        .map(|o| o["default"].clone())
        .unwrap_or(Value::Null)
}

async fn a_seed_shaped_module_describes_counts_and_runs_with_its_session_committed_or_rolled_back(t: &TestDb) {
    let mut archive = Archive::start(t, |_, _| {}).await;
    // Described at the daemon's start: the options come from the signature, with types, defaults and bounds.
    let view = archive.described("tag-suggest", "the description", |v| !v["described"]["described_at"].is_null()).await;
    let options: Vec<&str> =
        view["options"].as_array().expect("options").iter().filter_map(|o| o["name"].as_str()).collect();
    assert_eq!(options, ["batch_size", "max_tags", "delay_ms", "fail_after"], "{view:#}");
    assert_eq!(
        view["options"][0],
        json!({"name": "batch_size", "type": "integer", "default": 20, "minimum": 1, "maximum": 500})
    );
    assert_eq!(view["effective"]["model"], "llama3.2:1b", "the preset's model from the code's registry");
    let daemon = archive.stack.daemon_id(VIEWER).await;
    assert_eq!(view["described"]["described_by"], json!(daemon));
    assert!(view["described"]["command"][0] == "/bin/sh" && view["described"]["error"].is_null(), "{view:#}");
    assert!(
        archive.argv("tag_suggest", "describe").iter().all(|l| l == "describe"),
        "describe gets no flags: {:?}",
        archive.argv("tag_suggest", "describe")
    );
    // Counted (once the daemon started, and again after each run) through the module's own session.
    let counted = eventually(WAIT, "the first count", || async {
        let view = archive.worker("tag-suggest").await;
        view["queue"]["pending"].as_i64().map(|_| view)
    })
    .await;
    assert_eq!(counted["queue"]["pending"], 10, "{counted:#}");

    // A failure rolls back the batch it had not committed; the committed batches stay.
    let failed = archive.trigger("tag-suggest", json!({"batch_size": 3, "fail_after": 5})).await;
    let failed = archive.finished(&failed["id"]).await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert!(failed["error"].as_str().is_some_and(|e| e.contains("tagging failed after 5 documents")), "{failed:#}");
    assert_eq!(archive.stamps("tags_v1"), 3, "one batch of 3 committed, the next rolled back");

    // SIGTERM (a cancellation) rolls back what was not committed.
    let slow = archive.trigger("tag-suggest", json!({"batch_size": 2, "delay_ms": 400})).await;
    let id = slow["id"].as_str().expect("an id").to_owned();
    eventually(WAIT, "a committed batch of the slow run", || async { (archive.stamps("tags_v1") >= 5).then_some(()) })
        .await;
    let path = format!("/api/runs/{id}/cancel");
    archive.stack.json(Method::POST, &path, OPERATOR, json!({})).await.expect(StatusCode::ACCEPTED, None);
    let cancelled = archive.finished(&slow["id"]).await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled:#}");
    let kept = archive.stamps("tags_v1");
    assert!(kept < 10 && (kept - 3) % 2 == 0, "only whole batches of 2 were kept ({kept} stamps)");

    // A run that succeeds commits its last batch; the count after it says so.
    let done = archive.trigger("tag-suggest", json!({})).await;
    let done = archive.finished(&done["id"]).await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["result"]["processed"], 10 - kept);
    assert_eq!(archive.stamps("tags_v1"), 10, "the adapter committed the last batch");
    eventually(WAIT, "a count after the run", || async {
        (archive.worker("tag-suggest").await["queue"]["pending"] == 0).then_some(())
    })
    .await;
    archive.stack.assert_healthy().await;
}

async fn the_code_is_the_one_source_of_defaults_and_a_disagreeing_catalogue_is_named(t: &TestDb) {
    let mut archive = Archive::start(t, |tags, _| {
        tags.options = vec![option("batch_size", scrinalia_shared::OptionType::Integer, Some(json!(10)))];
    })
    .await;
    let view = archive.described("tag-suggest", "the description", |v| declared_default(v, "batch_size") == 20).await;
    assert_eq!(view["disagreements"], json!(["catalogue says batch_size 10, code says 20; runs use 20"]), "{view:#}");
    assert_eq!(view["effective"]["options"]["batch_size"], json!({"value": 20, "source": "default"}));
    let health = archive.stack.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
    let check = health["checks"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "worker:tag-suggest").cloned());
    let check = check.unwrap_or_else(|| panic!("a check of the worker in {health:#}"));
    assert_eq!(check["status"], "degraded");
    assert!(
        check["error"].as_str().is_some_and(|e| e.contains("catalogue says batch_size 10, code says 20")),
        "{check:#}"
    );

    // A developer changes the default in the code; after a describe the view and the next run follow.
    let file = archive.package.join("workers/tag_suggest.py");
    let code = std::fs::read_to_string(&file).expect("the worker's code");
    let changed =
        code.replace("batch_size: Annotated[int, Range(1, 500)] = 20", "batch_size: Annotated[int, Range(1, 500)] = 4");
    assert_ne!(code, changed, "the default is where the test expects it");
    std::fs::write(&file, changed).expect("change the code");
    let asked = archive.ask("tag-suggest", "describe").await;
    assert_eq!(
        (asked["chore"]["chore"].as_str(), asked["taken"].as_bool()),
        (Some("describe"), Some(true)),
        "{asked:#}"
    );
    let view = archive.described("tag-suggest", "the new default", |v| declared_default(v, "batch_size") == 4).await;
    assert_eq!(view["effective"]["options"]["batch_size"], json!({"value": 4, "source": "default"}));
    assert_eq!(view["disagreements"], json!(["catalogue says batch_size 10, code says 4; runs use 4"]));
    let run = archive.trigger("tag-suggest", json!({})).await;
    assert_eq!(run["config"]["options"]["batch_size"]["value"], 4, "{run:#}");
    let run = archive.finished(&run["id"]).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let passed = archive.argv("tag_suggest", "run");
    assert!(
        passed.last().is_some_and(|l| l.contains("--batch_size=4")),
        "the worker got the code's default: {passed:?}"
    );
    // Three batches of 4, 4 and 2 documents: the progress the worker reported came in steps of 4.
    assert_eq!(run["progress"]["done"], 8, "{run:#}");

    // Out of the code's bounds: refused with a sentence, on trigger and on override.
    let path = "/api/workers/tag-suggest/runs";
    let refused = archive.stack.json(Method::POST, path, OPERATOR, json!({"options": {"batch_size": -5}})).await;
    let refused = refused.client_error();
    assert_eq!(refused["message"], "Option \"batch_size\" must be at least 1, not -5.", "{refused:#}");
    let change = json!({"options": {"batch_size": 501}, "reason": "bigger"});
    let refused = archive.stack.json(Method::PUT, "/api/workers/tag-suggest/override", ADMIN, change).await;
    assert!(refused.client_error()["message"].as_str().is_some_and(|m| m.contains("must be at most 500, not 501")));
    archive.stack.assert_healthy().await;
}

async fn an_engine_from_a_cleaning_rule_is_read_reported_and_never_passed_as_flags(t: &TestDb) {
    let mut archive = Archive::start(t, |_, validator| {
        // A catalogue that still names an engine: the code says it comes from elsewhere, and the code wins.
        (validator.engine, validator.preset) = (Some("ollama".into()), Some("fast".into()));
    })
    .await;
    // No rule yet: the check says so, and health names it.
    archive.ask("quality-validator", "check").await;
    let health = eventually(WAIT, "the validator's check to fail health", || async {
        let health = archive.stack.get("/api/health", VIEWER).await.expect(StatusCode::OK, None);
        let check = health["checks"].as_array()?.iter().find(|c| c["name"] == "worker:quality-validator")?.clone();
        (check["status"] == "down").then_some(check)
    })
    .await;
    let error = health["error"].as_str().unwrap_or_default();
    assert!(error.contains("There is no active LLM_CHECK cleaning rule"), "{health:#}");

    archive.archive_sql(
        "insert into cleaning_rules (id, kind, active, engine, preset, model) values (7, 'LLM_CHECK', 1, 'ollama', \
         'thorough', 'qwen2.5:14b')",
    );
    archive.ask("quality-validator", "describe").await;
    archive.ask("quality-validator", "check").await;
    let view = archive
        .described("quality-validator", "the rule's engine", |v| {
            v["effective"]["model"] == "qwen2.5:14b" && v["readiness"]["ready"] == true
        })
        .await;
    assert_eq!(view["engine_configurable"], false, "{view:#}");
    assert_eq!(view["effective"]["engine"], json!({"value": "ollama", "source": "external"}));
    assert_eq!(view["effective"]["engine_source"]["reference"], "LLM_CHECK rule 7");
    let disagreement =
        "catalogue says engine ollama, code says the engine comes from the active LLM_CHECK cleaning rule";
    assert!(
        view["disagreements"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d.as_str().is_some_and(|d| d.starts_with(disagreement)))),
        "{view:#}"
    );
    let run = archive.trigger("quality-validator", json!({})).await;
    let run = archive.finished(&run["id"]).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(run["reported_config"]["model"], "qwen2.5:14b", "the run reports the engine it used: {run:#}");
    assert_eq!(run["reported_config"]["source"]["reference"], "LLM_CHECK rule 7");

    // The rule changes: after a describe the view and the next run follow; the worker never gets engine flags.
    archive.archive_sql("update cleaning_rules set active = 0");
    archive.archive_sql(
        "insert into cleaning_rules (id, kind, active, engine, preset, model) values (8, 'LLM_CHECK', 1, 'ollama', \
         'balanced', 'qwen2.5:7b')",
    );
    archive.ask("quality-validator", "describe").await;
    let view =
        archive.described("quality-validator", "the new rule", |v| v["effective"]["model"] == "qwen2.5:7b").await;
    assert_eq!(view["effective"]["preset"], json!({"value": "balanced", "source": "external"}));
    let run = archive.trigger("quality-validator", json!({})).await;
    let run = archive.finished(&run["id"]).await;
    assert_eq!(run["reported_config"]["model"], "qwen2.5:7b", "{run:#}");
    assert_eq!(run["reported_config"]["source"]["reference"], "LLM_CHECK rule 8");
    let runs = archive.argv("quality_validator", "run");
    assert_eq!(runs.len(), 2, "{runs:?}");
    for verb in ["run", "check", "count-pending", "describe"] {
        for line in archive.argv("quality_validator", verb) {
            assert!(!line.contains("--engine") && !line.contains("--preset") && !line.contains("--model"), "{line}");
        }
    }
    // Choosing an engine here is refused with the sentence saying where it comes from.
    let path = "/api/workers/quality-validator/runs";
    let refused = archive.stack.json(Method::POST, path, OPERATOR, json!({"preset": "fast"})).await.client_error();
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("It comes from the active LLM_CHECK cleaning rule (LLM_CHECK rule 8)")),
        "{refused:#}"
    );

    // The rule goes away: the check says so again.
    archive.archive_sql("delete from cleaning_rules");
    archive.ask("quality-validator", "check").await;
    archive.described("quality-validator", "not ready again", |v| v["readiness"]["ready"] == false).await;
    archive.stack.assert_healthy().await;
}

async fn a_seed_shaped_module_reports_items_and_takes_a_scope_and_a_skip_list(t: &TestDb) {
    let archive = Archive::start(t, |tags, _| tags.quarantine_after = Some(2)).await;
    archive.archive_sql("update documents set text = '' where id = 3");
    // What it can do comes from its signature: `item`, `only` and `checkpoint` parameters.
    let view = archive
        .described("tag-suggest", "the description", |v| !v["described"]["description"]["capabilities"].is_null())
        .await;
    let capabilities = &view["described"]["description"]["capabilities"];
    assert_eq!((&capabilities["items"], &capabilities["scope"]), (&json!(true), &json!(true)), "{capabilities}");

    // Each document reported: nine tagged, the empty one failed with its class (and left pending).
    let first = archive.trigger("tag-suggest", json!({"batch_size": 4})).await;
    let first = archive.finished(&first["id"]).await;
    assert_eq!(first["state"], "succeeded", "{first:#}");
    assert_eq!((first["items"]["succeeded"].as_i64(), first["items"]["failed"].as_i64()), (Some(9), Some(1)));
    let id = first["id"].as_str().expect("an id");
    let failures = archive.stack.get(&format!("/api/runs/{id}/items?outcome=failed"), VIEWER).await;
    let failures = failures.expect(StatusCode::OK, None);
    assert_eq!(failures["items"][0]["id"], "3");
    assert_eq!(failures["items"][0]["class"], "ocr_empty");
    assert_eq!(archive.stamps("tags_v1"), 9);

    // A rerun of the failures is given exactly document 3 (SCRINALIA_ITEMS_ONLY), which fails again.
    let path = format!("/api/runs/{id}/rerun-failed");
    let rerun = archive.stack.json(Method::POST, &path, OPERATOR, json!({})).await.expect(StatusCode::CREATED, None);
    let rerun = archive.finished(&rerun["id"]).await;
    assert_eq!(rerun["state"], "succeeded", "{rerun:#}");
    assert_eq!((rerun["items"]["failed"].as_i64(), rerun["items"]["succeeded"].as_i64()), (Some(1), Some(0)));

    // Two failing runs in a row: quarantined; the next run is given it to skip (SCRINALIA_ITEMS_SKIP).
    let quarantine =
        archive.stack.get("/api/workers/tag-suggest/quarantine", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(quarantine["items"][0]["id"], "3", "{quarantine:#}");
    let third = archive.trigger("tag-suggest", json!({})).await;
    let third = archive.finished(&third["id"]).await;
    assert_eq!(
        (third["items"]["skipped"].as_i64(), third["items"]["failed"].as_i64()),
        (Some(1), Some(0)),
        "{third:#}"
    );
    assert_eq!(archive.stamps("tags_v1"), 9, "the quarantined document is untouched");
}
