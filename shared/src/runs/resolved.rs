//! What an API process resolves a run request against, kept between requests: each worker's override with its
//! version, and its stored description. A request then costs one statement, the insert, made conditional on the
//! override's version: an override replaced since it was cached makes the insert refuse, and the request is
//! resolved again from fresh reads, so a run never resolves against a superseded override. The process's change
//! feed forgets a worker's entry when its override or its description changes (and every entry on a resync), so
//! that refusal is rare and a description (the code's defaults) is as fresh as the feed.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use crate::{Change, Override, WorkerDescription};

/// One worker's override, as of `version`, and its stored description.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The override's version ([`crate::db::overrides::version`]), read before the override.
    pub(crate) version: i64,
    /// The override, if any.
    pub(crate) stored: Option<Override>,
    /// The stored description, if any.
    pub(crate) described: Option<WorkerDescription>,
}

/// The entries of every worker requested so far. An entry read while a change was being forgotten is not kept:
/// `generation` counts the forgetting, and an entry is stored only when none happened since its reads began.
#[derive(Debug, Default)]
pub struct ResolveCache {
    known: Mutex<HashMap<String, Arc<Resolved>>>,
    generation: AtomicU64,
}

impl ResolveCache {
    /// The cached entry of `worker`.
    pub(crate) fn get(&self, worker: &str) -> Option<Arc<Resolved>> {
        self.lock().get(worker).cloned()
    }

    /// The generation to give [`ResolveCache::keep`] for reads that begin now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps `entry` for `worker`, unless something was forgotten since `generation` was read.
    pub(crate) fn keep(&self, worker: &str, entry: Arc<Resolved>, generation: u64) {
        let mut known = self.lock();
        // Checked under the lock that `forget` takes too, so no forgetting can slip between check and insert.
        if self.generation.load(Ordering::Acquire) == generation {
            known.insert(worker.to_owned(), entry);
        }
    }

    /// Forgets `worker`'s entry (its override changed under it).
    pub fn forget_worker(&self, worker: &str) {
        let mut known = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        known.remove(worker);
    }

    /// Forgets what `change` may have made stale: a worker's override or description, or everything after a
    /// resync (changes may have been missed).
    pub fn forget(&self, change: &Change) {
        match change {
            Change::Override { worker, .. } | Change::Worker { worker } => self.forget_worker(worker),
            Change::Resync { .. } => {
                let mut known = self.lock();
                self.generation.fetch_add(1, Ordering::AcqRel);
                known.clear();
            }
            _ => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Resolved>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(version: i64) -> Arc<Resolved> {
        Arc::new(Resolved { version, stored: None, described: None })
    }

    #[test]
    fn an_entry_read_before_a_change_is_not_kept() {
        let cache = ResolveCache::default();
        let generation = cache.generation();
        cache.forget(&Change::Override {
            worker: "ocr".into(),
            actor: "ada".into(),
            action: crate::OverrideAction::Set,
        });
        cache.keep("ocr", entry(3), generation);
        assert!(cache.get("ocr").is_none(), "an entry read across a change was kept");
        cache.keep("ocr", entry(4), cache.generation());
        assert_eq!(cache.get("ocr").map(|e| e.version), Some(4));
    }

    #[test]
    fn changes_forget_their_worker_and_a_resync_forgets_all() {
        let cache = ResolveCache::default();
        for worker in ["ocr", "embed", "tag"] {
            cache.keep(worker, entry(1), cache.generation());
        }
        cache.forget(&Change::Worker { worker: "ocr".into() });
        cache.forget(&Change::Queue { worker: "embed".into() });
        assert!(cache.get("ocr").is_none());
        assert!(cache.get("embed").is_some(), "a queue measurement changes nothing a run resolves against");
        cache.forget(&Change::Resync { reason: "reconnected".into() });
        assert!(cache.get("embed").is_none() && cache.get("tag").is_none());
    }
}
