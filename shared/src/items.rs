//! Items: what happened to each document of a run. The rules of an `item` line (what is refused, what is cut,
//! which class is counted as `other`), the batch a daemon gathers between two writes, and the writes: a batch on
//! its own, or with the run's checkpoint in one transaction, so that a resume never loses an item reported before
//! the checkpoint it resumes from.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use uuid::Uuid;

use crate::{DbError, Store, db};

pub use scrinalia_wire::{ChainItems, ItemCount, ItemPage, ItemSummary, RunItem};

/// The longest item id, in bytes.
pub const MAX_ID_BYTES: usize = 512;
/// The longest error kept, in bytes; a longer one is cut and ends with "…".
pub const MAX_ERROR_BYTES: usize = 2048;
/// The most classes a run keeps; items of further classes are counted as [`OTHER_CLASS`].
pub const MAX_CLASSES: usize = 64;
/// The class that stands for every class past [`MAX_CLASSES`].
pub const OTHER_CLASS: &str = "other";
/// How many refused item lines of a run are logged one by one; the rest are only counted.
pub const LOGGED_REFUSALS: u64 = 10;

/// One valid item line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The document's id.
    pub id: String,
    /// `succeeded`, `failed` or `skipped`.
    pub outcome: &'static str,
    /// Its class, if given.
    pub class: Option<String>,
    /// Its error, if given (cut to [`MAX_ERROR_BYTES`]).
    pub error: Option<String>,
    /// Whether the error was cut.
    pub cut: bool,
}

/// Why an item line was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `item` is not an object.
    NotAnObject,
    /// No `id`, or one that is not a non-empty string.
    NoId,
    /// An id over [`MAX_ID_BYTES`].
    IdTooLong,
    /// An outcome other than `succeeded`, `failed` or `skipped`.
    UnknownOutcome,
    /// A class that is not a short machine word.
    BadClass,
    /// An error that is not a string.
    BadError,
}

impl Refusal {
    /// The reason as a machine word, the class under which the refusal is counted.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotAnObject => "not_an_object",
            Self::NoId => "no_id",
            Self::IdTooLong => "id_too_long",
            Self::UnknownOutcome => "unknown_outcome",
            Self::BadClass => "bad_class",
            Self::BadError => "bad_error",
        }
    }

    /// The reason as a sentence, for the run's log.
    pub fn sentence(self) -> &'static str {
        match self {
            Self::NotAnObject => "an item must be a JSON object with an id and an outcome",
            Self::NoId => "an item needs an id: a non-empty string",
            Self::IdTooLong => "an item's id may take at most 512 bytes",
            Self::UnknownOutcome => "an item's outcome must be \"succeeded\", \"failed\" or \"skipped\"",
            Self::BadClass => {
                "an item's class must be a short machine word: a lowercase letter, then up to 31 lowercase letters, digits or underscores"
            }
            Self::BadError => "an item's error must be a string",
        }
    }
}

/// Reads the value of an `{"item": …}` line.
pub fn parse(value: &Value) -> Result<Item, Refusal> {
    let Value::Object(fields) = value else { return Err(Refusal::NotAnObject) };
    let id = match fields.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        _ => return Err(Refusal::NoId),
    };
    if id.len() > MAX_ID_BYTES {
        return Err(Refusal::IdTooLong);
    }
    let outcome = match fields.get("outcome").and_then(Value::as_str) {
        Some("succeeded") => "succeeded",
        Some("failed") => "failed",
        Some("skipped") => "skipped",
        _ => return Err(Refusal::UnknownOutcome),
    };
    let class = match fields.get("class") {
        None | Some(Value::Null) => None,
        Some(Value::String(class)) if is_class(class) => Some(class.clone()),
        Some(_) => return Err(Refusal::BadClass),
    };
    let (error, cut) = match fields.get("error") {
        None | Some(Value::Null) => (None, false),
        Some(Value::String(error)) => {
            let (error, cut) = cut_error(error);
            (Some(error), cut)
        }
        Some(_) => return Err(Refusal::BadError),
    };
    Ok(Item { id: id.clone(), outcome, class, error, cut })
}

/// `^[a-z][a-z0-9_]{0,31}$`.
fn is_class(class: &str) -> bool {
    let bytes = class.as_bytes();
    (1..=32).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}

/// The error as kept: at most [`MAX_ERROR_BYTES`] bytes, cut at a character boundary and ended with "…".
fn cut_error(error: &str) -> (String, bool) {
    if error.len() <= MAX_ERROR_BYTES {
        return (error.to_owned(), false);
    }
    let mut end = MAX_ERROR_BYTES - '…'.len_utf8();
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}…", &error[..end]), true)
}

/// A batch ready to be written: its sequence number within the run, and what it stores and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// 1, 2, … per run; a batch sent again keeps its number.
    pub seq: i64,
    /// How many item lines it stands for, refused ones included.
    pub lines: i64,
    /// The items kept one by one.
    pub items: Vec<RunItem>,
    /// What it adds to the run's counts.
    pub counts: Vec<ItemCount>,
}

impl Batch {
    fn as_db(&self) -> db::items::Batch<'_> {
        db::items::Batch { seq: self.seq, lines: self.lines, items: &self.items, counts: &self.counts }
    }
}

/// What a daemon gathers of one run's item lines between two writes. Memory stays small whatever the worker
/// prints: succeeded items past the bound are only counted, and a batch holds one row per id.
#[derive(Debug)]
pub struct Gatherer {
    keep_succeeded: u64,
    kept_succeeded: u64,
    /// Classes seen in this run (at most [`MAX_CLASSES`]).
    classes: HashSet<String>,
    /// Ids reported failed or skipped in this run: a later success of one is always stored, so that its row
    /// says the last outcome.
    unsettled: HashSet<String>,
    refused: u64,
    seq: i64,
    lines: i64,
    items: HashMap<String, RunItem>,
    counts: BTreeMap<(&'static str, String), i64>,
}

impl Gatherer {
    /// Nothing gathered yet; the first `keep_succeeded` succeeded items of the run are kept one by one.
    pub fn new(keep_succeeded: u64) -> Self {
        Self {
            keep_succeeded,
            kept_succeeded: 0,
            classes: HashSet::new(),
            unsettled: HashSet::new(),
            refused: 0,
            seq: 0,
            lines: 0,
            items: HashMap::new(),
            counts: BTreeMap::new(),
        }
    }

    /// Takes in one `item` line, as [`parse`] read it. A refused line is counted under its reason; it is returned
    /// while it is one of the run's first [`LOGGED_REFUSALS`], for the caller to log.
    pub fn offer(&mut self, parsed: Result<Item, Refusal>) -> Option<Refusal> {
        self.lines += 1;
        let item = match parsed {
            Ok(item) => item,
            Err(refusal) => {
                self.refused += 1;
                *self.counts.entry(("refused", refusal.reason().to_owned())).or_default() += 1;
                return (self.refused <= LOGGED_REFUSALS).then_some(refusal);
            }
        };
        let class = item.class.map(|class| self.known_class(class));
        if item.cut {
            *self.counts.entry(("cut", String::new())).or_default() += 1;
        }
        *self.counts.entry((item.outcome, class.clone().unwrap_or_default())).or_default() += 1;
        let keep = if item.outcome == "succeeded" {
            let replaces = self.unsettled.remove(&item.id);
            let within = self.kept_succeeded < self.keep_succeeded;
            self.kept_succeeded += u64::from(within && !replaces);
            within || replaces
        } else {
            self.unsettled.insert(item.id.clone());
            true
        };
        if keep {
            let row = RunItem { id: item.id, outcome: item.outcome.to_owned(), class, error: item.error };
            self.items.insert(row.id.clone(), row);
        }
        None
    }

    /// The class as counted: itself while the run has room for it, else [`OTHER_CLASS`].
    fn known_class(&mut self, class: String) -> String {
        if self.classes.contains(&class) {
            class
        } else if self.classes.len() < MAX_CLASSES {
            self.classes.insert(class.clone());
            class
        } else {
            OTHER_CLASS.to_owned()
        }
    }

    /// Keeps the successes of `ids` one by one whatever the bound: they have a failure streak under way, which
    /// the run's end closes only for the successes it finds stored.
    pub fn watch(&mut self, ids: impl IntoIterator<Item = String>) {
        self.unsettled.extend(ids);
    }

    /// How many lines wait to be written.
    pub fn pending(&self) -> i64 {
        self.lines
    }

    /// How many item lines of the run were refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Everything gathered since the last batch, as the next batch (`None` when nothing was).
    pub fn take(&mut self) -> Option<Batch> {
        if self.lines == 0 {
            return None;
        }
        self.seq += 1;
        let mut items: Vec<RunItem> = self.items.drain().map(|(_, row)| row).collect();
        items.sort_by(|a, b| a.id.cmp(&b.id));
        let counts = std::mem::take(&mut self.counts)
            .into_iter()
            .map(|((outcome, class), count)| ItemCount { outcome: outcome.to_owned(), class, count })
            .collect();
        Some(Batch { seq: self.seq, lines: std::mem::take(&mut self.lines), items, counts })
    }
}

impl Store {
    /// Writes a batch of a run held by `daemon` (fenced: [`DbError::LeaseLost`] when the run is no longer its).
    /// Safe to send again with the same sequence number: a batch already stored changes nothing.
    pub(crate) async fn write_items(&self, run: Uuid, daemon: Uuid, batch: &Batch) -> Result<(), DbError> {
        match db::items::write_batch(&self.db, run, daemon, batch.as_db()).await? {
            db::items::BatchWrite::LeaseLost => Err(DbError::LeaseLost { run_id: run, daemon_id: daemon }),
            db::items::BatchWrite::Written | db::items::BatchWrite::AlreadyWritten => Ok(()),
        }
    }

    /// Stores a run's checkpoint together with the items reported before it, in one transaction: a run resumed
    /// from this checkpoint never misses one of them. Fenced like every owner write.
    pub(crate) async fn checkpoint_with_items(
        &self,
        run: Uuid,
        daemon: Uuid,
        batch: Option<&Batch>,
        checkpoint: &Value,
    ) -> Result<(), DbError> {
        let lost = DbError::LeaseLost { run_id: run, daemon_id: daemon };
        let Some(batch) = batch else { return self.store_checkpoint(run, daemon, checkpoint).await };
        let mut tx = self.db.begin_write().await?;
        if db::items::write_batch(&mut tx, run, daemon, batch.as_db()).await? == db::items::BatchWrite::LeaseLost {
            return Err(lost);
        }
        if !db::runs::store_checkpoint(&mut tx, run, daemon, checkpoint).await? {
            return Err(lost);
        }
        tx.commit().await?;
        Ok(())
    }

    /// A run's items in figures; `None` when its worker reported none.
    pub async fn item_summary(&self, run: Uuid) -> Result<Option<ItemSummary>, DbError> {
        let (counts, (runs, chain)) =
            tokio::try_join!(db::items::counts(&self.db, run), db::items::chain_counts(&self.db, run))?;
        let chain = ChainItems::of(runs, chain);
        Ok(match (ItemSummary::of(counts), chain) {
            (Some(summary), chain) => Some(ItemSummary { chain, ..summary }),
            (None, Some(chain)) => Some(ItemSummary { chain: Some(chain), ..ItemSummary::default() }),
            (None, None) => None,
        })
    }

    /// A sharded run's items in figures: its children's, each shard's newest child counted (a retried shard's
    /// earlier attempts are not added again); `None` when no child reported any.
    pub async fn shards_item_summary(&self, children: &[crate::Run]) -> Result<Option<ItemSummary>, DbError> {
        let mut merged: BTreeMap<(String, String), i64> = BTreeMap::new();
        for child in crate::runs::shards::current(children).into_values() {
            for count in db::items::counts(&self.db, child.id).await? {
                *merged.entry((count.outcome, count.class)).or_default() += count.count;
            }
        }
        let counts = merged.into_iter().map(|((outcome, class), count)| ItemCount { outcome, class, count }).collect();
        Ok(ItemSummary::of(counts))
    }

    /// One page of a run's items in id order: of one outcome (all when `None`), whose id contains `search`
    /// (without regard to case), after the id `after`, at most `limit`.
    pub async fn run_items(
        &self,
        run: Uuid,
        outcome: Option<&str>,
        search: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<ItemPage, DbError> {
        let pattern = search.filter(|s| !s.is_empty()).map(db::ledger::contains_pattern);
        let page = db::items::ItemPage { outcome, pattern: pattern.as_deref(), after, limit: i64::from(limit) + 1 };
        let mut items = db::items::list(&self.db, run, page).await?;
        let more = items.len() > limit as usize;
        items.truncate(limit as usize);
        let next_after = more.then(|| items.last().map(|i| i.id.clone())).flatten();
        Ok(ItemPage { items, next_after })
    }

    /// How many item batches of a run were written.
    pub async fn item_batches(&self, run: Uuid) -> Result<i64, DbError> {
        db::items::batches(&self.db, run).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_item_needs_an_id_and_a_known_outcome() {
        let item = parse(&json!({"id": "doc-7", "outcome": "failed", "class": "ocr_empty", "error": "no text"}));
        assert_eq!(
            item,
            Ok(Item {
                id: "doc-7".into(),
                outcome: "failed",
                class: Some("ocr_empty".into()),
                error: Some("no text".into()),
                cut: false
            })
        );
        assert_eq!(parse(&json!("doc-7")), Err(Refusal::NotAnObject));
        assert_eq!(parse(&json!({"outcome": "failed"})), Err(Refusal::NoId));
        assert_eq!(parse(&json!({"id": "", "outcome": "failed"})), Err(Refusal::NoId));
        assert_eq!(parse(&json!({"id": 7, "outcome": "failed"})), Err(Refusal::NoId));
        assert_eq!(parse(&json!({"id": "x".repeat(513), "outcome": "failed"})), Err(Refusal::IdTooLong));
        assert!(parse(&json!({"id": "x".repeat(512), "outcome": "failed"})).is_ok());
        assert_eq!(parse(&json!({"id": "d", "outcome": "done"})), Err(Refusal::UnknownOutcome));
        assert_eq!(parse(&json!({"id": "d"})), Err(Refusal::UnknownOutcome));
        assert_eq!(parse(&json!({"id": "d", "outcome": "failed", "error": 3})), Err(Refusal::BadError));
    }

    #[test]
    fn a_class_is_a_short_machine_word() {
        for good in ["a", "ocr_empty", "ctx_overflow2", &format!("a{}", "b".repeat(31))] {
            assert!(parse(&json!({"id": "d", "outcome": "failed", "class": good})).is_ok(), "{good}");
        }
        for bad in ["", "Ocr", "1st", "_x", "a-b", "é", &format!("a{}", "b".repeat(32))] {
            let refused = parse(&json!({"id": "d", "outcome": "failed", "class": bad}));
            assert_eq!(refused, Err(Refusal::BadClass), "{bad}");
        }
    }

    #[test]
    fn a_long_error_is_cut_at_a_character_boundary() {
        let long = "é".repeat(2000);
        let item = parse(&json!({"id": "d", "outcome": "failed", "error": long})).expect("valid");
        let error = item.error.expect("valid");
        assert!(item.cut);
        assert!(error.len() <= MAX_ERROR_BYTES && error.ends_with('…'), "{}", error.len());
        let exact = "x".repeat(MAX_ERROR_BYTES);
        let kept = parse(&json!({"id": "d", "outcome": "failed", "error": exact})).expect("valid");
        assert!(!kept.cut);
        assert_eq!(kept.error.expect("valid").len(), MAX_ERROR_BYTES);
    }

    fn count(batch: &Batch, outcome: &str, class: &str) -> i64 {
        batch.counts.iter().find(|c| c.outcome == outcome && c.class == class).map_or(0, |c| c.count)
    }

    #[test]
    fn successes_past_the_bound_are_only_counted() {
        let mut gatherer = Gatherer::new(2);
        for i in 0..5 {
            gatherer.offer(parse(&json!({"id": format!("ok-{i}"), "outcome": "succeeded"})));
        }
        gatherer.offer(parse(&json!({"id": "bad", "outcome": "failed", "class": "ocr_empty", "error": "empty"})));
        let batch = gatherer.take().expect("valid");
        assert_eq!((batch.seq, batch.lines), (1, 6));
        let ids: Vec<_> = batch.items.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["bad", "ok-0", "ok-1"]);
        assert_eq!((count(&batch, "succeeded", ""), count(&batch, "failed", "ocr_empty")), (5, 1));
        assert_eq!(gatherer.take(), None, "nothing new: no batch");
        gatherer.offer(parse(&json!({"id": "ok-9", "outcome": "succeeded"})));
        let next = gatherer.take().expect("valid");
        assert_eq!((next.seq, next.items.len(), count(&next, "succeeded", "")), (2, 0, 1));
    }

    #[test]
    fn a_later_success_of_a_failed_item_replaces_its_row() {
        let mut gatherer = Gatherer::new(0);
        gatherer.offer(parse(&json!({"id": "d", "outcome": "failed", "error": "timeout"})));
        gatherer.take();
        gatherer.offer(parse(&json!({"id": "d", "outcome": "succeeded"})));
        gatherer.offer(parse(&json!({"id": "e", "outcome": "succeeded"})));
        let batch = gatherer.take().expect("valid");
        assert_eq!(batch.items, [RunItem { id: "d".into(), outcome: "succeeded".into(), class: None, error: None }]);
    }

    #[test]
    fn refusals_are_counted_by_reason_and_the_first_ten_returned() {
        let mut gatherer = Gatherer::new(10);
        let returned =
            (0..1000).filter(|_| gatherer.offer(parse(&json!({"id": "d", "outcome": "maybe"}))).is_some()).count();
        assert_eq!((returned, gatherer.refused()), (10, 1000));
        let batch = gatherer.take().expect("valid");
        assert_eq!((batch.lines, count(&batch, "refused", "unknown_outcome")), (1000, 1000));
        assert!(batch.items.is_empty());
    }

    #[test]
    fn classes_past_the_limit_count_as_other() {
        let mut gatherer = Gatherer::new(0);
        for i in 0..70 {
            gatherer.offer(parse(&json!({"id": format!("d{i}"), "outcome": "failed", "class": format!("c{i}")})));
        }
        gatherer.offer(parse(&json!({"id": "again", "outcome": "failed", "class": "c3"})));
        let batch = gatherer.take().expect("valid");
        assert_eq!(count(&batch, "failed", OTHER_CLASS), 6);
        assert_eq!(count(&batch, "failed", "c3"), 2);
        assert_eq!(batch.counts.len(), MAX_CLASSES + 1);
        let d69 = batch.items.iter().find(|r| r.id == "d69").expect("valid");
        assert_eq!(d69.class.as_deref(), Some(OTHER_CLASS));
    }
}
