//! Persisted overrides of a worker's configuration and their append-only audit trail.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Named, OverrideValues, named};

/// A worker's persisted override.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Override {
    /// The worker.
    pub worker: String,
    /// The overridden values.
    #[cfg_attr(feature = "sqlx", sqlx(flatten))]
    pub values: OverrideValues,
    /// Who last changed it.
    pub updated_by: String,
    /// When.
    pub updated_at: DateTime<Utc>,
}

/// What a change of an override did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OverrideAction {
    /// The override was set (created or changed).
    Set,
    /// The override was removed: the defaults apply again.
    Clear,
}

impl Named for OverrideAction {
    const ALL: &'static [Self] = &[Self::Set, Self::Clear];
    const NOUN: &'static str = "an override action";
    const PLURAL: &'static str = "the override actions";

    fn name(self) -> &'static str {
        match self {
            Self::Set => "set",
            Self::Clear => "clear",
        }
    }
}
named!(OverrideAction);

/// One entry of the append-only audit trail of overrides.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Its position.
    pub id: i64,
    /// The worker.
    pub worker: String,
    /// Who.
    pub actor: String,
    /// When.
    pub at: DateTime<Utc>,
    /// `set` or `clear`.
    pub action: OverrideAction,
    /// The override before (absent: none).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub before: Option<OverrideValues>,
    /// The override after (absent: none).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub after: Option<OverrideValues>,
    /// Why.
    pub reason: String,
}
