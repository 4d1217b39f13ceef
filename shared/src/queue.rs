//! Queue measurements: what each worker's `count-pending` last answered, stored by a daemon and read by the
//! API (which never counts).

use crate::{DbError, QueueCount, Store, db};

pub use crate::db::queue_counts::NewQueueCount;

impl Store {
    /// Stores a queue measurement (replacing the previous one).
    pub(crate) async fn store_queue_count(&self, count: &NewQueueCount) -> Result<(), DbError> {
        let _own = self.db.own_write();
        db::queue_counts::store(&self.db, count).await
    }

    /// Every worker's last queue measurement, with its age on the database clock.
    pub(crate) async fn queue_counts(&self) -> Result<Vec<QueueCount>, DbError> {
        self.db.retrying(|| db::queue_counts::list(&self.db)).await
    }

    /// For each running run, its worker and the seconds (database clock) since its last progress report, or
    /// since it started when it has reported none.
    pub(crate) async fn progress_ages(&self) -> Result<Vec<(String, f64)>, DbError> {
        let ages = self.db.retrying(|| db::queue_counts::progress_ages(&self.db)).await?;
        Ok(ages.into_iter().map(|(worker, age)| (worker, age.unwrap_or(0.0).max(0.0))).collect())
    }
}
