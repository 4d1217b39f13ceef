//! Waiting for a condition that another process brings about, by polling it.

use std::time::Duration;

/// Polls `check` every 20 ms until it returns `Some`, or panics with `what` after `timeout` (for tests).
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let checked = try_eventually(timeout, what, || {
        let next = check();
        async move { Ok(next.await) }
    });
    checked.await.unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `check` every 20 ms until it returns `Some` or fails, or fails with `what` after `timeout`.
pub async fn try_eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
