//! The archive workers' items, in process: an item line per document (a success once it is kept, before its
//! batch's checkpoint), the quarantined documents skipped untouched, a scope honoured, and the summaries' poison
//! letters failing on every run while the run succeeds.

use super::*;

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
fn describe_says_every_archive_worker_reports_items_takes_a_scope_and_a_shard_checkpoints_and_yields() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    for task in Task::ALL {
        let described = one(dir.path(), T0, &[task.name(), "describe"]);
        assert_eq!(
            described["capabilities"],
            json!({"items": true, "scope": true, "shards": true, "checkpoints": true, "yield": true}),
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
