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

/// What the live daemons that take `worker` say of its limits: a sentence for each host that does not enforce a
/// limit the worker has (its runs go on there without it), or that clamps its `cpu_max` to fewer cores. Each
/// host is named once, however many daemons it runs.
pub fn limit_notes(worker: &str, memory_max: bool, cpu_max: Option<f64>, daemons: &[Daemon]) -> Vec<String> {
    let mut notes = std::collections::BTreeSet::new();
    let takes = |d: &&Daemon| {
        d.state != crate::DaemonState::Gone && (d.workers.is_empty() || d.workers.iter().any(|w| w == worker))
    };
    for daemon in daemons.iter().filter(takes) {
        let host = &daemon.host;
        let unenforced = &daemon.limits.unenforced;
        if memory_max && let Some(why) = unenforced.get("memory_max") {
            notes.insert(format!("memory_max not enforced on host {host}: {why}"));
        }
        match (cpu_max, unenforced.get("cpu_max")) {
            (Some(_), Some(why)) => {
                notes.insert(format!("cpu_max not enforced on host {host}: {why}"));
            }
            (Some(cores), None) if daemon.limits.cores > 0.0 && cores > daemon.limits.cores => {
                notes.insert(format!("cpu_max {cores} clamped to the {} cores of host {host}", daemon.limits.cores));
            }
            _ => {}
        }
    }
    notes.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn daemon(host: &str, workers: &[&str], limits: serde_json::Value, state: &str) -> Daemon {
        serde_json::from_value(json!({
            "id": Uuid::now_v7(), "host": host, "pid": 1, "version": "t", "capacity": 1, "workers": workers,
            "started_at": "2030-01-01T00:00:00Z", "heartbeat_at": "2030-01-01T00:00:00Z",
            "heartbeat_age_seconds": 0.0, "runs_in_flight": 0, "state": state, "limits": limits,
        }))
        .expect("a daemon")
    }

    #[test]
    fn each_host_that_does_not_keep_a_limit_is_named_once() {
        let no_cpu = json!({"cores": 2.0, "unenforced": {"cpu_max": "no cpu controller (cgroup v1)"}});
        let keeps = json!({"cores": 2.0, "unenforced": {}});
        let daemons = [
            daemon("gpu-1", &[], no_cpu.clone(), "active"),
            daemon("gpu-1", &[], no_cpu.clone(), "draining"),
            daemon("cpu-1", &[], keeps.clone(), "active"),
            daemon("old", &[], json!({"unenforced": {"memory_max": "no memory controller"}}), "gone"),
            daemon("other", &["embed"], no_cpu, "active"),
        ];
        assert_eq!(
            limit_notes("tags", true, Some(4.0), &daemons),
            [
                "cpu_max 4 clamped to the 2 cores of host cpu-1",
                "cpu_max not enforced on host gpu-1: no cpu controller (cgroup v1)"
            ]
        );
        assert!(limit_notes("tags", true, None, &daemons).is_empty(), "no limit, nothing to say");
        assert!(limit_notes("tags", false, Some(1.0), &daemons[2..]).is_empty(), "kept as asked");
    }
}
