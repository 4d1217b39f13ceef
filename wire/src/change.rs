//! Changes of the database that other processes hear about: the payloads of the PostgreSQL notifications, of
//! the SQLite change feed, and of the API's live events (`GET /api/events`, where the event's name is its
//! `kind`). This enum is their one definition: the migrations' triggers write exactly these objects (a test
//! decodes every one of them), and the API re-serialises what it decoded, so both backends send the same text.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{ChoreKind, DaemonState, OverrideAction, PipelineState, RunState};

/// One change, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A run was requested (daemons claim it).
    Requested {
        /// The run.
        run: Uuid,
        /// Its worker.
        worker: String,
    },
    /// Someone asked to cancel a running run (its daemon stops it).
    Cancel {
        /// The run.
        run: Uuid,
        /// Its worker.
        worker: String,
        /// The daemon running it.
        daemon: Option<Uuid>,
    },
    /// A run changed: its state, progress or lease.
    Run {
        /// The run.
        run: Uuid,
        /// Its worker.
        worker: String,
        /// Its state now.
        state: RunState,
    },
    /// A worker's queue was measured again.
    Queue {
        /// The worker.
        worker: String,
    },
    /// A daemon started, changed state or was asked to drain.
    Daemon {
        /// The daemon.
        daemon: Uuid,
        /// Its state now.
        state: DaemonState,
    },
    /// An operator set or cleared a worker's override.
    Override {
        /// The worker.
        worker: String,
        /// Who changed it.
        actor: String,
        /// `set` or `clear`.
        action: OverrideAction,
    },
    /// What a worker's `describe` or `check` answered was stored again.
    Worker {
        /// The worker.
        worker: String,
    },
    /// Someone asked for a worker's chore (a count after a run ended, a describe or count asked for by an
    /// operator): the daemons that take the worker look for chores to do.
    Chore {
        /// The worker.
        worker: String,
        /// The chore.
        chore: ChoreKind,
    },
    /// A run ended (daemons start what waited for its worker: a schedule's queued fire, a pipeline's step).
    Ended {
        /// The run.
        run: Uuid,
        /// Its worker.
        worker: String,
    },
    /// A schedule was created, changed, paused, resumed, deleted or fired.
    Schedule {
        /// The schedule.
        schedule: Uuid,
    },
    /// A pipeline run started, moved to another step or ended.
    Pipeline {
        /// The pipeline run.
        pipeline_run: Uuid,
        /// The pipeline.
        pipeline: String,
        /// Its state now.
        state: PipelineState,
    },
    /// Changes may have been missed (a reconnection, a client that fell behind): read everything again.
    Resync {
        /// Why, for people.
        reason: String,
    },
    /// SQLite, to daemons: another connection wrote the database and a queued request or a cancellation may be
    /// there (SQLite cannot say which change it was).
    Written,
    /// The service tokens changed (one was created, revoked or deleted): API processes re-read them. Not a
    /// panel's event: the API keeps it to itself.
    Tokens,
    /// A bulk action was stored (daemons take it and work through its runs).
    Bulk {
        /// The bulk action.
        bulk: Uuid,
    },
}

impl Change {
    /// The kinds a panel hears on `GET /api/events` (besides `ready`, which opens every stream), in the order
    /// the API's documentation lists them.
    pub const PANEL_KINDS: [&'static str; 8] =
        ["run", "queue", "worker", "daemon", "override", "schedule", "pipeline", "resync"];

    /// The kind: the `kind` field of the payload and the name of the live event.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Requested { .. } => "requested",
            Self::Cancel { .. } => "cancel",
            Self::Run { .. } => "run",
            Self::Queue { .. } => "queue",
            Self::Daemon { .. } => "daemon",
            Self::Override { .. } => "override",
            Self::Worker { .. } => "worker",
            Self::Chore { .. } => "chore",
            Self::Ended { .. } => "ended",
            Self::Schedule { .. } => "schedule",
            Self::Pipeline { .. } => "pipeline",
            Self::Resync { .. } => "resync",
            Self::Written => "written",
            Self::Tokens => "tokens",
            Self::Bulk { .. } => "bulk",
        }
    }

    /// A resync with `reason`.
    pub fn resync(reason: impl Into<String>) -> Self {
        Self::Resync { reason: reason.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_the_tag_of_the_payload() {
        let run = Uuid::nil();
        let changes = [
            Change::Requested { run, worker: "w".into() },
            Change::Cancel { run, worker: "w".into(), daemon: None },
            Change::Run { run, worker: "w".into(), state: RunState::Running },
            Change::Queue { worker: "w".into() },
            Change::Daemon { daemon: run, state: DaemonState::Draining },
            Change::Override { worker: "w".into(), actor: "ada".into(), action: OverrideAction::Clear },
            Change::Worker { worker: "w".into() },
            Change::Chore { worker: "w".into(), chore: ChoreKind::Count },
            Change::Ended { run, worker: "w".into() },
            Change::Schedule { schedule: run },
            Change::Pipeline { pipeline_run: run, pipeline: "p".into(), state: PipelineState::Running },
            Change::resync("reconnected"),
            Change::Written,
            Change::Tokens,
            Change::Bulk { bulk: run },
        ];
        for change in changes {
            let json = serde_json::to_value(&change).expect("json");
            assert_eq!(json["kind"], change.kind(), "{json}");
            assert_eq!(serde_json::from_value::<Change>(json).expect("parses back"), change);
        }
    }
}
