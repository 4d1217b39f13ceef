//! The archive's pipeline over stamps: what one worker sees and what it still has to do. The transfer sees
//! the documents that have arrived in staging; every other worker sees only archived documents (those with the
//! transfer's stamp, read from `archive/`). A worker's pending set is the documents it sees that carry the
//! stamps of all its inputs (`Task::inputs`) but not its own, so a later worker has nothing to do until the
//! earlier ones have stamped, and reads what they recorded.

use std::{collections::BTreeMap, fs, path::Path};

use anyhow::Context as _;
use serde_json::Value;

use crate::{corpus::Document, staging::Schedule, stamps::StampBook, task::Task};

/// A document to process, with what the worker's inputs recorded for it.
#[derive(Debug, Clone)]
pub struct Item {
    /// The document.
    pub document: Document,
    /// Input worker → its stamp's record for the document.
    pub inputs: BTreeMap<Task, Value>,
}

impl Item {
    /// What `task` recorded for this document (`Null` if it is not an input).
    pub fn input(&self, task: Task) -> &Value {
        self.inputs.get(&task).unwrap_or(&Value::Null)
    }
}

/// Where a worker's documents come from.
#[derive(Debug)]
enum Seen {
    /// Staged documents (the transfer's), generated on the spot.
    Staged(Vec<Document>),
    /// The ids of archived documents, read from the archive folder when processed.
    Archived(Vec<String>),
}

/// One worker's view of the pipeline.
#[derive(Debug)]
pub struct Stage {
    /// Its own stamps, which a run adds to.
    pub own: StampBook,
    inputs: Vec<(Task, StampBook)>,
    seen: Seen,
    archive: std::path::PathBuf,
}

impl Stage {
    /// The view of `task` over the data folder `data` at `now` (Unix seconds).
    pub fn open(task: Task, data: &Path, now: u64) -> anyhow::Result<Self> {
        let schedule = Schedule::open(data, now)?;
        let load = |t: Task| StampBook::load(data, t.name(), t.stamp());
        let own = load(task)?;
        let inputs = task.inputs().iter().map(|&t| Ok((t, load(t)?))).collect::<anyhow::Result<Vec<_>>>()?;
        let seen = if task == Task::Transfer {
            Seen::Staged(schedule.documents(now))
        } else {
            Seen::Archived(load(Task::Transfer)?.documents.into_keys().collect())
        };
        Ok(Self { own, inputs, seen, archive: data.join("archive") })
    }

    fn seen_ids(&self) -> Vec<&str> {
        match &self.seen {
            Seen::Staged(documents) => documents.iter().map(|d| d.id.as_str()).collect(),
            Seen::Archived(ids) => ids.iter().map(String::as_str).collect(),
        }
    }

    /// How many of the documents the worker sees `keep` keeps (a run's shard).
    pub fn seen(&self, keep: impl Fn(&str) -> bool) -> usize {
        self.seen_ids().into_iter().filter(|id| keep(id)).count()
    }

    /// The documents it sees that carry its inputs' stamps but not its own, in order.
    pub fn pending(&self) -> Vec<String> {
        self.seen_ids()
            .into_iter()
            .filter(|id| !self.own.has(id) && self.inputs.iter().all(|(_, book)| book.has(id)))
            .map(str::to_owned)
            .collect()
    }

    /// How many of the documents it sees that `keep` keeps (a run's shard) already carry its stamp.
    pub fn done(&self, keep: impl Fn(&str) -> bool) -> usize {
        self.seen_ids().into_iter().filter(|id| keep(id) && self.own.has(id)).count()
    }

    /// The document `id` with its inputs' records.
    pub fn item(&self, id: &str) -> anyhow::Result<Item> {
        let document = match &self.seen {
            Seen::Staged(documents) => {
                documents.iter().find(|d| d.id == id).cloned().with_context(|| format!("{id} is not in staging"))?
            }
            Seen::Archived(_) => {
                let path = self.archive.join(format!("{id}.json"));
                let text =
                    fs::read_to_string(&path).with_context(|| format!("read the archived {}", path.display()))?;
                serde_json::from_str(&text).with_context(|| format!("parse the archived {}", path.display()))?
            }
        };
        let inputs = self
            .inputs
            .iter()
            .filter_map(|(task, book)| book.documents.get(id).map(|record| (*task, record.clone())))
            .collect();
        Ok(Item { document, inputs })
    }
}
