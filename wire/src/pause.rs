//! A paused worker: no run is requested for it (not by its schedules, its retries, its pipelines' steps or a
//! person's Run) until an operator resumes it. A worker pauses by hand, or by itself after
//! `pause_after_failures` runs in a row failed; every pause and resume is kept in an append-only history.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Named, named};

/// Who pauses a worker by itself (the actor of an automatic pause).
pub const AUTOMATIC_ACTOR: &str = "scrinalia";

/// The pause of a worker, while it lasts (the worker view's `paused`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerPause {
    /// When it was paused (database clock).
    pub at: DateTime<Utc>,
    /// Who paused it (`scrinalia` for an automatic pause).
    pub by: String,
    /// Why, as a sentence.
    pub reason: String,
    /// Whether it paused by itself after `pause_after_failures` failed runs in a row.
    pub automatic: bool,
}

/// What an entry of a worker's pause history did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PauseAction {
    /// The worker was paused.
    Pause,
    /// The worker was resumed.
    Resume,
}

impl Named for PauseAction {
    const ALL: &'static [Self] = &[Self::Pause, Self::Resume];
    const NOUN: &'static str = "a pause action";
    const PLURAL: &'static str = "the pause actions";

    fn name(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
        }
    }
}
named!(PauseAction);

/// One entry of a worker's pause history.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PauseEntry {
    /// Its position.
    pub id: i64,
    /// The worker.
    pub worker: String,
    /// `pause` or `resume`.
    pub action: PauseAction,
    /// Who (`scrinalia` for an automatic pause).
    pub actor: String,
    /// When (database clock).
    pub at: DateTime<Utc>,
    /// Why.
    pub reason: String,
    /// Whether it was an automatic pause.
    pub automatic: bool,
}

/// `GET /api/workers/{name}/pauses`: whether the worker is paused now, and its pause history, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PauseView {
    /// The worker.
    pub worker: String,
    /// Its pause, while it is paused.
    pub paused: Option<WorkerPause>,
    /// Every pause and resume, newest first.
    pub history: Vec<PauseEntry>,
}
