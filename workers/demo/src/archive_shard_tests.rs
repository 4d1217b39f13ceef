//! The archive workers' shards, in process: the shards of a run (`SCRINALIA_SHARD=i/N`) together process every
//! pending document exactly once, each only its share (worklist, items, progress, counts, journal); a scope and a
//! shard narrow a run together; a resumed shard stays in its shard; a malformed shard is refused before any work.

use scrinalia_wire::shard::shard_of;

use super::*;
use crate::invocation::UsageError;

/// The ids of the item lines among protocol lines, with their outcome.
fn item_ids(lines: &[Value]) -> Vec<(String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or("null").to_owned();
    lines.iter().filter_map(|l| l.get("item")).map(|i| (text(&i["id"]), text(&i["outcome"]))).collect()
}

/// The documents of `ids` in shard `index` of `count`.
fn share(ids: &[String], index: u32, count: u32) -> Vec<String> {
    ids.iter().filter(|id| shard_of(id, count) == index).cloned().collect()
}

/// Runs `args` as shard `shard` (`i/N`) with the run id `run`; exit status 0 expected.
fn run_shard(data: &Path, now: u64, shard: &str, args: &[&str], run: &str) -> Vec<Value> {
    let args = [args, &["--run-id", run]].concat();
    let (status, lines) =
        call_with(data, now, &[("SCRINALIA_SHARD", shard)], &args).unwrap_or_else(|e| panic!("{shard}: {e:#}"));
    assert_eq!(status, 0, "{shard}: {lines:?}");
    lines
}

#[test]
fn three_shards_of_a_run_together_process_every_document_exactly_once() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let all = documents(1..=20);
    let shares: Vec<Vec<String>> = (0..3).map(|i| share(&all, i, 3)).collect();
    assert!(shares.iter().all(|s| !s.is_empty()), "every shard has some of the twenty: {shares:?}");

    // count-pending given a shard counts its share.
    for (i, expected) in shares.iter().enumerate() {
        let (status, lines) =
            call_with(data, T0, &[("SCRINALIA_SHARD", &format!("{i}/3"))], &["transfer", "count-pending"])
                .expect("count");
        assert_eq!((status, lines), (0, vec![json!({ "pending": expected.len() })]), "shard {i}/3");
    }
    assert_eq!(pending(data, T0, "transfer"), 20, "without a shard, every document");

    let args = ["transfer", "run", "--delay_ms", "0", "--batch_size", "3"];
    for (i, expected) in shares.iter().enumerate() {
        let lines = run_shard(data, T0, &format!("{i}/3"), &args, &format!("s{i}"));
        let reported = item_ids(&lines);
        assert!(reported.iter().all(|(_, outcome)| outcome == "succeeded"), "{reported:?}");
        let ids: Vec<String> = reported.into_iter().map(|(id, _)| id).collect();
        assert_eq!(&ids, expected, "shard {i}/3 reports its share, in order");
        let total = expected.len() as u64;
        let steps = progress(&lines);
        assert_eq!(steps.first(), Some(&(0, total)), "progress counts the share: {steps:?}");
        assert!(steps.iter().all(|&(_, of)| of == total), "{steps:?}");
        let result = &lines.last().expect("a result")["result"];
        assert_eq!((&result["processed"], &result["shard"]), (&json!(total), &json!(format!("{i}/3"))));
        let worklist = Worklist::load(data, "transfer", &format!("s{i}")).expect("readable").expect("recorded");
        assert_eq!(&worklist.documents, expected, "the worklist is the share");
    }

    // The journal holds every document once, each under the run of its own shard, which its line names.
    let entries = Journal::of(data, "transfer").entries().expect("the journal");
    let mut journaled: Vec<String> =
        entries.iter().map(|e| e["document"].as_str().expect("a document").to_owned()).collect();
    for entry in &entries {
        let id = entry["document"].as_str().expect("a document");
        let shard = shard_of(id, 3);
        assert_eq!((&entry["shard"], &entry["run"]), (&json!(format!("{shard}/3")), &json!(format!("s{shard}"))));
    }
    journaled.sort();
    assert_eq!(journaled, all, "every document exactly once");
    assert_eq!(pending(data, T0, "transfer"), 0);

    // A later stage splits the same way: its shards' counts add up to what is pending for it.
    let pending_counts: Vec<u64> = (0..4)
        .map(|i| {
            let env = [("SCRINALIA_SHARD", format!("{i}/4"))];
            let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let (_, lines) = call_with(data, T0, &env, &["language-detect", "count-pending"]).expect("count");
            lines[0]["pending"].as_u64().expect("a count")
        })
        .collect();
    assert_eq!(pending_counts.iter().sum::<u64>(), 20, "{pending_counts:?}");
    assert_eq!(pending_counts, (0..4).map(|i| share(&all, i, 4).len() as u64).collect::<Vec<_>>());
}

#[test]
fn a_scope_and_a_shard_narrow_a_run_together() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let all = documents(1..=20);
    // Two documents of shard 0 of 2 and two of shard 1, and one id that is nobody's: it is reported not pending
    // only by the shard it falls in.
    let (zero, one) = (share(&all, 0, 2), share(&all, 1, 2));
    let stranger = (1..).map(|n| format!("nowhere-{n}")).find(|id| shard_of(id, 2) == 0).expect("an id of shard 0");
    let scope = [&zero[..2], &one[..2], std::slice::from_ref(&stranger)].concat();
    let path = data.join("only");
    std::fs::create_dir_all(data).expect("the data folder");
    std::fs::write(&path, scope.iter().map(|id| format!("{id}\n")).collect::<String>()).expect("write the scope");
    let only = path.display().to_string();
    let env = [("SCRINALIA_SHARD", "0/2"), ("SCRINALIA_ITEMS_ONLY", only.as_str())];
    let args = ["transfer", "run", "--delay_ms", "0", "--run-id", "scoped-0"];
    let (status, lines) = call_with(data, T0, &env, &args).expect("a scoped shard");
    assert_eq!(status, 0, "{lines:?}");
    let mut expected: Vec<(String, String)> = vec![(stranger.clone(), "skipped".to_owned())];
    expected.extend(zero[..2].iter().map(|id| (id.clone(), "succeeded".to_owned())));
    assert_eq!(item_ids(&lines), expected, "its scope's documents of its shard; the other shard's are not its items");
    let journaled: Vec<(String, String, String)> = journal(data, "transfer");
    let ids: Vec<&str> = journaled.iter().map(|(id, ..)| id.as_str()).collect();
    assert_eq!(ids, [zero[0].as_str(), zero[1].as_str()]);
}

#[test]
fn a_resumed_shard_goes_on_with_its_own_share_only() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let mine = share(&documents(1..=20), 1, 2);
    assert!(mine.len() > 4, "enough for two batches: {mine:?}");
    let shard = [("SCRINALIA_SHARD", "1/2")];
    let args = ["transfer", "run", "--delay_ms", "0", "--batch_size", "2"];
    let first = killed_after(data, T0, &shard, &[&args[..], &["--run-id", "k1"]].concat(), 1);
    let last = checkpoints(&first).pop().expect("a checkpoint");
    assert_eq!(last, json!({"worklist_of": "k1", "done": 2}));
    let checkpoint = last.to_string();
    let env = [shard[0], ("SCRINALIA_CHECKPOINT", checkpoint.as_str())];
    let (status, lines) = call_with(data, T0, &env, &[&args[..], &["--run-id", "k2"]].concat()).expect("a resume");
    assert_eq!(status, 0, "{lines:?}");
    assert_eq!(progress(&lines).last(), Some(&(mine.len() as u64, mine.len() as u64)));
    let ids: Vec<String> = journal(data, "transfer").into_iter().map(|(id, ..)| id).collect();
    assert_eq!(ids, mine, "the share once, and nothing of the other shard");
}

#[test]
fn a_malformed_shard_is_refused_before_any_work() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    for malformed in ["2/2", "0/0", "1/2 ", "-1/2", "half"] {
        let error = call_with(data, T0, &[("SCRINALIA_SHARD", malformed)], &["transfer", "run", "--delay_ms", "0"])
            .expect_err(malformed);
        let message = error.downcast::<UsageError>().map(|u| u.0).expect("a usage error: exit status 2");
        assert!(message.starts_with(&format!("SCRINALIA_SHARD is {malformed:?}; it must be i/N")), "{message}");
    }
    assert!(journal(data, "transfer").is_empty(), "nothing processed");
    let (status, lines) = call_with(data, T0, &[("SCRINALIA_SHARD", "")], &["transfer", "count-pending"]).expect("ok");
    assert_eq!((status, lines), (0, vec![json!({"pending": 20})]), "an empty SCRINALIA_SHARD is no shard");
}
