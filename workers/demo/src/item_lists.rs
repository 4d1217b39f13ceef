//! The item lists an archive run is given (docs/worker-protocol.md, "Items"): its scope, the file named by
//! `SCRINALIA_ITEMS_ONLY` (a rerun of an earlier run's failures processes exactly those documents), and the
//! quarantined documents it must leave untouched, the file named by `SCRINALIA_ITEMS_SKIP`. Each file holds one id
//! a line: a line ends with `\n` or `\r\n`, which is removed, and nothing else is (an id keeps its spaces); empty
//! lines are ignored. A file that is named but cannot be read ends the run with an error before any work: a scoped
//! run that went on without its scope would process everything, and one without its skip list would process the
//! quarantined documents again. (The probes read the same files in `probe.rs`.)
//!
//! A sharded run's shard (`SCRINALIA_SHARD=i/N`, read with the command line in `invocation.rs`) narrows the run
//! the same way as a scope: a document of another shard is outside the run, neither processed nor reported, so the
//! `N` shards of a run together handle every document once.

use std::collections::BTreeSet;

use anyhow::Context as _;
use scrinalia_wire::shard::Shard;

use crate::invocation::{ITEMS_ONLY_ENV, ITEMS_SKIP_ENV, Invocation};

/// What a run is scoped to and what it must skip.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemLists {
    /// The ids of its scope; `None` when the run is not scoped.
    pub only: Option<BTreeSet<String>>,
    /// The quarantined ids (empty when there is nothing to skip).
    pub skip: BTreeSet<String>,
    /// The run's shard; `None` when the run is not sharded.
    pub shard: Option<Shard>,
}

impl ItemLists {
    /// Reads the files the invocation names.
    pub fn of(invocation: &Invocation) -> anyhow::Result<Self> {
        let only = invocation.items_only.as_deref().map(|path| read(ITEMS_ONLY_ENV, path)).transpose()?;
        let skip = invocation.items_skip.as_deref().map(|path| read(ITEMS_SKIP_ENV, path)).transpose()?;
        Ok(Self { only, skip: skip.unwrap_or_default(), shard: invocation.shard })
    }

    /// Whether `id` is outside the run: not in its scope, or in another shard.
    pub fn out_of_scope(&self, id: &str) -> bool {
        self.only.as_ref().is_some_and(|only| !only.contains(id)) || !self.in_shard(id)
    }

    /// Whether `id` is in the run's shard (every id is, for a run that is not sharded).
    pub fn in_shard(&self, id: &str) -> bool {
        self.shard.is_none_or(|shard| shard.holds(id))
    }

    /// Whether `id` is quarantined, to be left untouched.
    pub fn skips(&self, id: &str) -> bool {
        self.skip.contains(id)
    }
}

/// The ids of a list's text.
pub fn ids(text: &str) -> BTreeSet<String> {
    text.lines().filter(|line| !line.is_empty()).map(str::to_owned).collect()
}

fn read(variable: &str, path: &str) -> anyhow::Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {variable} ({path})"))?;
    Ok(ids(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_id_a_line_keeping_spaces_without_empty_lines() {
        let read = ids("doc-0001\r\n\n doc 0002 \ndoc-0003\n\r\ndoc-0001\n");
        let expected: BTreeSet<String> = ["doc-0001", " doc 0002 ", "doc-0003"].map(str::to_owned).into();
        assert_eq!(read, expected);
        assert!(ids("").is_empty());
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_and_an_unset_one_is_no_list() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let only = dir.path().join("only");
        std::fs::write(&only, "doc-0002\ndoc-0003\n").expect("write the scope");
        let args = ["embed".to_owned(), "run".to_owned()];
        let invocation = |only: Option<String>, skip: Option<String>| {
            let env = move |name: &str| match name {
                ITEMS_ONLY_ENV => only.clone(),
                ITEMS_SKIP_ENV => skip.clone(),
                _ => None,
            };
            Invocation::parse(&args, |w| crate::task::Task::named(w).map(crate::task::Task::options), env)
                .expect("parses")
        };
        let lists = ItemLists::of(&invocation(Some(only.display().to_string()), None)).expect("read");
        assert!(lists.out_of_scope("doc-0001") && !lists.out_of_scope("doc-0002"));
        assert!(lists.skip.is_empty() && !lists.skips("doc-0002"));
        assert_eq!(ItemLists::of(&invocation(None, None)).expect("nothing to read"), ItemLists::default());
        let missing = dir.path().join("gone").display().to_string();
        let error = ItemLists::of(&invocation(None, Some(missing))).expect_err("a missing skip list");
        assert!(format!("{error:#}").starts_with("read SCRINALIA_ITEMS_SKIP ("), "{error:#}");
    }

    #[test]
    fn a_shard_leaves_the_other_shards_documents_out_of_the_run() {
        // doc-0000 … doc-0003 are in shards 0, 2, 0, 0 of 4 (wire/src/shard.rs).
        let lists = |shard| ItemLists { shard, ..ItemLists::default() };
        let ids = ["doc-0000", "doc-0001", "doc-0002", "doc-0003"];
        let inside = |lists: &ItemLists| ids.iter().filter(|id| !lists.out_of_scope(id)).copied().collect::<Vec<_>>();
        assert_eq!(inside(&lists(Some(Shard { index: 0, count: 4 }))), ["doc-0000", "doc-0002", "doc-0003"]);
        assert_eq!(inside(&lists(Some(Shard { index: 2, count: 4 }))), ["doc-0001"]);
        assert!(inside(&lists(Some(Shard { index: 1, count: 4 }))).is_empty());
        assert_eq!(inside(&lists(None)), ids, "a run that is not sharded holds every document");
        let scoped = ItemLists {
            only: Some(["doc-0000", "doc-0001"].map(str::to_owned).into()),
            ..lists(Some(Shard { index: 0, count: 4 }))
        };
        assert_eq!(inside(&scoped), ["doc-0000"], "a scope and a shard: the documents of both");
    }
}
