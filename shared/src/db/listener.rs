//! A PostgreSQL connection that both hears the queue's notifications and claims. PostgreSQL has just woken the
//! backend of this connection to deliver a request's notification, so a claim sent on it right away is served by
//! a process that is already running instead of one that has slept since the previous claim; on a small VM that
//! second wake-up is a measurable part of request → claimed.

use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use uuid::Uuid;

use super::{Result, Run, in_request_order, postgres};

/// A listening connection (see the module documentation). It does not reconnect by itself: when its connection
/// is lost, `recv` says so once and the owner opens a new one, knowing that notifications were missed meanwhile.
pub struct QueueListener {
    inner: PgListener,
}

impl QueueListener {
    pub(super) async fn connect(pool: &PgPool, channel: &str) -> Result<Self> {
        let mut inner = PgListener::connect_with(pool).await?;
        // A connection lost mid-claim must surface as an error, not be replaced behind the owner's back (the
        // listener would then be listening again without anyone knowing that notifications were lost).
        inner.eager_reconnect(false);
        inner.listen(channel).await?;
        Ok(Self { inner })
    }

    /// The next notification's payload; `None` when the connection was lost (and notifications with it).
    /// Cancel-safe: a notification only half read stays in the connection's buffer.
    pub async fn recv(&mut self) -> Result<Option<String>> {
        Ok(self.inner.try_recv().await?.map(|n| n.payload().to_owned()))
    }

    /// The same claim as `Database::claim_runs`, on this connection.
    pub async fn claim_runs(
        &mut self,
        daemon: Uuid,
        lease: Duration,
        limit: u32,
        workers: Option<&[String]>,
    ) -> Result<Vec<Run>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        Ok(in_request_order(postgres::claim_runs(&mut self.inner, daemon, lease, limit, workers).await?))
    }
}
