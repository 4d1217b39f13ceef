//! The archive workers' verbs in process, on a scratch data folder, with time given rather than waited for:
//! describe's answer, check, the cleaning rule steering the quality validator, the pipeline's order, and
//! staging filling up over time.

use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::{
    invocation::Verb,
    staging::{EVERY_SECONDS, INITIAL},
    stamps::StampBook,
};

const T0: u64 = 1_790_000_000;

/// Runs `args` (a worker, a verb, flags) on `data` at `now`; returns the exit status and the protocol lines.
fn call(data: &Path, now: u64, args: &[&str]) -> anyhow::Result<(i32, Vec<Value>)> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let invocation = Invocation::parse(&args, |w| Task::named(w).map(Task::options), |_| None)?;
    let task = Task::named(&invocation.worker).expect("an archive worker");
    let mut out = Protocol::to(Vec::new());
    let status = match invocation.verb {
        Verb::Describe => describe(task, &invocation, data, now, &mut out),
        Verb::CountPending => count_pending(task, data, now, &mut out),
        Verb::Check => check(task, data, now, &mut out),
        Verb::Run => run(task, &invocation, data, now, &Stop::never(), &mut out),
    }?;
    let text = String::from_utf8(out.into_inner()).expect("UTF-8");
    Ok((status, text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()))
}

fn one(data: &Path, now: u64, args: &[&str]) -> Value {
    let (status, lines) = call(data, now, args).unwrap_or_else(|e| panic!("{args:?}: {e:#}"));
    assert_eq!((status, lines.len()), (0, 1), "{args:?}: {lines:?}");
    lines.into_iter().next().expect("one line")
}

fn pending(data: &Path, now: u64, worker: &str) -> u64 {
    one(data, now, &[worker, "count-pending"])["pending"].as_u64().expect("a pending count")
}

fn run_all(data: &Path, now: u64, worker: &str) -> Vec<Value> {
    let (status, lines) =
        call(data, now, &[worker, "run", "--delay_ms", "0"]).unwrap_or_else(|e| panic!("{worker}: {e:#}"));
    assert_eq!(status, 0, "{worker}: {lines:?}");
    lines
}

fn write_rules(data: &Path, rules: Value) {
    std::fs::write(rules::path(data), rules.to_string()).expect("write the rules");
}

#[test]
fn describe_reports_the_code_defaults_and_honours_flags_at_the_top_only() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let described = one(dir.path(), T0, &["tag-suggest", "describe"]);
    assert_eq!(
        (&described["engine"], &described["preset"], &described["model"], &described["endpoint"], &described["source"]),
        (&json!("ollama"), &json!("fast"), &json!("llama3.2:1b"), &json!("http://127.0.0.1:11434"), &Value::Null)
    );
    assert_eq!(described["declared"], Task::TagSuggest.declared());
    let flagged = one(dir.path(), T0, &["tag-suggest", "describe", "--preset", "balanced", "--max_tags", "8"]);
    assert_eq!((&flagged["preset"], &flagged["model"]), (&json!("balanced"), &json!("qwen2.5:7b")));
    assert_eq!(flagged["declared"]["preset"], "fast", "declared is always the code's default");
    let transfer = one(dir.path(), T0, &["transfer", "describe"]);
    assert_eq!((&transfer["engine"], &transfer["declared"]["engine"]), (&Value::Null, &Value::Null));
    let spacy = one(dir.path(), T0, &["entity-extract", "describe"]);
    assert_eq!((&spacy["model"], &spacy["endpoint"]), (&json!("en_core_web_sm"), &Value::Null));
}

#[test]
fn every_archive_worker_is_ready_on_a_new_data_folder() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path().join("demo");
    for task in Task::ALL {
        assert_eq!(one(&data, T0, &[task.name(), "check"]), json!({"ready": true}), "{}", task.name());
    }
}

#[test]
fn a_data_folder_that_cannot_be_created_is_not_ready() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").expect("a plain file");
    let answer = one(&file.join("demo"), T0, &["embed", "check"]);
    assert_eq!(answer["ready"], false);
    let reason = answer["reason"].as_str().expect("a reason");
    assert!(reason.starts_with("The demo data folder ") && reason.ends_with('.'), "{reason}");
}

#[test]
fn the_validator_takes_its_engine_from_the_active_rule_and_says_so() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let described = one(data, T0, &["quality-validator", "describe"]);
    assert_eq!((&described["engine"], &described["preset"]), (&json!("ollama"), &json!("thorough")));
    assert_eq!(described["model"], "qwen2.5:14b");
    assert_eq!(
        described["source"],
        json!({"description": "the active LLM_CHECK cleaning rule", "reference": "LLM_CHECK rule 2"})
    );
    assert_eq!((&described["declared"]["engine"], &described["declared"]["preset"]), (&Value::Null, &Value::Null));

    write_rules(
        data,
        json!({"rules": [{"id": 3, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "fast"}]}),
    );
    let described = one(data, T0, &["quality-validator", "describe", "--engine", "spacy"]);
    assert_eq!(
        (&described["model"], &described["source"]["reference"]),
        (&json!("llama3.2:1b"), &json!("LLM_CHECK rule 3"))
    );

    // Something to validate: two documents through transfer and language detection.
    for worker in ["transfer", "language-detect"] {
        call(data, T0, &[worker, "run", "--delay_ms", "0", "--limit", "2"]).expect("an earlier stage");
    }
    let lines = run_all(data, T0, "quality-validator");
    assert_eq!(lines[0]["config"]["model"], "llama3.2:1b", "the first line is the rule's configuration");
    assert_eq!(lines[0]["config"]["source"]["reference"], "LLM_CHECK rule 3");
    let stamps = StampBook::load(data, "quality-validator", "quality_v1").expect("stamps");
    assert_eq!(stamps.documents.len(), 2);
    assert!(stamps.documents.values().all(|r| r["model"] == "llama3.2:1b" && r["rule"] == "LLM_CHECK rule 3"));
}

#[test]
fn without_an_active_rule_the_validator_describes_is_not_ready_and_cannot_run() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    assert_eq!(one(data, T0, &["quality-validator", "check"]), json!({"ready": true}));
    write_rules(data, json!({"rules": [{"id": 2, "kind": "LLM_CHECK", "active": false, "engine": "ollama"}]}));
    let answer = one(data, T0, &["quality-validator", "check"]);
    let sentence = rules::no_rule_sentence(data);
    assert_eq!(answer, json!({"ready": false, "reason": sentence}));
    let described = one(data, T0, &["quality-validator", "describe"]);
    assert_eq!((&described["engine"], &described["model"]), (&Value::Null, &Value::Null));
    assert_eq!(described["source"], json!({"description": "the active LLM_CHECK cleaning rule", "reference": null}));
    let error = call(data, T0, &["quality-validator", "run"]).expect_err("no engine to run with");
    assert_eq!(error.to_string(), sentence);
    std::fs::remove_file(rules::path(data)).expect("remove the rules");
    assert_eq!(one(data, T0, &["quality-validator", "check"])["reason"], json!(sentence), "no file, no rule");
}

#[test]
fn a_later_worker_has_nothing_pending_until_the_earlier_ones_stamped() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let initial = INITIAL as u64;
    assert_eq!(pending(data, T0, "transfer"), initial);
    for task in &Task::ALL[1..] {
        if *task != Task::ConflictJudge {
            assert_eq!(pending(data, T0, task.name()), 0, "{} sees nothing archived", task.name());
        }
    }
    call(data, T0, &["transfer", "run", "--delay_ms", "0", "--limit", "5"]).expect("transfer five");
    assert_eq!(pending(data, T0, "transfer"), initial - 5);
    assert_eq!(pending(data, T0, "language-detect"), 5);
    assert_eq!(pending(data, T0, "entity-extract"), 0, "entities wait for the language");
    run_all(data, T0, "language-detect");
    for worker in ["entity-extract", "summarize", "embed", "quality-validator"] {
        assert_eq!(pending(data, T0, worker), 5, "{worker} reads the language");
    }
    assert_eq!(pending(data, T0, "tag-suggest"), 0, "tags wait for the entities");
    run_all(data, T0, "entity-extract");
    assert_eq!(pending(data, T0, "tag-suggest"), 5);
    assert_eq!(pending(data, T0, "topic-cluster"), 0, "clusters wait for the tags too");
    assert_eq!(one(data, T0, &["conflict-judge", "count-pending"])["done"], 0);
    run_all(data, T0, "tag-suggest");
    assert_eq!(pending(data, T0, "topic-cluster"), 5);
    let judged = run_all(data, T0, "conflict-judge");
    assert_eq!(judged.last().map(|l| l["result"]["processed"].clone()), Some(json!(5)));
    assert_eq!(one(data, T0, &["conflict-judge", "count-pending"])["done"], 5);

    // What the judge compared is what the earlier workers recorded.
    let book = |worker: &str, stamp: &str| StampBook::load(data, worker, stamp).expect("stamps").documents;
    let (tags, entities, verdicts) =
        (book("tag-suggest", "tags_v1"), book("entity-extract", "entities_v1"), book("conflict-judge", "conflicts_v1"));
    for (id, verdict) in &verdicts {
        assert_eq!(verdict["tags"], tags[id]["tags"], "{id}");
        assert_eq!(verdict["entities"], entities[id]["entities"], "{id}");
    }
    let clusters = run_all(data, T0, "topic-cluster");
    assert_eq!(clusters[0]["config"]["preset"], "balanced");
}

#[test]
fn staging_fills_up_over_time_and_the_transfer_takes_what_has_arrived() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let initial = INITIAL as u64;
    assert_eq!(pending(data, T0, "transfer"), initial);
    let later = T0 + 3 * EVERY_SECONDS;
    assert_eq!(pending(data, later, "transfer"), initial + 3);
    let lines = run_all(data, later, "transfer");
    assert_eq!(
        lines[0],
        json!({"config": {"engine": null, "preset": null, "model": null, "endpoint": null, "source": null}})
    );
    assert_eq!(lines.last().map(|l| l["result"]["processed"].clone()), Some(json!(initial + 3)));
    assert_eq!(pending(data, later, "transfer"), 0);
    assert_eq!(pending(data, later, "language-detect"), initial + 3);
    assert_eq!(pending(data, later + EVERY_SECONDS, "transfer"), 1, "the next one arrives");
    let archived: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("archive/doc-0023.json")).expect("archived"))
            .expect("JSON");
    assert_eq!(archived["arrived_at"], T0 + 3 * EVERY_SECONDS);
    let stamps = StampBook::load(data, "transfer", "archived_v1").expect("stamps");
    assert_eq!(stamps.documents["doc-0001"]["waited_seconds"], 3 * EVERY_SECONDS);
}

#[test]
fn a_run_reports_its_configuration_first_then_progress_and_a_result() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    run_all(data, T0, "transfer");
    run_all(data, T0, "language-detect");
    let (status, lines) =
        call(data, T0, &["embed", "run", "--delay_ms", "0", "--batch_size", "8", "--dimensions", "4"]).expect("run");
    assert_eq!(status, 0);
    assert_eq!(lines[0]["config"]["model"], "nomic-embed-text");
    let progress: Vec<(u64, u64)> = lines[1..]
        .iter()
        .filter_map(|l| l.get("progress"))
        .map(|p| (p["done"].as_u64().expect("done"), p["total"].as_u64().expect("total")))
        .collect();
    assert_eq!(progress, [(0, 20), (8, 20), (16, 20), (20, 20)]);
    assert_eq!(lines.last().map(|l| l["result"]["dimensions"].clone()), Some(json!({"4": 20})));
    assert!(call(data, T0, &["embed", "run", "--batch_size", "0"]).is_err(), "bounds are enforced");
}
