//! `[items]`: how much of each run's per-document outcomes the ledger keeps individually.

use serde::{Deserialize, Serialize};

/// The most succeeded items a run may keep individually.
pub const MAX_KEEP_SUCCEEDED: u64 = 1_000_000;

/// `[items]`: a run's items (docs/worker-protocol.md, "Items").
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ItemSettings {
    /// How many succeeded items of a run are kept one by one (the first ones reported); the rest are only
    /// counted. Failed and skipped items are always all kept.
    pub keep_succeeded: u64,
}

impl Default for ItemSettings {
    fn default() -> Self {
        Self { keep_succeeded: 100 }
    }
}

/// What is wrong with the `[items]` settings, each with its full key.
pub fn item_problems(settings: &ItemSettings) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if settings.keep_succeeded > MAX_KEEP_SUCCEEDED {
        problems.push(("items.keep_succeeded", format!("must be at most {MAX_KEEP_SUCCEEDED}")));
    }
    problems
}
