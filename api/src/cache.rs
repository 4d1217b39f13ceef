//! A value measured at most once every few seconds however often it is asked for: `/metrics` (five queries a
//! scrape) and the run-log store's health probe (a write, a read and a delete). Callers that arrive while it is
//! being measured wait for that measurement rather than start their own.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// The last value and when it was measured.
#[derive(Debug)]
pub struct Cached<T> {
    fresh_for: Duration,
    last: Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Cached<T> {
    /// A value reused for `fresh_for` after it is measured.
    pub fn new(fresh_for: Duration) -> Self {
        Self { fresh_for, last: Mutex::new(None) }
    }

    /// The value measured less than `fresh_for` ago, else `measure`'s (kept only when it succeeds).
    pub async fn get<E>(&self, measure: impl Future<Output = Result<T, E>>) -> Result<T, E> {
        let mut last = self.last.lock().await;
        if let Some((at, value)) = last.as_ref()
            && at.elapsed() < self.fresh_for
        {
            return Ok(value.clone());
        }
        let value = measure.await?;
        *last = Some((Instant::now(), value.clone()));
        Ok(value)
    }
}
