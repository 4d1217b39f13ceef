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
