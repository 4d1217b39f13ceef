//! Queue measurements: what each worker's `count-pending` last answered, stored by a daemon and read by the
//! API (which never counts).

use uuid::Uuid;

use crate::{
    Database, DbError, QueueCount,
    db::{self, retrying},
};

/// A new queue measurement.
#[derive(Debug, Clone)]
pub struct NewQueueCount {
    /// The worker.
    pub worker: String,
    /// Units waiting.
    pub pending: Option<i64>,
    /// Why it cannot be measured.
    pub unmeasurable: Option<String>,
    /// Units done.
    pub done: Option<i64>,
    /// Why the measurement failed.
    pub error: Option<String>,
    /// How long it took.
    pub took_ms: i64,
    /// The measuring daemon.
    pub measured_by: Uuid,
}

impl Database {
    /// Stores a queue measurement (replacing the previous one).
    pub async fn store_queue_count(&self, count: &NewQueueCount) -> Result<(), DbError> {
        let _own = self.own_writes().begin();
        db::queue_counts::store(self, count).await
    }

    /// Every worker's last queue measurement, with its age on the database clock.
    pub async fn queue_counts(&self) -> Result<Vec<QueueCount>, DbError> {
        retrying!(self, db::queue_counts::list(self).await)
    }

    /// For each running run, its worker and the seconds (database clock) since its last progress report, or
    /// since it started when it has reported none.
    pub async fn progress_ages(&self) -> Result<Vec<(String, f64)>, DbError> {
        let ages = retrying!(self, db::queue_counts::progress_ages(self).await)?;
        Ok(ages.into_iter().map(|(worker, age)| (worker, age.unwrap_or(0.0).max(0.0))).collect())
    }
}
