//! Items under the chaos suite's faults: the probes report items (some failing) before their checkpoints, and
//! record each block in their ledger before printing it, so the stored items can be held against what the
//! workers printed. The invariants: no run stores more items than its worker printed, every item printed before
//! a run's last stored checkpoint is stored (the pending batch goes with the checkpoint), and across a resume
//! chain the failed and skipped items are counted once by id.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use scrinalia_shared::{ApiStore, FollowKind, Run, items::ItemSummary};
use scrinalia_testkit::probes::ItemBlock;
use uuid::Uuid;

use crate::daemon_harness::ProbeEvent;

/// What the database holds of a run's items at the end.
#[derive(Debug, Clone, Default)]
pub struct StoredItems {
    /// The run's summary (its counts, and its resume chain's).
    pub summary: Option<ItemSummary>,
    /// The ids it reported failed.
    pub failed: BTreeSet<String>,
    /// The ids it reported skipped.
    pub skipped: BTreeSet<String>,
}

/// Reads the stored items of every probe run.
pub async fn stored(db: &ApiStore, runs: &[Run]) -> HashMap<Uuid, StoredItems> {
    let mut all = HashMap::new();
    for run in runs.iter().filter(|r| r.worker.starts_with("probe-")) {
        let summary = db.item_summary(run.id).await.expect("read a run's items");
        let mut items = StoredItems { summary, ..StoredItems::default() };
        if items.summary.is_some() {
            items.failed = ids(db, run.id, "failed").await;
            items.skipped = ids(db, run.id, "skipped").await;
        }
        all.insert(run.id, items);
    }
    all
}

async fn ids(db: &ApiStore, run: Uuid, outcome: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let page = db.run_items(run, Some(outcome), None, after.as_deref(), 500).await.expect("a page of items");
        ids.extend(page.items.into_iter().map(|i| i.id));
        match page.next_after {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
}

/// What a run's worker recorded before printing: its blocks, in order.
fn printed(events: &[ProbeEvent]) -> HashMap<&str, Vec<ItemBlock>> {
    let mut blocks: HashMap<&str, Vec<ItemBlock>> = HashMap::new();
    for e in events.iter().filter(|e| e.verb == "run" && e.event == "items") {
        if let (Some(run), Some(block)) = (e.run_id.as_deref(), e.block()) {
            blocks.entry(run).or_default().push(block);
        }
    }
    blocks
}

/// The totals of some blocks: succeeded, and the failed and skipped ids.
fn totals<'a>(blocks: impl IntoIterator<Item = &'a ItemBlock>) -> (i64, BTreeSet<&'a str>, BTreeSet<&'a str>) {
    let (mut succeeded, mut failed, mut skipped) = (0, BTreeSet::new(), BTreeSet::new());
    for b in blocks {
        succeeded += b.succeeded;
        failed.extend(b.failed.iter().map(String::as_str));
        skipped.extend(b.skipped.iter().map(String::as_str));
    }
    (succeeded, failed, skipped)
}

/// No run's stored counts exceed the item lines its worker printed: by outcome, and the stored failed and
/// skipped ids are among those printed (a probe run that printed none stores none).
pub fn no_run_stores_more_items_than_its_worker_printed(
    runs: &[Run],
    events: &[ProbeEvent],
    stored: &HashMap<Uuid, StoredItems>,
    figures: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let printed = printed(events);
    let mut v = Vec::new();
    for run in runs.iter().filter(|r| r.worker.starts_with("probe-")) {
        let Some(items) = stored.get(&run.id) else { continue };
        let blocks = printed.get(run.id.to_string().as_str()).map_or(&[][..], Vec::as_slice);
        let (succeeded, failed, skipped) = totals(blocks);
        let summary = items.summary.clone().unwrap_or_default();
        if !blocks.is_empty() {
            *figures.entry("runs whose items were checked".into()).or_default() += 1;
            *figures.entry("item lines printed by probes".into()).or_default() +=
                usize::try_from(succeeded).unwrap_or(0) + failed.len() + skipped.len();
        }
        let counts = [
            ("succeeded", summary.succeeded, succeeded),
            ("failed", summary.failed, failed.len() as i64),
            ("skipped", summary.skipped, skipped.len() as i64),
        ];
        for (outcome, kept, wrote) in counts.into_iter().filter(|(_, kept, wrote)| kept > wrote) {
            v.push(format!(
                "run {} of {} stores {kept} {outcome} items; its worker printed {wrote}",
                run.id, run.worker
            ));
        }
        let strays: Vec<&String> = items
            .failed
            .iter()
            .filter(|id| !failed.contains(id.as_str()))
            .chain(items.skipped.iter().filter(|id| !skipped.contains(id.as_str())))
            .collect();
        if !strays.is_empty() {
            v.push(format!("run {} of {} stores items its worker never printed: {strays:?}", run.id, run.worker));
        }
    }
    v
}

/// Every item printed before a run's last stored checkpoint is stored: the probe prints block j and then
/// checkpoint `{"items": n}`, so the blocks ending at or before `n` were printed before it, and the daemon
/// writes the pending batch in the checkpoint's transaction. (A resumed run that stored no checkpoint of its own
/// carries its predecessor's, whose `n` is below all of its own blocks: nothing is expected of it.)
pub fn every_item_printed_before_the_last_stored_checkpoint_is_stored(
    runs: &[Run],
    events: &[ProbeEvent],
    stored: &HashMap<Uuid, StoredItems>,
    figures: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let printed = printed(events);
    let mut v = Vec::new();
    for run in runs.iter().filter(|r| r.worker.starts_with("probe-")) {
        let (Some(blocks), Some(items)) = (printed.get(run.id.to_string().as_str()), stored.get(&run.id)) else {
            continue;
        };
        let Some(upto) = run.checkpoint.as_ref().and_then(|c| c["items"].as_i64()) else { continue };
        let before: Vec<&ItemBlock> = blocks.iter().filter(|b| b.to <= upto).collect();
        if before.is_empty() {
            continue;
        }
        *figures.entry("runs checked against their last checkpoint".into()).or_default() += 1;
        let (succeeded, failed, skipped) = totals(before);
        let kept = items.summary.as_ref().map_or(0, |s| s.succeeded);
        if kept < succeeded {
            v.push(format!(
                "run {} of {} stored checkpoint {} but only {kept} of the {succeeded} items that succeeded before it",
                run.id,
                run.worker,
                run.checkpoint.as_ref().map_or(String::new(), ToString::to_string)
            ));
        }
        let lost: Vec<&str> = failed
            .iter()
            .filter(|id| !items.failed.contains(**id))
            .chain(skipped.iter().filter(|id| !items.skipped.contains(**id)))
            .copied()
            .collect();
        if !lost.is_empty() {
            v.push(format!(
                "run {} of {} stored the checkpoint for item {upto} but lost items printed before it: {lost:?}",
                run.id, run.worker
            ));
        }
    }
    v
}

/// Across a resume chain the failed and skipped items are counted once by id: a run's chain figures equal the
/// distinct ids stored by the runs of its chain (the run and the runs it resumes, transitively), however often a
/// resume reported one again, and never exceed what the chain's workers printed.
pub fn a_resume_chain_counts_its_failed_and_skipped_items_once(
    runs: &[Run],
    events: &[ProbeEvent],
    stored: &HashMap<Uuid, StoredItems>,
    figures: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let ledger: HashMap<Uuid, &Run> = runs.iter().map(|r| (r.id, r)).collect();
    let printed = printed(events);
    let mut v = Vec::new();
    for run in runs.iter().filter(|r| r.follows_as == Some(FollowKind::Resume)) {
        let Some(items) = stored.get(&run.id) else { continue };
        let mut chain = vec![run.id];
        while let Some(p) = ledger
            .get(chain.last().expect("the run"))
            .filter(|r| r.follows_as == Some(FollowKind::Resume))
            .and_then(|r| r.follows)
        {
            chain.push(p);
        }
        let (mut failed, mut skipped, mut reported) = (BTreeSet::new(), BTreeSet::new(), 0usize);
        let mut wrote: BTreeSet<&str> = BTreeSet::new();
        for id in &chain {
            let of = stored.get(id).cloned().unwrap_or_default();
            reported += of.failed.len();
            failed.extend(of.failed);
            skipped.extend(of.skipped);
            let blocks = printed.get(id.to_string().as_str()).map_or(&[][..], Vec::as_slice);
            wrote.extend(totals(blocks).1);
        }
        let figure = items.summary.as_ref().and_then(|s| s.chain.clone());
        let (runs_seen, chain_failed, chain_skipped) =
            figure.as_ref().map_or((0, 0, 0), |c| (c.runs, c.failed, c.skipped));
        if failed.is_empty() && skipped.is_empty() && figure.is_none() {
            continue;
        }
        *figures.entry("resume chains with items".into()).or_default() += 1;
        *figures.entry("failures reported again after a resume".into()).or_default() += reported - failed.len();
        let expected = (chain.len() as i64, failed.len() as i64, skipped.len() as i64);
        if (runs_seen, chain_failed, chain_skipped) != expected {
            v.push(format!(
                "run {} of {} counts its resume chain as {runs_seen} runs, {chain_failed} failed, {chain_skipped} \
                 skipped; its chain's rows say {} runs, {} failed, {} skipped",
                run.id, run.worker, expected.0, expected.1, expected.2
            ));
        }
        if chain_failed > wrote.len() as i64 && !printed.is_empty() {
            v.push(format!(
                "run {} of {} counts {chain_failed} failed items across its chain; its workers printed {}",
                run.id,
                run.worker,
                wrote.len()
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use scrinalia_shared::items::ChainItems;
    use serde_json::{Value, json};

    use super::*;

    fn run(fields: Value) -> Run {
        let mut base = json!({
            "id": Uuid::now_v7(), "worker": "probe-13", "state": "interrupted", "requested_by": "t",
            "requested_at": "2030-01-01T00:00:10Z", "arguments": {}, "attempt": 1,
            "config": {"engine_configurable": false, "options": {}, "timeout_seconds": 1},
        });
        base.as_object_mut().expect("an object").extend(fields.as_object().expect("fields").clone());
        serde_json::from_value(base).expect("a run")
    }

    fn block(run: &Run, from: i64, to: i64, failed: &[&str]) -> ProbeEvent {
        serde_json::from_value(json!({"event": "items", "worker": run.worker, "verb": "run", "run_id": run.id,
            "pid": 1, "at_ns": 0, "from": from, "to": to, "succeeded": to - from + 1 - failed.len() as i64,
            "failed": failed, "skipped": []}))
        .expect("a probe line")
    }

    fn kept(succeeded: i64, failed: &[&str], chain: Option<ChainItems>) -> StoredItems {
        let summary = ItemSummary { succeeded, failed: failed.len() as i64, chain, ..ItemSummary::default() };
        let failed = failed.iter().map(|s| (*s).to_owned()).collect();
        StoredItems { summary: Some(summary), failed, skipped: BTreeSet::new() }
    }

    #[test]
    fn more_stored_than_printed_and_lost_before_a_checkpoint_are_named() {
        let r = run(json!({"checkpoint": {"step": 1, "items": 10}}));
        let events = [block(&r, 1, 10, &["item-000005"]), block(&r, 11, 20, &[])];
        let mut figures = BTreeMap::new();
        let fine = HashMap::from([(r.id, kept(12, &["item-000005"], None))]);
        let runs = [r.clone()];
        assert!(no_run_stores_more_items_than_its_worker_printed(&runs, &events, &fine, &mut figures).is_empty());
        assert!(
            every_item_printed_before_the_last_stored_checkpoint_is_stored(&runs, &events, &fine, &mut figures)
                .is_empty()
        );

        let over = HashMap::from([(r.id, kept(20, &["item-000005", "item-000007"], None))]);
        let v = no_run_stores_more_items_than_its_worker_printed(&runs, &events, &over, &mut figures);
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("stores 20 succeeded items; its worker printed 19"), "{}", v[0]);
        assert!(v[2].contains("never printed: [\"item-000007\"]"), "{}", v[2]);

        let lost = HashMap::from([(r.id, kept(5, &[], None))]);
        let v = every_item_printed_before_the_last_stored_checkpoint_is_stored(&runs, &events, &lost, &mut figures);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("only 5 of the 9 items"), "{}", v[0]);
        assert!(v[1].contains("lost items printed before it: [\"item-000005\"]"), "{}", v[1]);
    }

    #[test]
    fn a_chain_counting_a_repeated_failure_twice_is_named() {
        let first = run(json!({"checkpoint": {"step": 1, "items": 10}}));
        let chain = |failed| Some(ChainItems { runs: 2, failed, skipped: 0, classes: Vec::new() });
        // A resume that failed item 12 again, with `failed` as its chain's failed figure.
        let resume = |failed| {
            let r = run(json!({"follows": first.id, "follows_as": "resume", "state": "succeeded"}));
            (r, kept(8, &["item-000012"], chain(failed)))
        };
        let (good, good_items) = resume(2);
        let events = [
            block(&first, 1, 10, &["item-000004"]),
            block(&first, 11, 15, &["item-000012"]),
            block(&good, 11, 20, &["item-000012"]),
        ];
        let both = ["item-000004", "item-000012"];
        let stored = HashMap::from([(first.id, kept(12, &both, None)), (good.id, good_items)]);
        let mut figures = BTreeMap::new();
        let runs = [first.clone(), good];
        let v = a_resume_chain_counts_its_failed_and_skipped_items_once(&runs, &events, &stored, &mut figures);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(figures["failures reported again after a resume"], 1);

        let (bad, bad_items) = resume(3);
        let stored = HashMap::from([(first.id, kept(12, &both, None)), (bad.id, bad_items)]);
        let v = a_resume_chain_counts_its_failed_and_skipped_items_once(&[first, bad], &events, &stored, &mut figures);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("as 2 runs, 3 failed, 0 skipped; its chain's rows say 2 runs, 2 failed"), "{}", v[0]);
    }
}
