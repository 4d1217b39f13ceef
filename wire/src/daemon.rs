//! The daemon registry as the API reports it: each daemon's row, with its state and heartbeat age measured on
//! the database clock.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Named, named};

/// A daemon's state in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DaemonState {
    /// Claiming and running.
    Active,
    /// Finishing its runs, claiming nothing.
    Draining,
    /// Stopped, or its heartbeat is too old.
    Gone,
}

impl Named for DaemonState {
    const ALL: &'static [Self] = &[Self::Active, Self::Draining, Self::Gone];
    const NOUN: &'static str = "a daemon state";
    const PLURAL: &'static str = "the daemon states";

    fn name(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Draining => "draining",
            Self::Gone => "gone",
        }
    }
}
named!(DaemonState);

/// A daemon of the registry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Daemon {
    /// A fresh id at every start.
    pub id: Uuid,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// Its version.
    pub version: String,
    /// How many runs it takes at once.
    pub capacity: i32,
    /// Which workers it takes; empty means all.
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub workers: Vec<String>,
    /// What it advertises (its host name included): it takes only workers whose labels it has.
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub labels: Vec<String>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// Seconds since its last heartbeat (database clock).
    pub heartbeat_age_seconds: f64,
    /// How many runs it holds now.
    pub runs_in_flight: i64,
    /// `active`, `draining` or `gone`; a daemon whose heartbeat is older than `daemon.gone_after_seconds` is
    /// `gone` even before a daemon has marked it so.
    pub state: DaemonState,
    /// When someone asked it to drain.
    pub drain_requested_at: Option<DateTime<Utc>>,
    /// Who asked it to drain.
    pub drain_requested_by: Option<String>,
    /// When it stopped (or was found gone).
    pub stopped_at: Option<DateTime<Utc>>,
    /// What it can enforce of the workers' limits.
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub limits: DaemonLimits,
    /// Its capacity of each daemon-scoped resource (`daemon.resources`, e.g. `{"gpu": 1}`).
    #[serde(default)]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    pub resources: std::collections::BTreeMap<String, u32>,
}

/// What a daemon can enforce of the workers' limits (`memory_max`, `cpu_max`) on its host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DaemonLimits {
    /// The cores its runs may use: a `cpu_max` above them is clamped to them.
    #[serde(default)]
    pub cores: f64,
    /// Each limit it cannot enforce, with the reason.
    #[serde(default)]
    pub unenforced: std::collections::BTreeMap<String, String>,
}

/// `GET /api/daemons`: every daemon alive or stopped within the last day.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DaemonsView {
    /// Newest first.
    pub daemons: Vec<Daemon>,
}
