//! The daemon registry, the domain: a daemon registers with a fresh id at every start, keeps its row alive with
//! heartbeats, is asked to drain through it, and is gone once it stops or falls silent for longer than
//! `daemon.gone_after_seconds` (by the database clock, which every read applies).

use std::time::Duration;

use uuid::Uuid;

use crate::{Daemon, DbError, Store, db};

pub use crate::db::daemons::NewDaemon;

/// Why a drain was refused.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// There is no daemon with this id.
    #[error("There is no daemon {0}.")]
    Unknown(Uuid),
    /// The daemon is gone: there is nothing to drain.
    #[error("Daemon {0} is gone; there is nothing to drain.")]
    Gone(Uuid),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

impl Store {
    /// Registers a daemon.
    pub(crate) async fn register_daemon(&self, daemon: &NewDaemon) -> Result<Daemon, DbError> {
        db::daemons::register(&self.db, daemon).await
    }

    /// Records a heartbeat; returns the daemon's row as stored (`state` says whether it was asked to drain), or
    /// `None` if the row is gone.
    pub(crate) async fn heartbeat(&self, daemon: Uuid) -> Result<Option<Daemon>, DbError> {
        let _own = self.db.own_write();
        db::daemons::heartbeat(&self.db, daemon).await
    }

    /// Asks a daemon that is not gone (`gone_after` being the registry's silence limit) to drain: it finishes its
    /// runs and claims no more. Asking twice keeps the first request's time and actor.
    pub(crate) async fn request_drain(
        &self,
        daemon: Uuid,
        actor: &str,
        gone_after: Duration,
    ) -> Result<Daemon, DrainError> {
        if let Some(draining) =
            self.db.retrying(|| db::daemons::request_drain(&self.db, daemon, actor, gone_after)).await?
        {
            return Ok(draining);
        }
        match self.get_daemon(daemon, gone_after).await? {
            Some(_) => Err(DrainError::Gone(daemon)),
            None => Err(DrainError::Unknown(daemon)),
        }
    }

    /// Records that a daemon stopped cleanly.
    pub(crate) async fn mark_daemon_stopped(&self, daemon: Uuid) -> Result<(), DbError> {
        db::daemons::mark_stopped(&self.db, daemon).await
    }

    /// Marks gone every daemon whose heartbeat is older than `after`; returns their ids.
    pub(crate) async fn mark_gone_daemons(&self, after: Duration) -> Result<Vec<Uuid>, DbError> {
        db::daemons::mark_gone(&self.db, after).await
    }

    /// Daemons that are alive, or stopped within the last day, newest first, each with its state as of the
    /// database clock (`gone` past `gone_after` without a heartbeat).
    pub(crate) async fn list_daemons(&self, gone_after: Duration) -> Result<Vec<Daemon>, DbError> {
        self.db.retrying(|| db::daemons::list(&self.db, gone_after)).await
    }

    /// One daemon, with its state as of the database clock.
    pub(crate) async fn get_daemon(&self, id: Uuid, gone_after: Duration) -> Result<Option<Daemon>, DbError> {
        self.db.retrying(|| db::daemons::get(&self.db, id, gone_after)).await
    }
}
