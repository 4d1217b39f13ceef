//! Overrides, the domain: a partial change of a worker's persisted override (for each field, absent keeps it,
//! `null` clears it, a value sets it), validated by the same rules as a run's arguments under the row's lock and
//! recorded with its reason in the append-only audit trail; and what the worker then resolves to.

use scrinalia_wire::{Reason, ReasonError};

use crate::{
    AuditEntry, Catalogue, Database, DbError, EffectiveWorker, ExplicitArgs, Override, OverrideAction, OverrideValues,
    ResolveError, ResolvedConfig, Store, db, resolve, resolve::check_override,
};

pub use scrinalia_wire::OverrideChange;

/// What a reason is for, in the sentence of a missing one.
const OVERRIDE: &str = "the override";

/// Why an override change was refused.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// The catalogue has no such worker.
    #[error("There is no worker {worker:?}.")]
    UnknownWorker {
        /// The name given.
        worker: String,
    },
    /// No reason, or one that cannot be kept.
    #[error(transparent)]
    Reason(#[from] ReasonError),
    /// The values do not fit the worker.
    #[error("{0}")]
    Invalid(ResolveError),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// A worker's override after a change, and what a run without arguments resolves to now.
#[derive(Debug, Clone)]
pub struct OverrideState {
    /// The stored override; `None` when there is none.
    pub stored: Option<Override>,
    /// The configuration a run without arguments uses, or why it cannot be resolved.
    pub effective: Result<ResolvedConfig, ResolveError>,
}

impl OverrideState {
    /// The state of `worker` with `stored` as its override.
    pub fn of(worker: &EffectiveWorker, stored: Option<Override>) -> Self {
        let effective = resolve(worker, &ExplicitArgs::default(), stored.as_ref().map(|o| &o.values));
        Self { stored, effective }
    }
}

/// Replaces `worker`'s override with what `next` makes of the current one (an empty result removes it) and
/// appends the change to the audit trail, in one transaction under the override's lock, so that two concurrent
/// partial changes do not lose each other. `next` may refuse, and then nothing is written.
async fn replace(
    db: &Database,
    worker: &str,
    actor: &str,
    reason: &str,
    next: impl Fn(Option<&OverrideValues>) -> Result<OverrideValues, ResolveError>,
) -> Result<Option<Override>, OverrideError> {
    let mut tx = db.begin_write().await?;
    tx.lock(&format!("override.{worker}")).await?;
    let before = db::overrides::get(&mut tx, worker).await?.map(|o| o.values);
    let after = next(before.as_ref()).map_err(OverrideError::Invalid)?;
    let stored = if after.is_empty() {
        db::overrides::delete(&mut tx, worker).await?;
        None
    } else {
        Some(db::overrides::upsert(&mut tx, worker, &after, actor).await?)
    };
    let action = if stored.is_some() { OverrideAction::Set } else { OverrideAction::Clear };
    let entry = db::overrides::NewAuditEntry {
        worker,
        actor,
        action,
        before: before.as_ref(),
        after: stored.as_ref().map(|o| &o.values),
        reason,
    };
    db::overrides::audit(&mut tx, &entry).await?;
    tx.commit().await?;
    Ok(stored)
}

impl Store {
    /// Applies `change` to `worker`'s override as `actor`, under the override's lock (so two concurrent partial
    /// changes do not lose each other), checked by the same rules as a run's arguments, and appends it to the
    /// audit trail. A change that leaves nothing set removes the override.
    pub(crate) async fn change_override(
        &self,
        catalogue: &Catalogue,
        worker: &str,
        actor: &str,
        change: &OverrideChange,
    ) -> Result<OverrideState, OverrideError> {
        let reason = Reason::new(change.reason.as_deref(), OVERRIDE)?;
        let spec = self.effective_worker(catalogue, worker).await?;
        let spec = spec.ok_or_else(|| OverrideError::UnknownWorker { worker: worker.to_owned() })?;
        let next = |current: Option<&OverrideValues>| {
            let next = change.apply(current);
            check_override(&spec, &next).map(|()| next)
        };
        let stored = replace(&self.db, spec.name(), actor, &reason, next).await?;
        Ok(OverrideState::of(&spec, stored))
    }

    /// Removes `worker`'s override as `actor`, for `reason`; the change is audited even when there was none.
    pub(crate) async fn clear_override(
        &self,
        catalogue: &Catalogue,
        worker: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<OverrideState, OverrideError> {
        let reason = Reason::new(reason, OVERRIDE)?;
        let spec = self.effective_worker(catalogue, worker).await?;
        let spec = spec.ok_or_else(|| OverrideError::UnknownWorker { worker: worker.to_owned() })?;
        let clear = |_: Option<&OverrideValues>| Ok::<_, ResolveError>(OverrideValues::default());
        let stored = replace(&self.db, spec.name(), actor, &reason, clear).await?;
        Ok(OverrideState::of(&spec, stored))
    }

    /// One worker's override.
    pub(crate) async fn get_override(&self, worker: &str) -> Result<Option<Override>, DbError> {
        self.db.retrying(|| db::overrides::get(&self.db, worker)).await
    }

    /// Every override.
    pub(crate) async fn list_overrides(&self) -> Result<Vec<Override>, DbError> {
        self.db.retrying(|| db::overrides::list(&self.db)).await
    }

    /// A worker's audit trail, newest first (at most `limit` entries, 1 to 1000).
    pub(crate) async fn audit_trail(&self, worker: &str, limit: u32) -> Result<Vec<AuditEntry>, DbError> {
        self.db.retrying(|| db::overrides::audit_trail(&self.db, worker, limit.clamp(1, 1000))).await
    }
}
