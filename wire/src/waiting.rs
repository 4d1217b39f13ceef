//! Why a queued run has not started, or why a pipeline's step has not been requested: one reason, computed when
//! it is read from the same rows a claim looks at, with a code for programs and a sentence for people.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What holds a queued run back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WaitCode {
    /// Not before a time: a retry's backoff.
    NotBefore,
    /// No daemon is alive.
    NoDaemon,
    /// Every live daemon is draining.
    AllDraining,
    /// No live daemon can take this worker (its labels, or the workers it takes).
    NoCapableDaemon,
    /// Every daemon that could take it runs as many runs as it may.
    CapableDaemonsFull,
    /// A resource the worker holds is at capacity.
    ResourceFull,
    /// A resource the worker holds allows so many starts a minute, all used: `until` says when the next may.
    RateLimited,
    /// It was not claimed by its expiry (`until`): a daemon ends it `cancelled` (`expired`) at its next look.
    Expired,
    /// A pipeline's step is not requested yet: its worker has a run in flight (named in `runs`), or the daemons'
    /// next settling pass requests it.
    PipelineStep,
    /// Nothing holds it back: a daemon should claim it within moments.
    Claimable,
}

/// Why a queued run (or a pipeline's step) waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Waiting {
    /// What holds it back.
    pub code: WaitCode,
    /// The same, as a sentence.
    pub message: String,
    /// Until when, for `not_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// The daemons the reason is about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemons: Vec<Uuid>,
    /// The runs the reason is about (those holding the capacity or the resource).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<Uuid>,
}
