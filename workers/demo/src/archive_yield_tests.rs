//! The archive workers asked to yield (SIGUSR1, here a [`Stop`] that has the yield asked from the start): the
//! run finishes its batch, journals and checkpoints it, exits 75, and its resume from that checkpoint does the
//! rest, so that every document of the worklist is journaled exactly once across the two.

use scrinalia_wire::YIELDED_EXIT_STATUS;

use super::*;

/// Runs `args` in process with a yield asked before the first document.
fn yielding(data: &Path, now: u64, env: &[(&str, &str)], args: &[&str]) -> (i32, Vec<Value>) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let variable = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned());
    let invocation = Invocation::parse(&args, |w| Task::named(w).map(Task::options), variable).expect("parses");
    let task = Task::named(&invocation.worker).expect("an archive worker");
    let mut out = Protocol::to(Vec::new());
    let status = run(task, &invocation, data, now, &Stop::yielding(), &mut out).expect("runs");
    (status, json_lines(&out.into_inner()))
}

#[test]
fn a_yielding_run_finishes_its_batch_and_its_resume_journals_every_other_document_once() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let data = dir.path();
    let args = ["transfer", "run", "--delay_ms", "0", "--batch_size", "6"];
    let (status, first) = yielding(data, T0, &[], &[&args[..], &["--run-id", "r1"]].concat());
    assert_eq!(status, YIELDED_EXIT_STATUS, "{first:?}");
    assert_eq!(checkpoints(&first), [json!({"worklist_of": "r1", "done": 6})], "the first batch, checkpointed");
    let result = &first.last().expect("a result")["result"];
    assert_eq!((&result["processed"], &result["yielded"]), (&json!(6), &json!(true)));
    let reported: Vec<&Value> = first.iter().filter_map(|l| l.get("item")).collect();
    assert_eq!(reported.len(), 6, "the batch's items, before its checkpoint");
    let checkpoint_at = first.iter().position(|l| l.get("checkpoint").is_some()).expect("a checkpoint");
    assert!(first[..checkpoint_at].iter().filter(|l| l.get("item").is_some()).count() == 6);

    let last = checkpoints(&first).pop().expect("a checkpoint").to_string();
    let env = [("SCRINALIA_CHECKPOINT", last.as_str())];
    let (status, resumed) = call_with(data, T0, &env, &[&args[..], &["--run-id", "r2"]].concat()).expect("resume");
    assert_eq!(status, 0, "{resumed:?}");
    assert_eq!(resumed.last().map(|l| l["result"]["processed"].clone()), Some(json!(14)));
    let journaled = journal(data, "transfer");
    let ids: Vec<String> = journaled.iter().map(|(d, ..)| d.clone()).collect();
    assert_eq!(ids, documents(1..=20), "every document of the worklist exactly once, in order");
    let runs: Vec<&str> = journaled.iter().map(|(_, run, _)| run.as_str()).collect();
    assert_eq!(runs, [vec!["r1"; 6], vec!["r2"; 14]].concat());
    assert_eq!(pending(data, T0, "transfer"), 0);
}

#[test]
fn a_run_asked_to_yield_in_its_last_batch_just_ends() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let (status, lines) =
        yielding(dir.path(), T0, &[], &["transfer", "run", "--delay_ms", "0", "--batch_size", "50", "--run-id", "r1"]);
    assert_eq!(status, 0, "nothing is left to yield: {lines:?}");
    let result = &lines.last().expect("a result")["result"];
    assert_eq!((&result["processed"], &result.get("yielded")), (&json!(20), &None));
}

#[test]
fn without_a_run_id_there_is_no_checkpoint_to_yield_at_so_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let (status, lines) = yielding(dir.path(), T0, &[], &["transfer", "run", "--delay_ms", "0", "--batch_size", "6"]);
    assert_eq!(status, 0, "{lines:?}");
    assert!(checkpoints(&lines).is_empty());
    assert_eq!(lines.last().map(|l| l["result"]["processed"].clone()), Some(json!(20)));
}
