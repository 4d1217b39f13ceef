//! Sharded runs: one request of a worker that takes a shard is a parent run and N child runs, inserted in one
//! transaction. The children are claimed, leased, retried and ended like any run; the parent is never claimed,
//! and its state follows its children's, written in the transaction that ends each child ([`settle_parent`]).
//! The rule that makes a parent's state from its children's is [`settled`], pure and unit-tested.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::{
    FollowKind, Run, RunState,
    db::{
        self, Tx,
        runs::{Links, ShardLink},
        shards::Settled,
    },
};

/// Inserts `new` in `tx`; when its configuration splits it into more than one shard (and it is not itself a
/// shard), as a parent and its children, each with the parent's arguments and configuration: shard 0 to N-1, or,
/// for a resume or a restart of an earlier parent, one child per shard that did not succeed there, resuming (from
/// its checkpoint, when it has one) or restarting that shard's child. `None` when a unique index refuses the run
/// (or its parent): nothing of it is inserted then.
pub(crate) async fn insert(tx: &mut Tx, new: &db::runs::NewRun<'_>) -> db::Result<Option<Run>> {
    let shards = new.config.shards.as_ref().map(|s| s.value).filter(|n| *n > 1);
    let (Some(shards), None) = (shards, new.links.shard) else {
        return db::runs::insert(&mut *tx, new).await;
    };
    let shards = i32::try_from(shards).expect("at most MAX_SHARDS shards");
    let parent = db::runs::NewRun {
        links: db::runs::Links { shard: Some(ShardLink::Parent { shards }), checkpoint: None, ..new.links },
        ..*new
    };
    let earlier = match new.links.follows {
        Some((earlier, how @ (FollowKind::Resume | FollowKind::Restart))) => {
            Some((db::shards::children(&mut *tx, earlier).await?, how))
        }
        _ => None,
    };
    let Some(inserted) = db::runs::insert(&mut *tx, &parent).await? else { return Ok(None) };
    let plan: Vec<(i32, Links<'_>)> = match &earlier {
        None => (0..shards).map(|shard| (shard, Links::default())).collect(),
        Some((children, how)) => current(children)
            .into_iter()
            .filter(|(_, c)| c.state != RunState::Succeeded)
            .map(|(shard, c)| (shard, continuing(c, *how)))
            .collect(),
    };
    for (shard, links) in plan {
        let child = db::runs::NewRun {
            id: Uuid::now_v7(),
            override_version: None,
            links: Links {
                delay_seconds: new.links.delay_seconds,
                stamped_when_written: new.links.stamped_when_written,
                shard: Some(ShardLink::Child { parent: inserted.id, shard, shards }),
                even_if_paused: new.links.even_if_paused,
                ..links
            },
            ..*new
        };
        if db::runs::insert(&mut *tx, &child).await?.is_none() {
            return Err(db::DbError::Unexpected(format!("shard {shard} of run {} was refused", inserted.id)));
        }
    }
    Ok(Some(inserted))
}

/// How the child of a resumed or restarted parent continues `earlier`, the earlier parent's child of its shard:
/// a resume from its checkpoint, a restart when asked or when it has none. What made the run (a fire, a pipeline
/// step, the parent it continues) stays on the parent, which is what the outcome is counted on.
fn continuing(earlier: &Run, how: FollowKind) -> Links<'_> {
    let checkpoint = earlier.checkpoint.as_ref().zip(earlier.checkpoint_at).filter(|_| how == FollowKind::Resume);
    let how = if checkpoint.is_some() { FollowKind::Resume } else { FollowKind::Restart };
    Links { follows: Some((earlier.id, how)), checkpoint, ..Links::default() }
}

/// A parent's progress now, from its children (`children`, every child it has had): each field of their last
/// progress reports summed (or listed per shard), each shard's newest child counted.
pub fn live_progress(children: &[Run]) -> Option<Value> {
    sum(current(children).values().map(|c| c.progress.as_ref()))
}

/// Each shard's newest child among `children` (a retry is newer than the child it retries).
pub(crate) fn current(children: &[Run]) -> BTreeMap<i32, &Run> {
    let mut current: BTreeMap<i32, &Run> = BTreeMap::new();
    for child in children {
        let shard = child.shard.unwrap_or_default();
        if current.get(&shard).is_none_or(|c| (c.requested_at, c.id) < (child.requested_at, child.id)) {
            current.insert(shard, child);
        }
    }
    current
}

/// Writes the state of `child`'s parent from its children's, in the transaction that ended (or retried) the
/// child; the parent when this ended it (the caller then follows its end), else `None`.
pub(crate) async fn settle_parent(tx: &mut Tx, child: &Run) -> db::Result<Option<Run>> {
    let (Some(parent), Some(shards)) = (child.parent_id, child.shards) else { return Ok(None) };
    let children = db::shards::children(&mut *tx, parent).await?;
    let settled = settled(shards, &children);
    let written = db::shards::settle(&mut *tx, parent, &settled).await?;
    Ok(written.filter(|p| !matches!(p.state, RunState::Queued | RunState::Running)))
}

/// The state of a parent of `shards` shards from `children` (every child it has had, retries included): each
/// shard counts its newest child, and a shard without one (a resumed parent's shard that had succeeded) none. Queued while all are queued; running while any is in flight; succeeded when
/// all succeeded; else failed if any failed, interrupted if any was interrupted, cancelled otherwise, with the
/// first such child's reason and exit status and a sentence naming every child that did not succeed.
pub(crate) fn settled(shards: i32, children: &[Run]) -> Settled {
    let current = current(children);
    let states: Vec<RunState> = current.values().map(|c| c.state).collect();
    let result = sum(current.values().map(|c| c.result.as_ref()));
    let progress = sum(current.values().map(|c| c.progress.as_ref()));
    let in_flight = |s: &RunState| matches!(s, RunState::Queued | RunState::Running);
    let state = if states.iter().all(|s| *s == RunState::Queued) {
        RunState::Queued
    } else if states.iter().any(in_flight) {
        RunState::Running
    } else if states.iter().all(|s| *s == RunState::Succeeded) {
        RunState::Succeeded
    } else {
        [RunState::Failed, RunState::Interrupted]
            .into_iter()
            .find(|s| states.contains(s))
            .unwrap_or(RunState::Cancelled)
    };
    let unsettled = Settled { state, reason: None, exit_code: None, error: None, result: None, progress };
    if in_flight(&state) {
        return unsettled;
    }
    let deciding = current.values().find(|c| c.state == state).expect("the state is one of the children's");
    let error = (state != RunState::Succeeded).then(|| sentence(shards, state, &current));
    Settled { reason: deciding.end_reason, exit_code: deciding.exit_code, error, result, ..unsettled }
}

/// "shard 1 of 4 failed (run …: …); shard 3 of 4 was cancelled (run …)": every child that did not succeed.
fn sentence(shards: i32, state: RunState, current: &BTreeMap<i32, &Run>) -> String {
    let parts: Vec<String> = current
        .iter()
        .filter(|(_, c)| c.state != RunState::Succeeded)
        .map(|(shard, c)| {
            let why = c.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
            format!("shard {shard} of {shards} {} (run {}{why})", c.state, c.id)
        })
        .collect();
    format!("{} — {}", headline(state), parts.join("; "))
}

fn headline(state: RunState) -> &'static str {
    match state {
        RunState::Failed => "a shard failed",
        RunState::Interrupted => "a shard was interrupted",
        _ => "a shard was cancelled",
    }
}

/// The children's objects as one: each field whose values are all numbers is their sum; any other field lists
/// each child's value (null where a child has none), in shard order. `None` when no child has one.
fn sum<'a>(values: impl Iterator<Item = Option<&'a Value>>) -> Option<Value> {
    let values: Vec<Option<&Map<String, Value>>> = values.map(|v| v.and_then(Value::as_object)).collect();
    if values.iter().all(Option::is_none) {
        return None;
    }
    let mut keys: Vec<&String> = values.iter().flatten().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Map::new();
    for key in keys {
        let fields: Vec<Option<&Value>> = values.iter().map(|m| m.and_then(|m| m.get(key))).collect();
        let merged = if fields.iter().flatten().all(|v| v.is_number()) {
            let numbers = fields.iter().flatten().filter_map(|v| v.as_f64());
            let whole = fields.iter().flatten().all(|v| v.is_i64() || v.is_u64());
            if whole {
                Value::from(fields.iter().flatten().filter_map(|v| v.as_i64()).sum::<i64>())
            } else {
                serde_json::Number::from_f64(numbers.sum()).map_or(Value::Null, Value::Number)
            }
        } else {
            Value::Array(fields.into_iter().map(|v| v.cloned().unwrap_or(Value::Null)).collect())
        };
        out.insert(key.clone(), merged);
    }
    Some(Value::Object(out))
}

#[cfg(test)]
#[path = "shards_tests.rs"]
mod tests;
