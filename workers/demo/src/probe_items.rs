//! The items a probe reports (`items`, `failed_every`, `malformed_items`, `item_text`): which documents, with
//! which outcome, and what the probe ledger records of each block before it is printed, so that the chaos suite
//! can hold the stored items against what the worker printed. A resumed probe goes on after the items its
//! checkpoint counts (`{"step": j, "items": n}`), as a real worker resumes after its committed work.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{
    item_lists::ItemLists,
    protocol::{Protocol, item_line},
};

/// The classes of a probe's failed items, in turn.
pub const FAILURE_CLASSES: [&str; 3] = ["ocr_empty", "ctx_overflow", "timeout"];

/// Item `i` (1-based) of a probe that fails every `failed_every`-th: its id, outcome, class and error.
pub fn item(i: i64, failed_every: i64) -> (String, &'static str, Option<&'static str>, Option<String>) {
    let id = format!("item-{i:06}");
    if failed_every > 0 && i % failed_every == 0 {
        let class = FAILURE_CLASSES[usize::try_from((i / failed_every - 1) % 3).unwrap_or(0)];
        (id, "failed", Some(class), Some(format!("item {i} failed with {class}, as asked")))
    } else {
        (id, "succeeded", None, None)
    }
}

/// How many items the checkpoint a probe resumes from says were done (0 without one).
pub fn resumed_after(checkpoint: Option<&str>) -> i64 {
    let parsed = checkpoint.and_then(|text| serde_json::from_str::<Value>(text).ok());
    parsed.and_then(|c| c["items"].as_i64()).unwrap_or(0).max(0)
}

/// How long each item line (or its text stand-in) took to write and flush, in microseconds: the items
/// benchmark's measure of whether the daemon ever holds a worker up.
#[derive(Debug, Default)]
pub struct WriteTimes(Vec<u32>);

impl WriteTimes {
    /// The count, p99 and maximum, in milliseconds.
    pub fn summary(&mut self) -> Value {
        self.0.sort_unstable();
        let ms = |us: u32| f64::from(us) / 1000.0;
        let p99 = self.0.get((self.0.len() * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or(0);
        json!({ "lines": self.0.len(), "p99_ms": ms(p99), "max_ms": ms(self.0.last().copied().unwrap_or(0)) })
    }
}

/// How a probe prints its items.
pub struct ItemOutput {
    /// Its scope and skip list.
    pub lists: ItemLists,
    /// Every n-th item fails (0: none).
    pub failed_every: i64,
    /// Free-text lines of the same length instead (the items benchmark's baseline).
    pub as_text: bool,
    /// How long each line took to write.
    pub times: WriteTimes,
    /// A pause after each item of its share, as a model call per document would take (`item_ms`).
    pub pause: Duration,
}

impl ItemOutput {
    /// The outcome item `i` is reported with, or `None` outside the scope; a quarantined one is skipped.
    fn line(&self, i: i64) -> Option<(String, &'static str, Option<&'static str>, Option<String>)> {
        let (id, outcome, class, error) = item(i, self.failed_every);
        if self.lists.out_of_scope(&id) {
            return None;
        }
        if self.lists.skips(&id) {
            let why = "quarantined: skipped without being touched".to_owned();
            return Some((id, "skipped", Some("quarantined"), Some(why)));
        }
        Some((id, outcome, class, error))
    }

    /// What the probe ledger records of items `from..=to` before they are printed: the range, how many
    /// succeeded, and the ids that failed and were skipped.
    pub fn record(&self, (from, to): (i64, i64)) -> Value {
        let (mut succeeded, mut failed, mut skipped) = (0, Vec::new(), Vec::new());
        for (id, outcome, ..) in (from..=to).filter_map(|i| self.line(i)) {
            match outcome {
                "failed" => failed.push(id),
                "skipped" => skipped.push(id),
                _ => succeeded += 1,
            }
        }
        json!({ "from": from, "to": to, "succeeded": succeeded, "failed": failed, "skipped": skipped })
    }

    /// Prints items `from..=to`: none outside the scope; a quarantined one as skipped, untouched.
    pub fn print(&mut self, out: &mut Protocol, (from, to): (i64, i64)) -> anyhow::Result<()> {
        for i in from..=to {
            let Some((id, outcome, class, error)) = self.line(i) else { continue };
            let line = item_line(&id, outcome, class, error.as_deref());
            // The stand-in: the same bytes, but a `#` where the JSON begins, so the daemon keeps it as text.
            let line = if self.as_text { format!("#{}", &line[1..]) } else { line };
            let started = Instant::now();
            out.text(&line)?;
            self.times.0.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
            if !self.pause.is_zero() {
                std::thread::sleep(self.pause);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nth_item_fails_with_the_classes_in_turn() {
        let failed: Vec<_> = (1..=12).map(|i| item(i, 4)).filter(|(_, outcome, ..)| *outcome == "failed").collect();
        let classes: Vec<_> = failed.iter().map(|(id, _, class, _)| (id.as_str(), class.unwrap_or_default())).collect();
        assert_eq!(
            classes,
            [("item-000004", "ocr_empty"), ("item-000008", "ctx_overflow"), ("item-000012", "timeout")]
        );
        assert_eq!(item(5, 0).1, "succeeded", "0 fails none");
    }

    #[test]
    fn the_record_of_a_block_counts_its_scope_and_names_failures_and_skips() {
        let lists = ItemLists {
            only: Some(["item-000002", "item-000003", "item-000004"].map(str::to_owned).into()),
            skip: ["item-000003".to_owned()].into(),
            shard: None,
        };
        let output =
            ItemOutput { lists, failed_every: 2, as_text: false, times: WriteTimes::default(), pause: Duration::ZERO };
        assert_eq!(
            output.record((1, 5)),
            json!({"from": 1, "to": 5, "succeeded": 0, "failed": ["item-000002", "item-000004"],
                "skipped": ["item-000003"]})
        );
    }

    #[test]
    fn a_resume_goes_on_after_the_items_its_checkpoint_counts() {
        assert_eq!(resumed_after(Some(r#"{"step": 2, "items": 40}"#)), 40);
        assert_eq!(resumed_after(Some(r#"{"step": 2}"#)), 0);
        assert_eq!(resumed_after(Some("not json")), 0);
        assert_eq!(resumed_after(None), 0);
    }
}
