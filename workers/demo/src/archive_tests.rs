//! The archive workers' verbs in process, on a scratch data folder, with time given rather than waited for:
//! describe's answer, check, the cleaning rule steering the quality validator, the pipeline's order, staging
//! filling up over time, and runs killed after a checkpoint then resumed or restarted (standard output that
//! fails after the n-th checkpoint line stands for the kill: nothing is written after it).

use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::{
    corpus,
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
        Verb::CountPending => count_pending(task, data, now, invocation.shard, out),
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

/// The `usage` lines among protocol lines: (tokens in, tokens out), checking that none names a cost.
fn usages(lines: &[Value]) -> Vec<(u64, u64)> {
    let usages = lines.iter().filter_map(|l| l.get("usage"));
    usages
        .map(|u| {
            assert!(u.get("cost").is_none() && u.get("currency").is_none(), "a local engine costs no money: {u}");
            (u["tokens_in"].as_u64().expect("tokens_in"), u["tokens_out"].as_u64().expect("tokens_out"))
        })
        .collect()
}

#[test]
fn a_worker_with_a_model_reports_its_tokens_after_each_batch_and_failed_documents_cost_none() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    // Staging starts at T0; by `later` both poison letters (24 and 27) have arrived: 28 documents.
    assert_eq!(pending(data, T0, "transfer"), INITIAL as u64);
    let later = T0 + 8 * EVERY_SECONDS;
    for worker in ["transfer", "language-detect"] {
        assert!(usages(&run_all(data, later, worker)).is_empty(), "{worker} calls no model, so reports no tokens");
    }
    let (status, lines) =
        call(data, later, &["summarize", "run", "--delay_ms", "0", "--batch_size", "10"]).expect("a run");
    assert_eq!(status, 0, "{lines:?}");
    let reported = usages(&lines);
    assert_eq!(reported.len(), 3, "one line after each batch of 10, 10 and 8: {reported:?}");
    assert!(reported.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "cumulative: {reported:?}");
    // About four characters a token in, a summary an eighth of that out, for the 26 letters summarised.
    let (mut tokens_in, mut tokens_out) = (0, 0);
    for n in (1..=28).filter(|n| ![corpus::EMPTY_LETTER, corpus::LONG_LETTER].contains(n)) {
        let read = (corpus::generate(n).text().chars().count() as u64).div_ceil(4);
        (tokens_in, tokens_out) = (tokens_in + read, tokens_out + read / 8);
    }
    assert_eq!(reported.last(), Some(&(tokens_in, tokens_out)));
    assert!((26 * 20..26 * 200).contains(&tokens_in), "letters of a few sentences: {tokens_in} tokens");
    let result = &lines.last().expect("a result")["result"];
    assert_eq!((result["processed"].clone(), result["failed"].clone()), (json!(26), json!(2)));
    // An embedding returns numbers, not text: tokens in, none out.
    let embed = usages(&run_all(data, later, "embed"));
    assert_eq!(embed.last().map(|&(read, written)| (read > 0, written)), Some((true, 0)));
}

#[path = "archive_items_tests.rs"]
mod items;

#[path = "archive_shard_tests.rs"]
mod shards;

#[path = "archive_yield_tests.rs"]
mod yield_tests;
