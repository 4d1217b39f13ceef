//! Items: what happened to each document of a run, as the API shows it (docs/worker-protocol.md, "Items").

use serde::{Deserialize, Serialize};

/// One of a run's items: a document's id, its outcome, and for a failure or a skip its class and error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunItem {
    /// The document's id, as the worker named it.
    #[cfg_attr(feature = "sqlx", sqlx(rename = "item_id"))]
    pub id: String,
    /// `succeeded`, `failed` or `skipped`.
    pub outcome: String,
    /// A short machine word for the kind of failure (`ocr_empty`), when the worker gave one.
    #[serde(default)]
    pub class: Option<String>,
    /// A sentence saying what went wrong (at most 2,048 bytes; a longer one is cut and ends with "…").
    #[serde(default)]
    pub error: Option<String>,
}

/// How many item lines of a run had one outcome and class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemCount {
    /// `succeeded`, `failed` or `skipped`; `refused` for malformed item lines (the class is then the reason);
    /// `cut` for errors kept cut.
    pub outcome: String,
    /// The class; empty when none was given.
    pub class: String,
    /// How many lines.
    pub count: i64,
}

/// A run's items in figures (`GET /api/runs/{id}`), when its worker reported any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemSummary {
    /// Item lines reported `succeeded`.
    pub succeeded: i64,
    /// Item lines reported `failed`.
    pub failed: i64,
    /// Item lines reported `skipped`.
    pub skipped: i64,
    /// Malformed item lines, which were refused and are only counted.
    pub refused: i64,
    /// Errors kept cut to 2,048 bytes.
    pub cut: i64,
    /// Every count by outcome and class (refusals by reason), largest first.
    pub classes: Vec<ItemCount>,
    /// The failed and skipped items of the run's resume chain, when the run resumes earlier runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainItems>,
}

/// The failed and skipped items of a resume chain (a run and the runs it resumes, transitively), each id counted
/// once: a resumed run may report again what its predecessor reported after its last checkpoint, and never
/// sees what its predecessor failed before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChainItems {
    /// How many runs the chain has (at least 2).
    pub runs: i64,
    /// Distinct item ids reported `failed` by a run of the chain: what a rerun of the failures is given.
    pub failed: i64,
    /// Distinct item ids reported `skipped` by a run of the chain.
    pub skipped: i64,
    /// The same by outcome and class (an id's latest class), largest first.
    pub classes: Vec<ItemCount>,
}

impl ChainItems {
    /// The chain's figures from its counts; `None` for a chain of one run (the run's own figures say it all).
    pub fn of(runs: i64, counts: Vec<ItemCount>) -> Option<Self> {
        if runs < 2 {
            return None;
        }
        let sum = |outcome: &str| counts.iter().filter(|c| c.outcome == outcome).map(|c| c.count).sum();
        let (failed, skipped) = (sum("failed"), sum("skipped"));
        let mut classes = counts;
        classes.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| (&a.outcome, &a.class).cmp(&(&b.outcome, &b.class))));
        Some(Self { runs, failed, skipped, classes })
    }
}

impl ItemSummary {
    /// The summary of a run's counts; `None` when it has none.
    pub fn of(counts: Vec<ItemCount>) -> Option<Self> {
        if counts.is_empty() {
            return None;
        }
        let mut summary = Self::default();
        for count in &counts {
            match count.outcome.as_str() {
                "succeeded" => summary.succeeded += count.count,
                "failed" => summary.failed += count.count,
                "skipped" => summary.skipped += count.count,
                "refused" => summary.refused += count.count,
                "cut" => summary.cut += count.count,
                _ => {}
            }
        }
        summary.classes = counts.into_iter().filter(|c| c.outcome != "cut").collect();
        summary
            .classes
            .sort_by(|a, b| b.count.cmp(&a.count).then_with(|| (&a.outcome, &a.class).cmp(&(&b.outcome, &b.class))));
        Some(summary)
    }
}

/// `GET /api/runs/{id}/items`: one page of a run's items, in id order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemPage {
    /// The items of the page.
    pub items: Vec<RunItem>,
    /// The `after` that reads the next page, when there may be one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// One of the last errors of a quarantined item: the run that reported it, its class and its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemError {
    /// The run that reported the failure.
    pub run_id: uuid::Uuid,
    /// Its class, when given.
    #[serde(default)]
    pub class: Option<String>,
    /// Its error, when given.
    #[serde(default)]
    pub error: Option<String>,
}

/// An item of a worker that failed in `quarantine_after` runs in a row: later runs are given it to skip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuarantinedItem {
    /// The document's id.
    pub id: String,
    /// In how many runs in a row it failed.
    pub failures: i64,
    /// When it last failed.
    pub last_failed_at: chrono::DateTime<chrono::Utc>,
    /// Its last three errors, newest first.
    pub errors: Vec<ItemError>,
}

/// A release from quarantine: one item, or all of a worker's (`item` absent), who released how many and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuarantineRelease {
    /// The worker.
    pub worker: String,
    /// The item released; absent when every quarantined item was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// How many items were released.
    pub released: i64,
    /// Who released them.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// `GET /api/workers/{name}/quarantine`: a worker's quarantined items and the releases of its quarantine.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuarantineView {
    /// The worker.
    pub worker: String,
    /// After how many failing runs in a row an item is quarantined; absent when the worker has no quarantine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_after: Option<u32>,
    /// How many items are quarantined.
    pub quarantined: i64,
    /// The quarantined items (at most 500), in id order.
    pub items: Vec<QuarantinedItem>,
    /// The last releases, newest first.
    pub releases: Vec<QuarantineRelease>,
}

/// `POST /api/workers/{name}/quarantine/release`: release one item (`item`) or all of them, with a reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseBody {
    /// The item to release; every quarantined item of the worker when absent.
    #[serde(default)]
    pub item: Option<String>,
    /// Why (required): kept in the audit trail.
    #[serde(default)]
    pub reason: Option<String>,
}
