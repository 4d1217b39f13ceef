//! The archive workers as the demo catalogue runs them: what their code declares, their readiness and the
//! quality validator's cleaning rule, their queues as a pipeline, several at once, and a clean stop on SIGTERM.

use std::{
    io::{BufRead, BufReader},
    process::Child,
    time::Duration,
};

use nix::sys::signal::Signal;
use scrinalia_shared::Settings;
use serde_json::{Value, json};

use super::{ARCHIVE_WORKERS, Scratch, config_line, demo_toml, describe, json_lines, progress, result, signal, wait};

#[test]
fn the_demo_configuration_loads_the_nine_archive_workers_in_pipeline_order_and_leaves_declarations_to_the_code() {
    let settings = Settings::load_from(Some(&demo_toml()), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = settings.catalogue.workers.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ARCHIVE_WORKERS, "no probes: tests declare their own");
    for worker in &settings.catalogue.workers {
        assert_eq!(worker.command, ["scrinalia-demo-worker", worker.name.as_str()]);
        assert!(worker.options.is_empty(), "{}: its options are declared by its code", worker.name);
        assert!(worker.engine.is_none() && worker.preset.is_none(), "{}: its engine comes from describe", worker.name);
    }
    assert_eq!(settings.catalogue.engines["ollama"].url.as_deref(), Some("http://127.0.0.1:11434"));
    assert_eq!(settings.catalogue.model("ollama", "fast"), None, "the presets are the code's");
    assert_eq!(settings.daemon.worker_env.get("SCRINALIA_DEMO_DATA").map(String::as_str), Some("data/demo"));
    assert_eq!(settings.database.url, "sqlite://data/scrinalia.sqlite");
}

#[test]
fn describe_reports_the_code_defaults_and_every_declared_option_is_accepted() {
    let settings = Settings::load_from(Some(&demo_toml()), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new();
    for worker in &settings.catalogue.workers {
        let name = worker.name.as_str();
        let mut args: Vec<String> = worker.command[1..].to_vec();
        args.push("describe".to_owned());
        let plain: Vec<&str> = args.iter().map(String::as_str).collect();
        let described = scratch.answer(&plain);
        for key in ["engine", "preset", "model", "endpoint", "source", "declared"] {
            assert!(described.get(key).is_some(), "{name}: describe has {key}: {described}");
        }
        let declared = &described["declared"];
        let options = declared["options"].as_array().unwrap_or_else(|| panic!("{name}: options: {declared}"));
        assert!(["batch_size", "delay_ms", "limit"].iter().all(|o| options.iter().any(|d| d["name"] == *o)), "{name}");
        for option in options {
            let kind = option["type"].as_str().expect("a type");
            let typed = match kind {
                "integer" => Value::is_i64,
                "number" => Value::is_number,
                "boolean" => Value::is_boolean,
                "string" => Value::is_string,
                other => panic!("{name}: unknown type {other}"),
            };
            for value in option.get("default").into_iter().chain(option["choices"].as_array().into_iter().flatten()) {
                assert!(typed(value), "{name}: {option}");
            }
            let Some(default) = option.get("default") else { continue };
            let text = default.as_str().map_or_else(|| default.to_string(), str::to_owned);
            args.extend([format!("--{}", option["name"].as_str().expect("a name")), text]);
        }
        if name == "quality-validator" {
            assert_eq!(described["source"]["reference"], "LLM_CHECK rule 2", "its engine comes from its rule");
        } else {
            assert_eq!(described["engine"], declared["engine"], "{name}: without flags, the code's default engine");
            assert_eq!(described["preset"], declared["preset"], "{name}");
        }
        if let (Some(engine), Some(preset)) = (declared["engine"].as_str(), declared["preset"].as_str()) {
            assert_eq!(described["model"], declared["presets"][engine][preset], "{name}: the preset's model");
            assert_eq!(described["source"], Value::Null, "{name}");
        }
        let with_defaults: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(scratch.answer(&with_defaults), described, "{name}: every declared default is accepted");
    }
    let tags = scratch.answer(&["tag-suggest", "describe", "--engine", "ollama", "--preset", "thorough"]);
    assert_eq!((&tags["preset"], &tags["model"]), (&json!("thorough"), &json!("qwen2.5:14b")), "flags are honoured");
    assert_eq!(tags["declared"]["preset"], "fast", "declared stays the code's default");
    let out = scratch.output(&["tag-suggest", "describe", "--max_tags", "4"]);
    assert_eq!(out.status.code(), Some(2), "a value that is not a declared choice: {}", describe(&out));
}

#[test]
fn every_worker_is_ready_and_the_quality_validator_follows_its_cleaning_rule() {
    let scratch = Scratch::new();
    for worker in ARCHIVE_WORKERS {
        assert_eq!(scratch.answer(&[worker, "check"]), json!({"ready": true}), "{worker}");
    }
    let validator = scratch.answer(&["quality-validator", "describe"]);
    assert_eq!((&validator["engine"], &validator["model"]), (&json!("ollama"), &json!("qwen2.5:14b")));
    assert_eq!(validator["source"]["description"], "the active LLM_CHECK cleaning rule");
    assert_eq!(validator["source"]["reference"], "LLM_CHECK rule 2");
    assert_eq!((&validator["declared"]["engine"], &validator["declared"]["preset"]), (&Value::Null, &Value::Null));

    scratch.write_rules(&json!({"rules": [{"id": 2, "kind": "LLM_CHECK", "active": false, "engine": "ollama"}]}));
    let check = scratch.answer(&["quality-validator", "check"]);
    assert_eq!(check["ready"], false);
    let reason = check["reason"].as_str().expect("a reason").to_owned();
    assert!(reason.starts_with("There is no active LLM_CHECK cleaning rule in ") && reason.ends_with("to use."));
    let described = scratch.answer(&["quality-validator", "describe"]);
    assert_eq!((&described["engine"], &described["source"]["reference"]), (&Value::Null, &Value::Null));
    let refused = scratch.output(&["quality-validator", "run", "--delay_ms", "0"]);
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains(&reason), "{}", describe(&refused));
    assert!(refused.stdout.is_empty(), "no config line without an engine");

    scratch.write_rules(&json!({"rules": [
        {"id": 2, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "thorough"},
        {"id": 7, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "fast", "model": "llama3.2:1b"},
    ]}));
    assert_eq!(scratch.answer(&["quality-validator", "check"]), json!({"ready": true}));
    let described = scratch.answer(&["quality-validator", "describe"]);
    assert_eq!(
        (&described["model"], &described["source"]["reference"]),
        (&json!("llama3.2:1b"), &json!("LLM_CHECK rule 7"))
    );
    let out = scratch.ok(&["quality-validator", "run", "--delay_ms", "0"]);
    let config = config_line(&json_lines(&out.stdout)).clone();
    assert_eq!(
        (&config["engine"], &config["preset"], &config["model"]),
        (&json!("ollama"), &json!("fast"), &json!("llama3.2:1b"))
    );
    assert_eq!(config["source"]["reference"], "LLM_CHECK rule 7");
    assert!(String::from_utf8_lossy(&out.stderr).contains("llama3.2:1b from LLM_CHECK rule 7"), "{}", describe(&out));
}

#[test]
fn the_archive_workers_form_a_pipeline_whose_queues_shrink_after_runs_and_grow_as_documents_arrive() {
    let scratch = Scratch::new();
    scratch.freeze_arrivals();
    assert_eq!(scratch.pending("transfer"), 20, "twenty documents are in staging at first");
    for worker in ARCHIVE_WORKERS.iter().skip(1).filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 0, "{worker} sees nothing before the transfer");
    }
    for worker in ARCHIVE_WORKERS.iter().filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 20, "{worker}: the earlier workers stamped everything");
        let out =
            scratch.ok(&[worker, "run", "--run-id", "r-1", "--limit", "7", "--batch_size", "3", "--delay_ms", "0"]);
        let objects = json_lines(&out.stdout);
        let config = config_line(&objects);
        assert!(
            ["engine", "preset", "model", "endpoint", "source"].iter().all(|k| config.get(k).is_some()),
            "{config}"
        );
        let steps = progress(&objects);
        assert_eq!(steps, [(0, 7), (3, 7), (6, 7), (7, 7)], "{worker}");
        let result = result(&objects);
        assert_eq!(result["processed"], 7, "{worker}: {result}");
        assert_eq!(result["failed"], 0, "{worker}: {result}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("processed doc-0001"), "{worker} logs on stderr");
        assert_eq!(scratch.pending(worker), 13, "{worker}: the queue fell by the documents processed");
        scratch.run_all(worker);
        assert_eq!(scratch.pending(worker), 0, "{worker}: nothing is left after a full run");
    }
    let archived = std::fs::read_dir(scratch.data().join("archive")).expect("the archive folder").count();
    assert_eq!(archived, 20, "the transfer copied every staged document into the archive");
    assert_eq!(config_line(&scratch.run_all("embed"))["model"], "nomic-embed-text");

    scratch.advance(60);
    assert_eq!(scratch.pending("transfer"), 3, "three more documents arrived in a minute");
    assert_eq!(scratch.pending("language-detect"), 0, "not archived yet");
    scratch.run_all("transfer");
    assert_eq!((scratch.pending("transfer"), scratch.pending("language-detect")), (0, 3));
}

#[test]
fn different_workers_can_run_at_once_on_a_corpus_that_does_not_exist_yet() {
    let scratch = Scratch::new();
    let mut children: Vec<(&str, Child)> = ARCHIVE_WORKERS
        .iter()
        .map(|w| (*w, scratch.spawn(&[w, "run", "--delay_ms", "1", "--batch_size", "7"])))
        .collect();
    for (worker, child) in &mut children {
        let status = wait(child, Duration::from_secs(120));
        assert!(status.success(), "{worker} failed with {status:?}");
    }
    scratch.freeze_arrivals();
    // Whatever each saw of the others' work, one pass in pipeline order finishes everything.
    for worker in ARCHIVE_WORKERS {
        scratch.run_all(worker);
    }
    for worker in ARCHIVE_WORKERS.iter().filter(|w| **w != "conflict-judge") {
        assert_eq!(scratch.pending(worker), 0, "{worker}");
    }
    let archived = std::fs::read_dir(scratch.data().join("archive")).expect("the archive folder").count();
    assert!(archived >= 20, "{archived}");
    assert_eq!(scratch.count("conflict-judge")["done"], archived);
}

#[test]
fn the_conflict_judge_queue_is_unmeasurable_and_its_done_count_grows() {
    let scratch = Scratch::new();
    scratch.freeze_arrivals();
    let count = scratch.count("conflict-judge");
    let reason = count["unmeasurable"].as_str().expect("a reason");
    assert!(reason.contains("trigram") && reason.ends_with('.'), "a sentence saying why: {reason}");
    assert_eq!(count["done"], 0);
    assert!(count.get("pending").is_none());
    for worker in ["transfer", "language-detect", "entity-extract", "tag-suggest"] {
        scratch.run_all(worker);
    }
    scratch.ok(&["conflict-judge", "run", "--limit", "7", "--delay_ms", "0"]);
    assert_eq!(scratch.count("conflict-judge")["done"], 7);
    let out = scratch.ok(&["conflict-judge", "run", "--delay_ms", "0"]);
    assert_eq!(result(&json_lines(&out.stdout))["processed"], 13);
    assert_eq!(scratch.count("conflict-judge")["done"], 20);
}

#[test]
fn an_archive_run_stops_after_the_current_document_on_sigterm() {
    let scratch = Scratch::new();
    scratch.freeze_arrivals();
    scratch.run_all("transfer");
    scratch.run_all("language-detect");
    let mut child = scratch.spawn(&["summarize", "run", "--delay_ms", "500", "--batch_size", "5"]);
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("processed doc-0001") {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("read stderr") > 0, "stderr ended before the first document");
    }
    signal(&child, Signal::SIGTERM);
    let status = wait(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(143), "stopped on SIGTERM: {status:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read stderr");
    assert!(rest.contains("stopped on SIGTERM"), "it says why it stopped: {rest}");
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout).expect("read stdout");
    let result = result(&json_lines(stdout.as_bytes())).clone();
    assert_eq!(result["stopped"], "SIGTERM");
    let processed = result["processed"].as_u64().expect("processed");
    assert!(processed >= 1, "the document in hand was finished: {result}");
    assert_eq!(scratch.pending("summarize"), 20 - processed, "every finished document kept its stamp");
}
