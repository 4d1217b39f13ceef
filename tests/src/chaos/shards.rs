//! Sharded runs in the chaos mix: some requests of the [`SHARDED`] probes ask for 2 or 3 shards (one of them holds
//! a resource of two slots, one is retried by its policy), and the invariants checked at the end: a parent's
//! state agrees with its children's, and no document is reported by two shards of one parent (each failed item
//! a child stored belongs to that child's shard). That two runs of one worker never execute at once is checked
//! with the other executions (`invariants.rs`), children by their (parent, shard).

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use rand::Rng;
use scrinalia_shared::{ApiStore, Run, RunState};
use scrinalia_wire::shard::shard_of;
use uuid::Uuid;

use super::items::StoredItems;
use crate::eventually;

/// The probes whose requests are sometimes sharded.
pub const SHARDED: [&str; 3] = ["probe-6", "probe-9", "probe-12"];

/// How many shards a request of `worker` asks for, if any: 2 or 3 in two requests of five of a sharded probe.
pub fn shards_for(worker: &str, rng: &mut impl Rng) -> Option<u32> {
    (SHARDED.contains(&worker) && rng.random_bool(0.4)).then(|| rng.random_range(2..=3))
}

/// Waits until a daemon described every sharded probe: until then, a request for shards is refused (whether the
/// worker takes a shard is not known yet), which the suite's traffic does not expect.
pub async fn wait_described(db: &ApiStore) {
    for worker in SHARDED {
        eventually(Duration::from_secs(60), &format!("a daemon to describe {worker}"), || async {
            let described = db.description(worker).await.ok()??.description?;
            described.capabilities.filter(|c| c.shards).map(drop)
        })
        .await;
    }
}

/// Each parent's children, by parent id.
fn families(runs: &[Run]) -> BTreeMap<Uuid, Vec<&Run>> {
    let mut families: BTreeMap<Uuid, Vec<&Run>> = BTreeMap::new();
    for run in runs {
        if let Some(parent) = run.parent_id {
            families.entry(parent).or_default().push(run);
        }
    }
    families
}

/// Each shard's newest child.
fn current<'a>(children: &[&'a Run]) -> BTreeMap<i32, &'a Run> {
    let mut current: BTreeMap<i32, &Run> = BTreeMap::new();
    for child in children {
        let shard = child.shard.unwrap_or(-1);
        if current.get(&shard).is_none_or(|c| (c.requested_at, c.id) < (child.requested_at, child.id)) {
            current.insert(shard, child);
        }
    }
    current
}

/// Every parent's state is the one its children's make (each shard's newest child): succeeded when all
/// succeeded; else failed if one failed, interrupted if one was, cancelled otherwise; with the reason of such a
/// child. Every child names a parent in the ledger, of its worker, with its number of shards.
pub fn a_parents_state_agrees_with_its_children(runs: &[Run], figures: &mut BTreeMap<String, usize>) -> Vec<String> {
    let by_id: HashMap<Uuid, &Run> = runs.iter().map(|r| (r.id, r)).collect();
    let mut v = Vec::new();
    for (parent_id, children) in families(runs) {
        *figures.entry("children".into()).or_default() += children.len();
        let Some(parent) = by_id.get(&parent_id) else {
            v.push(format!("{} children name parent {parent_id}, which is not in the ledger", children.len()));
            continue;
        };
        *figures.entry(format!("parents {}", parent.state)).or_default() += 1;
        for child in &children {
            if child.worker != parent.worker || child.shards != parent.shards || parent.parent_id.is_some() {
                v.push(format!("child {} of {} does not match its parent {parent_id}", child.id, child.worker));
            }
        }
        let current = current(&children);
        let states: Vec<RunState> = current.values().map(|c| c.state).collect();
        let expected = if states.iter().all(|s| *s == RunState::Succeeded) {
            RunState::Succeeded
        } else {
            [RunState::Failed, RunState::Interrupted]
                .into_iter()
                .find(|s| states.contains(s))
                .unwrap_or(RunState::Cancelled)
        };
        let reason = current.values().find(|c| c.state == expected).and_then(|c| c.end_reason);
        if (parent.state, parent.end_reason) != (expected, reason) {
            v.push(format!(
                "parent {parent_id} of {} is {} ({:?}), but its children make it {expected} ({reason:?}): {:?}",
                parent.worker,
                parent.state,
                parent.end_reason,
                current.iter().map(|(s, c)| format!("shard {s} {} {}", c.state, c.id)).collect::<Vec<_>>()
            ));
        }
    }
    v
}

/// No document is reported by two shards of one parent: every item a child stored as failed or skipped is of that
/// child's shard (the first eight bytes of its id's SHA-256, modulo the number of shards), so no two shards share
/// one.
pub fn no_document_in_two_shards(runs: &[Run], stored: &HashMap<Uuid, StoredItems>) -> Vec<String> {
    let mut v = Vec::new();
    for children in families(runs).values() {
        for child in children {
            let (Some(shard), Some(shards), Some(items)) = (child.shard, child.shards, stored.get(&child.id)) else {
                continue;
            };
            let count = u32::try_from(shards).unwrap_or(1);
            for id in items.failed.iter().chain(&items.skipped) {
                let of = shard_of(id, count);
                if i64::from(of) != i64::from(shard) {
                    v.push(format!(
                        "item {id} was reported by shard {shard} of {shards} (run {}), but it is in shard {of}",
                        child.id
                    ));
                }
            }
        }
    }
    v
}
