//! The archive workers' verbs in process, on a scratch data folder, with time given rather than waited for:
//! describe's answer, check, the cleaning rule steering the quality validator, the pipeline's order, staging
//! filling up over time, and runs killed after a checkpoint then resumed or restarted (standard output that
//! fails after the n-th checkpoint line stands for the kill: nothing is written after it).

use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::{
    invocation::Verb,
    staging::{EVERY_SECONDS, INITIAL},
    stamps::StampBook,
    worklist::Worklist,
};

const T0: u64 = 1_790_000_000;

/// Runs `args` (a worker, a verb, flags) on `data` at `now`; returns the exit status and the protocol lines.
fn call(data: &Path, now: u64, args: &[&str]) -> anyhow::Result<(i32, Vec<Value>)> {
    call_with(data, now, &[], args)
}

/// [`call`] with the environment variables `env`.
fn call_with(data: &Path, now: u64, env: &[(&str, &str)], args: &[&str]) -> anyhow::Result<(i32, Vec<Value>)> {
    let mut out = Protocol::to(Vec::new());
    let status = execute(data, now, env, args, &mut out)?;
    Ok((status, json_lines(&out.into_inner())))
}

fn execute(
    data: &Path,
    now: u64,
    env: &[(&str, &str)],
    args: &[&str],
    out: &mut Protocol<impl std::io::Write>,
) -> anyhow::Result<i32> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let variable = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned());
    let invocation = Invocation::parse(&args, |w| Task::named(w).map(Task::options), variable)?;
    let task = Task::named(&invocation.worker).expect("an archive worker");
    match invocation.verb {
        Verb::Describe => describe(task, &invocation, data, now, out),
        Verb::CountPending => count_pending(task, data, now, out),
        Verb::Check => check(task, data, now, out),
        Verb::Run => run(task, &invocation, data, now, &Stop::never(), out),
    }
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// Standard output that fails for good once `checkpoints` checkpoint lines are written: the worker killed right
/// after reporting its checkpoint.
struct Dying {
    written: Vec<u8>,
    checkpoints: usize,
}

impl std::io::Write for Dying {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let lines = self.written.split_inclusive(|b| *b == b'\n');
        if lines.filter(|l| l.ends_with(b"\n") && l.starts_with(b"{\"checkpoint\"")).count() >= self.checkpoints {
            return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "killed"));
        }
        self.written.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `args` until it has printed `checkpoints` checkpoints; returns the protocol lines it printed.
fn killed_after(data: &Path, now: u64, env: &[(&str, &str)], args: &[&str], checkpoints: usize) -> Vec<Value> {
    let mut out = Protocol::to(Dying { written: Vec::new(), checkpoints });
    let error = execute(data, now, env, args, &mut out).expect_err("killed before its end");
    assert!(format!("{error:#}").contains("killed"), "{error:#}");
    json_lines(&out.into_inner().written)
}

/// The checkpoints among protocol lines.
fn checkpoints(lines: &[Value]) -> Vec<Value> {
    lines.iter().filter_map(|l| l.get("checkpoint").cloned()).collect()
}

/// The results journal of `worker`: (document, run, worklist) per line.
fn journal(data: &Path, worker: &str) -> Vec<(String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or("null").to_owned();
    let entries = Journal::of(data, worker).entries().expect("the journal");
    entries.iter().map(|e| (text(&e["document"]), text(&e["run"]), text(&e["worklist_of"]))).collect()
}

fn progress(lines: &[Value]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter_map(|l| l.get("progress"))
        .map(|p| (p["done"].as_u64().expect("done"), p["total"].as_u64().expect("total")))
        .collect()
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
    assert_eq!(progress(&lines), [(0, 20), (8, 20), (16, 20), (20, 20)]);
    assert_eq!(lines.last().map(|l| l["result"]["dimensions"].clone()), Some(json!({"4": 20})));
    assert!(call(data, T0, &["embed", "run", "--batch_size", "0"]).is_err(), "bounds are enforced");
}

/// `doc-0001` … `doc-00<n>`.
fn documents(range: std::ops::RangeInclusive<usize>) -> Vec<String> {
    range.map(|n| format!("doc-{n:04}")).collect()
}

#[test]
fn a_killed_run_resumed_from_its_last_checkpoint_journals_each_document_of_its_worklist_once() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let args = ["transfer", "run", "--delay_ms", "0", "--batch_size", "6"];
    let first = killed_after(data, T0, &[], &[&args[..], &["--run-id", "r1"]].concat(), 2);
    let last = checkpoints(&first).pop().expect("a checkpoint");
    assert_eq!(last, json!({"worklist_of": "r1", "done": 12}));
    assert_eq!(progress(&first), [(0, 20), (6, 20)], "killed before reporting the second batch's progress");
    let worklist = Worklist::load(data, "transfer", "r1").expect("readable").expect("recorded at the start");
    assert_eq!(worklist.documents, documents(1..=20));

    // Three documents arrive before the resume; they are not its work.
    let later = T0 + 3 * EVERY_SECONDS;
    let env = [("SCRINALIA_CHECKPOINT", last.to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (status, lines) = call_with(data, later, &env, &[&args[..], &["--run-id", "r2"]].concat()).expect("resume");
    assert_eq!(status, 0, "{lines:?}");
    assert_eq!(progress(&lines), [(12, 20), (18, 20), (20, 20)], "done so far of the worklist's size");
    assert_eq!(
        checkpoints(&lines),
        [json!({"worklist_of": "r1", "done": 18}), json!({"worklist_of": "r1", "done": 20})]
    );
    assert_eq!(lines.last().map(|l| l["result"]["processed"].clone()), Some(json!(8)));

    let journaled = journal(data, "transfer");
    let ids: Vec<String> = journaled.iter().map(|(d, ..)| d.clone()).collect();
    assert_eq!(ids, documents(1..=20), "every document of the worklist exactly once, in order");
    assert!(journaled.iter().all(|(_, _, list)| list == "r1"));
    let runs: Vec<&str> = journaled.iter().map(|(_, run, _)| run.as_str()).collect();
    assert_eq!(runs, [vec!["r1"; 12], vec!["r2"; 8]].concat());
    assert_eq!(pending(data, later, "transfer"), 3, "the arrivals wait for the next fresh run");
    let copy = Worklist::load(data, "transfer", "r2").expect("readable").expect("the resume records its list");
    assert_eq!((copy.worklist_of.as_str(), copy.documents), ("r1", documents(1..=20)));
}

#[test]
fn a_resume_from_an_older_checkpoint_never_processes_a_finished_document_again() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    call(data, T0, &["transfer", "run", "--delay_ms", "0"]).expect("transfer everything");
    let args = ["language-detect", "run", "--delay_ms", "0", "--batch_size", "5"];
    let first = killed_after(data, T0, &[], &[&args[..], &["--run-id", "a"]].concat(), 3);
    // The daemon kept the second checkpoint: the run was killed after journaling the third batch.
    let older = checkpoints(&first)[1].to_string();
    let (status, lines) =
        call_with(data, T0, &[("SCRINALIA_CHECKPOINT", &older)], &[&args[..], &["--run-id", "b"]].concat())
            .expect("resume");
    assert_eq!(status, 0);
    let result = &lines.last().expect("a result")["result"];
    assert_eq!((&result["processed"], &result["skipped"]), (&json!(5), &json!(5)));
    assert_eq!(checkpoints(&lines).last(), Some(&json!({"worklist_of": "a", "done": 20})));
    let ids: Vec<String> = journal(data, "language-detect").into_iter().map(|(d, ..)| d).collect();
    assert_eq!(ids, documents(1..=20));
    assert_eq!(pending(data, T0, "language-detect"), 0);
}

#[test]
fn a_restart_processes_the_whole_worklist_again_and_a_lost_one_runs_fresh() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let args = ["transfer", "run", "--delay_ms", "0", "--batch_size", "4", "--limit", "10"];
    let first = killed_after(data, T0, &[], &[&args[..], &["--run-id", "r1"]].concat(), 1);
    let resume = checkpoints(&first)[0].to_string();
    call_with(data, T0, &[("SCRINALIA_CHECKPOINT", &resume)], &[&args[..], &["--run-id", "r2"]].concat())
        .expect("resume");
    assert_eq!(pending(data, T0, "transfer"), 10, "the limit bounded the worklist");

    let later = T0 + 2 * EVERY_SECONDS;
    for (restart_of, run) in [("r1", "r3"), ("r2", "r4")] {
        let (status, lines) =
            call_with(data, later, &[("SCRINALIA_RESTART_OF", restart_of)], &[&args[..], &["--run-id", run]].concat())
                .expect("restart");
        assert_eq!(status, 0);
        assert_eq!(progress(&lines).first(), Some(&(0, 10)), "from the start of the earlier worklist");
        assert_eq!(checkpoints(&lines).last(), Some(&json!({"worklist_of": run, "done": 10})), "a new pass");
        assert_eq!(lines.last().map(|l| l["result"]["processed"].clone()), Some(json!(10)), "all again");
        let again: Vec<String> =
            journal(data, "transfer").into_iter().filter(|(_, r, _)| r == run).map(|(d, ..)| d).collect();
        assert_eq!(again, documents(1..=10), "{run} started {restart_of} over");
    }
    assert_eq!(journal(data, "transfer").len(), 30, "the first pass once, then twice again");
    assert_eq!(pending(data, later, "transfer"), 12, "the arrivals are no restart's work");

    let (status, lines) =
        call_with(data, later, &[("SCRINALIA_RESTART_OF", "gone")], &["transfer", "run", "--delay_ms", "0"])
            .expect("a restart of a run whose worklist is lost");
    assert_eq!(status, 0);
    assert_eq!(lines.last().map(|l| l["result"]["processed"].clone()), Some(json!(12)), "a fresh run");
    assert_eq!(checkpoints(&lines), Vec::<Value>::new(), "no run id, nothing to resume, no checkpoints");
}

#[test]
fn a_checkpoint_that_cannot_be_followed_is_refused_before_any_work() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let args = ["transfer", "run", "--delay_ms", "0", "--run-id", "r9"];
    let refusals: [&[(&str, &str)]; 5] = [
        &[("SCRINALIA_CHECKPOINT", "{\"worklist_of\": \"r1\", \"done\"")],
        &[("SCRINALIA_CHECKPOINT", "{\"step\": 3}")],
        &[("SCRINALIA_CHECKPOINT", "{\"worklist_of\": \"r1\", \"done\": 3}")],
        &[("SCRINALIA_CHECKPOINT", "{\"worklist_of\": \"r1\", \"done\": 3}"), ("SCRINALIA_RESTART_OF", "r1")],
        &[("SCRINALIA_CHECKPOINT", "{\"worklist_of\": \"../r1\", \"done\": 0}")],
    ];
    for env in refusals {
        assert_eq!(call_with(data, T0, env, &args).expect("an answer"), (REFUSED, vec![]), "{env:?}");
    }
    let worklist = Worklist {
        worker: "transfer".into(),
        run: "r1".into(),
        worklist_of: "r1".into(),
        restart_of: None,
        recorded_at: T0,
        documents: documents(1..=2),
    };
    worklist.save(data).expect("a worklist of two");
    let beyond = [("SCRINALIA_CHECKPOINT", "{\"worklist_of\": \"r1\", \"done\": 3}")];
    assert_eq!(call_with(data, T0, &beyond, &args).expect("an answer"), (REFUSED, vec![]), "past its end");
    assert_eq!(pending(data, T0, "transfer"), INITIAL as u64, "nothing was processed");
    assert!(!Journal::of(data, "transfer").path().exists(), "nothing was journaled");
    assert!(!Worklist::path(data, "transfer", "r9").exists(), "no worklist was recorded");
    let done = [("SCRINALIA_CHECKPOINT", "{\"worklist_of\": \"r1\", \"done\": 2}")];
    let (status, lines) = call_with(data, T0, &done, &args).expect("a finished worklist");
    assert_eq!((status, lines.last().map(|l| l["result"]["processed"].clone())), (0, Some(json!(0))));
}

/// The item lines among protocol lines: (id, outcome, class).
fn items(lines: &[Value]) -> Vec<(String, String, Option<String>)> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    lines
        .iter()
        .filter_map(|l| l.get("item"))
        .map(|i| (text(&i["id"]).expect("an id"), text(&i["outcome"]).expect("an outcome"), text(&i["class"])))
        .collect()
}

/// Writes a file of item ids, one a line, and returns its path for the environment.
fn id_file(dir: &Path, name: &str, ids: &[&str]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, ids.iter().map(|id| format!("{id}\n")).collect::<String>()).expect("write the ids");
    path.display().to_string()
}

fn succeeded(ids: &[String]) -> Vec<(String, String, Option<String>)> {
    ids.iter().map(|id| (id.clone(), "succeeded".to_owned(), None)).collect()
}

fn skipped(id: &str, class: &str) -> (String, String, Option<String>) {
    (id.to_owned(), "skipped".to_owned(), Some(class.to_owned()))
}

fn result(lines: &[Value]) -> &Value {
    &lines.last().expect("a last line")["result"]
}

#[test]
fn describe_says_every_archive_worker_reports_items_takes_a_scope_and_checkpoints() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    for task in Task::ALL {
        let described = one(dir.path(), T0, &[task.name(), "describe"]);
        assert_eq!(
            described["capabilities"],
            json!({"items": true, "scope": true, "checkpoints": true}),
            "{}",
            task.name()
        );
    }
}

#[test]
fn a_run_reports_each_document_as_an_item_once_it_is_kept_before_its_checkpoint() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let (status, lines) =
        call(data, T0, &["transfer", "run", "--delay_ms", "0", "--batch_size", "6", "--run-id", "r1"]).expect("run");
    assert_eq!(status, 0);
    assert_eq!(items(&lines), succeeded(&documents(1..=20)), "one line per document, in order");
    // Before each checkpoint, exactly the items of the documents it says are finished (stamped and journaled).
    let mut reported = 0;
    for line in &lines {
        if line.get("item").is_some() {
            reported += 1;
        }
        if let Some(checkpoint) = line.get("checkpoint") {
            assert_eq!(checkpoint["done"], reported, "{lines:?}");
        }
    }
    assert_eq!(checkpoints(&lines).len(), 4);
    let journaled: Vec<String> = journal(data, "transfer").into_iter().map(|(d, ..)| d).collect();
    assert_eq!(journaled, documents(1..=20));
    assert_eq!(result(&lines)["processed"], 20);
    assert!(result(&lines).get("failures").is_none(), "no failures: {}", result(&lines));
}

#[test]
fn a_quarantined_document_is_reported_skipped_and_left_untouched() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = &dir.path().join("demo");
    let skip = id_file(dir.path(), "skip", &["doc-0002", "doc-0005", "doc-0099"]);
    let env = [("SCRINALIA_ITEMS_SKIP", skip.as_str())];
    let (status, lines) = call_with(data, T0, &env, &["transfer", "run", "--delay_ms", "0", "--run-id", "r1"])
        .expect("a run with a skip list");
    assert_eq!(status, 0);
    let mut expected = vec![skipped("doc-0002", "quarantined"), skipped("doc-0005", "quarantined")];
    let others: Vec<String> =
        documents(1..=20).into_iter().filter(|d| !["doc-0002", "doc-0005"].contains(&d.as_str())).collect();
    expected.extend(succeeded(&others));
    assert_eq!(items(&lines), expected, "doc-0099 has not arrived: not this run's item");
    assert_eq!((&result(&lines)["processed"], &result(&lines)["quarantined"]), (&json!(18), &json!(2)));
    // Untouched: no copy in the archive, no stamp, no journal line, not in the worklist, still pending.
    for id in ["doc-0002", "doc-0005"] {
        assert!(!data.join(format!("archive/{id}.json")).exists(), "{id} was not copied");
        assert!(!StampBook::load(data, "transfer", "archived_v1").expect("stamps").has(id), "{id} has no stamp");
        assert!(journal(data, "transfer").iter().all(|(d, ..)| d != id), "{id} is not journaled");
        let worklist = Worklist::load(data, "transfer", "r1").expect("readable").expect("recorded");
        assert!(!worklist.documents.contains(&id.to_owned()), "{id} is not in the worklist");
    }
    assert_eq!(pending(data, T0, "transfer"), 2, "both stay pending");
    assert_eq!(checkpoints(&lines).last(), Some(&json!({"worklist_of": "r1", "done": 18})));

    // A restart of that worklist, once doc-0007 is quarantined too, leaves it untouched in the middle of the list.
    let skip = id_file(dir.path(), "skip-2", &["doc-0002", "doc-0005", "doc-0007"]);
    let env = [("SCRINALIA_ITEMS_SKIP", skip.as_str()), ("SCRINALIA_RESTART_OF", "r1")];
    let (status, lines) =
        call_with(data, T0, &env, &["transfer", "run", "--delay_ms", "0", "--batch_size", "5", "--run-id", "r2"])
            .expect("a restart with a skip list");
    assert_eq!(status, 0);
    let reported = items(&lines);
    assert_eq!(reported.len(), 18);
    assert_eq!(reported[4], skipped("doc-0007", "quarantined"), "in its place in the list: {reported:?}");
    assert_eq!(reported.iter().filter(|(_, outcome, _)| outcome == "succeeded").count(), 17);
    let again: Vec<String> =
        journal(data, "transfer").into_iter().filter(|(_, run, _)| run == "r2").map(|(d, ..)| d).collect();
    assert_eq!(again.len(), 17);
    assert!(!again.contains(&"doc-0007".to_owned()), "the restart did not process doc-0007 again");
    assert_eq!(checkpoints(&lines).last(), Some(&json!({"worklist_of": "r2", "done": 18})), "passed, not done");
}

#[test]
fn a_scoped_run_processes_only_its_pending_documents_and_says_which_it_did_not_get_to() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = &dir.path().join("demo");
    call(data, T0, &["transfer", "run", "--delay_ms", "0", "--limit", "10"]).expect("transfer ten");
    run_all(data, T0, "language-detect");
    call(data, T0, &["embed", "run", "--delay_ms", "0", "--limit", "1"]).expect("embed doc-0001");
    // doc-0001 is stamped already, doc-0015 is not archived, doc-0999 does not exist.
    let scope = ["doc-0001", "doc-0003", "doc-0006", "doc-0008", "doc-0015", "doc-0999"];
    let only = id_file(dir.path(), "only", &scope);
    let env = [("SCRINALIA_ITEMS_ONLY", only.as_str())];
    let (status, lines) =
        call_with(data, T0, &env, &["embed", "run", "--delay_ms", "0", "--limit", "2", "--run-id", "s1"])
            .expect("a scoped run");
    assert_eq!(status, 0);
    let mut expected = vec![
        skipped("doc-0001", "not_pending"),
        skipped("doc-0008", "over_limit"),
        skipped("doc-0015", "not_pending"),
        skipped("doc-0999", "not_pending"),
    ];
    expected.extend(succeeded(&["doc-0003".to_owned(), "doc-0006".to_owned()]));
    assert_eq!(items(&lines), expected);
    let result = result(&lines);
    assert_eq!(
        (&result["processed"], &result["not_pending"], &result["over_limit"]),
        (&json!(2), &json!(3), &json!(1)),
        "{result}"
    );
    let worklist = Worklist::load(data, "embed", "s1").expect("readable").expect("recorded");
    assert_eq!(worklist.documents, ["doc-0003", "doc-0006"]);
    let journaled: Vec<String> = journal(data, "embed").into_iter().map(|(d, ..)| d).collect();
    assert_eq!(journaled, ["doc-0001", "doc-0003", "doc-0006"], "nothing outside the scope was processed");
    assert_eq!(pending(data, T0, "embed"), 7);

    // Resuming a worklist under a scope processes only the scope's documents of that list.
    let first =
        killed_after(data, T0, &[], &["embed", "run", "--delay_ms", "0", "--batch_size", "2", "--run-id", "a"], 1);
    assert_eq!(checkpoints(&first), [json!({"worklist_of": "a", "done": 2})]);
    let only = id_file(dir.path(), "only-2", &["doc-0002", "doc-0009", "doc-0010", "doc-0015"]);
    let resume = checkpoints(&first)[0].to_string();
    let env = [("SCRINALIA_ITEMS_ONLY", only.as_str()), ("SCRINALIA_CHECKPOINT", resume.as_str())];
    let (status, lines) =
        call_with(data, T0, &env, &["embed", "run", "--delay_ms", "0", "--run-id", "b"]).expect("a scoped resume");
    assert_eq!(status, 0);
    assert_eq!(
        items(&lines),
        [vec![skipped("doc-0015", "not_pending")], succeeded(&["doc-0009".to_owned(), "doc-0010".to_owned()])].concat(),
        "doc-0015 is not in the worklist; doc-0002 was finished before the checkpoint, by the run that reported it"
    );
    assert_eq!(checkpoints(&lines).last(), Some(&json!({"worklist_of": "a", "done": 7})));
    assert_eq!(pending(data, T0, "embed"), 3, "doc-0005, doc-0007 and doc-0008 were outside the scope");
}

/// The documents 1 to 27 transferred and their language detected: the poison letters among them.
fn with_poison_letters(data: &Path) -> u64 {
    assert_eq!(pending(data, T0, "transfer"), INITIAL as u64, "the first use starts the schedule at T0");
    let now = T0 + 7 * EVERY_SECONDS;
    run_all(data, now, "transfer");
    run_all(data, now, "language-detect");
    now
}

#[test]
fn the_summaries_fail_the_poison_letters_on_every_run_and_the_run_succeeds() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let now = with_poison_letters(data);
    let (empty, long) = (crate::corpus::id(crate::corpus::EMPTY_LETTER), crate::corpus::id(crate::corpus::LONG_LETTER));
    for run in 1..=3 {
        let run_id = format!("r{run}");
        let (status, lines) =
            call(data, now, &["summarize", "run", "--delay_ms", "0", "--run-id", &run_id]).expect("a summary run");
        assert_eq!(status, 0, "failed documents do not fail the run");
        let failed: Vec<_> = lines
            .iter()
            .filter_map(|l| l.get("item"))
            .filter(|i| i["outcome"] == "failed")
            .map(|i| (i["id"].clone(), i["class"].clone(), i["error"].as_str().unwrap_or_default().to_owned()))
            .collect();
        assert_eq!(failed.len(), 2, "run {run}: {failed:?}");
        assert_eq!((&failed[0].0, &failed[0].1), (&json!(empty), &json!("ocr_empty")));
        assert_eq!((&failed[1].0, &failed[1].1), (&json!(long), &json!("ctx_overflow")));
        assert!(failed.iter().all(|(.., error)| error.ends_with('.') && error.len() < 2048), "{failed:?}");
        let result = result(&lines);
        assert_eq!(result["failed"], 2);
        assert_eq!(result["failures"], json!({"ctx_overflow": 1, "ocr_empty": 1}));
        assert_eq!(result["processed"], if run == 1 { 25 } else { 0 }, "{result}");
        assert_eq!(pending(data, now, "summarize"), 2, "run {run}: both stay pending");
        assert!(journal(data, "summarize").iter().all(|(d, ..)| d != &empty && d != &long));
        let stamps = StampBook::load(data, "summarize", "summary_v1").expect("stamps");
        assert!(!stamps.has(&empty) && !stamps.has(&long));
    }

    // Quarantined (as the daemon does after three such runs), the fourth run leaves them untouched.
    let skip = id_file(data, "skip", &[&empty, &long]);
    let (status, lines) =
        call_with(data, now, &[("SCRINALIA_ITEMS_SKIP", &skip)], &["summarize", "run", "--delay_ms", "0"])
            .expect("a run with both quarantined");
    assert_eq!(status, 0);
    assert_eq!(items(&lines), [skipped(&empty, "quarantined"), skipped(&long, "quarantined")]);
    assert_eq!((&result(&lines)["failed"], &result(&lines)["quarantined"]), (&json!(0), &json!(2)));
}

#[test]
fn every_other_worker_handles_the_poison_letters_like_any_letter() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let now = with_poison_letters(data);
    run_all(data, now, "entity-extract");
    run_all(data, now, "tag-suggest");
    for task in Task::ALL.into_iter().filter(|t| *t != Task::Summarize) {
        if !matches!(task, Task::Transfer | Task::LanguageDetect | Task::EntityExtract | Task::TagSuggest) {
            let lines = run_all(data, now, task.name());
            assert_eq!(result(&lines)["failed"], 0, "{}: {}", task.name(), result(&lines));
            assert!(items(&lines).iter().all(|(_, outcome, _)| outcome == "succeeded"), "{}", task.name());
        }
        let stamps = StampBook::load(data, task.name(), task.stamp()).expect("stamps");
        assert!(stamps.has("doc-0024") && stamps.has("doc-0027"), "{}", task.name());
    }
    let validated = StampBook::load(data, "quality-validator", "quality_v1").expect("stamps");
    assert_eq!(validated.documents["doc-0024"]["passed"], false, "the validator flags the empty letter");
}
