//! A rerun of a run's failures: an ordinary run, linked to the run it reruns, whose scope (the items that run
//! reported failed) is stored in the transaction that requests it, so that no such run can ever start without
//! its scope and process everything.

use uuid::Uuid;

use super::{Refused, RequestError, follow::FollowError};
use crate::{DbError, Run, Store, db};

impl Store {
    /// Whether `original` has failures to rerun, and its worker said it takes a scope.
    pub(super) async fn check_scope(&self, original: &Run) -> Result<(), FollowError> {
        let (failed, described) =
            tokio::try_join!(db::quarantine::failed_items(&self.db, original.id), self.description(&original.worker))?;
        if failed == 0 {
            return Err(FollowError::NoFailures(original.id));
        }
        let description = described.and_then(|d| d.description);
        let scope = description.as_ref().and_then(|d| d.capabilities).is_some_and(|c| c.scope);
        if !scope {
            let why = match description {
                None => "has not described itself yet, so it is not known to take a scope",
                Some(_) => "does not take a scope (its describe does not declare the capability scope)",
            };
            return Err(FollowError::NoScope(format!(
                "Worker {} {why}; rerun the whole run instead, or give its execute an `only` parameter.",
                original.worker
            )));
        }
        Ok(())
    }

    /// Inserts `new`, scoped to the items run `of` reported failed, in one transaction; refused as a plain
    /// request is (its worker has a run in flight). Never through the plain insert: that would queue the run
    /// without its scope.
    pub(super) async fn insert_scoped(
        &self,
        new: &db::runs::NewRun<'_>,
        of: Uuid,
    ) -> Result<Result<Run, Refused>, DbError> {
        for _ in 0..3 {
            let mut tx = self.db.begin_write().await?;
            if let Some(run) = super::shards::insert(&mut tx, new).await? {
                db::quarantine::store_scope(&mut tx, run.id, of).await?;
                tx.commit().await?;
                return Ok(Ok(run));
            }
            tx.rollback().await?;
            if let Some(blocking) = db::runs::in_flight_of(&self.db, new.worker).await? {
                return Ok(Err(Refused::Blocked(RequestError::in_flight(blocking))));
            }
            if let Some(paused) = self.paused_refusal(new.worker).await? {
                return Ok(Err(Refused::Blocked(paused)));
            }
        }
        Err(DbError::Unexpected("the in-flight run kept changing during the insert".into()))
    }
}
