//! Shared resources, the domain: a resource's capacity is the catalogue's until an operator overrides it, with a
//! reason, in an append-only audit trail. The override lives in the database rather than the configuration so
//! that every daemon's next claim uses it at once, without a restart or a reload, and so that who changed it, when
//! and why is kept. Claims read it under the resource's lock (`db::resources::claim_holding`); the views and the
//! "why is this waiting" reasons read it here. A daemon-scoped resource (a GPU) has no such capacity: each daemon
//! gives its own (`daemon.resources`), so it cannot be overridden here, and its view lists the daemons.

use std::{borrow::Cow, time::Duration};

pub use scrinalia_wire::resource::{
    ResourceAudit, ResourceAuditEntry, ResourceChange, ResourceOnDaemon, ResourceSource, ResourceView, ResourcesView,
    SlotHolder,
};

use scrinalia_wire::{Reason, ReasonError};

use crate::{Catalogue, Daemon, DaemonState, Database, DbError, ResourceScope, ResourceSpec, Store, db};

/// The largest capacity an override may set: far above any resource a run holds (a model server, a GPU, an
/// API's rate), so a larger number is a typo rather than a limit.
pub const MAX_CAPACITY: u32 = 10_000;

/// Why a change of a resource's capacity was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// The catalogue declares no such resource.
    #[error("There is no resource {resource:?}; GET /api/resources lists the resources.")]
    UnknownResource {
        /// The name given.
        resource: String,
    },
    /// The resource's capacity is each daemon's own.
    #[error(
        "Resource {resource:?} is daemon-scoped: its capacity is each daemon's daemon.resources, set in that \
         daemon's settings, so there is none to change here."
    )]
    DaemonScoped {
        /// The name given.
        resource: String,
    },
    /// The body did not say `capacity` at all.
    #[error(
        "Say in `capacity` how many runs may hold the resource at once (a whole number from 1 to {MAX_CAPACITY}), \
         or null to follow the catalogue's capacity again."
    )]
    CapacityRequired,
    /// Zero, or more than [`MAX_CAPACITY`].
    #[error("{0}")]
    InvalidCapacity(String),
    /// No reason, or one that cannot be kept.
    #[error(transparent)]
    Reason(#[from] ReasonError),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// `capacity` if an override may set it for `resource`.
fn check_capacity(resource: &str, capacity: u32) -> Result<u32, ResourceError> {
    if capacity == 0 {
        return Err(ResourceError::InvalidCapacity(format!(
            "A capacity of 0 would let no run that holds {resource} start; give at least 1 (to stop new runs, pause \
             their schedules or drain the daemons instead)."
        )));
    }
    if capacity > MAX_CAPACITY {
        return Err(ResourceError::InvalidCapacity(format!(
            "A capacity of {capacity} is more than any resource takes; give at most {MAX_CAPACITY}."
        )));
    }
    Ok(capacity)
}

/// The view of `spec` with its stored override (if any) and its holders.
fn view(
    spec: &ResourceSpec,
    stored: Option<&db::resource_overrides::Stored>,
    holders: &[(String, uuid::Uuid)],
) -> ResourceView {
    let holders = holders.iter().filter(|(r, _)| *r == spec.name).map(|(_, id)| *id).collect();
    let mut view = ResourceView {
        name: spec.name.clone(),
        description: spec.description.clone(),
        catalogue_capacity: spec.capacity,
        capacity: spec.capacity,
        source: ResourceSource::Default,
        updated_by: None,
        updated_at: None,
        holders,
        scope: spec.scope,
        daemons: Vec::new(),
    };
    if spec.scope == ResourceScope::Daemon {
        return view;
    }
    // The column's check keeps a stored capacity at 1 or more, so the conversion only guards against a hand edit.
    if let Some((_, capacity, by, at)) = stored
        && let Ok(capacity) = u32::try_from(*capacity)
    {
        (view.capacity, view.source) = (capacity, ResourceSource::Override);
        (view.updated_by, view.updated_at) = (Some(by.clone()), Some(*at));
    }
    view
}

/// Sets `resource`'s capacity to `capacity` (`None`: removes the override) as `actor`, and appends the change
/// with its `reason` to the audit trail, in one transaction under the resource's lock (the one a claim takes
/// before counting its holders, so a change of capacity and a claim of the resource are serialised). The
/// stored override.
async fn set_capacity(
    db: &Database,
    resource: &str,
    capacity: Option<u32>,
    actor: &str,
    reason: &str,
) -> Result<Option<db::resource_overrides::Stored>, DbError> {
    // The capacity is bounded far below i32::MAX; saturating keeps the column's check the last word.
    let capacity = capacity.map(|c| i32::try_from(c).unwrap_or(i32::MAX));
    let mut tx = db.begin_write().await?;
    tx.lock(&db::resource_overrides::lock_key(resource)).await?;
    let before = db::resource_overrides::capacity(&mut tx, resource).await?;
    let stored = match capacity {
        Some(capacity) => Some(db::resource_overrides::upsert(&mut tx, resource, capacity, actor).await?),
        None => {
            db::resource_overrides::delete(&mut tx, resource).await?;
            None
        }
    };
    db::resource_overrides::audit(&mut tx, resource, actor, (before, capacity), reason).await?;
    tx.commit().await?;
    Ok(stored)
}

impl Store {
    /// Sets the capacity of the catalogue's resource `name` to `capacity` (`None`: back to the catalogue's) as
    /// `actor`, for `reason`, under the resource's lock, and appends the change to the audit trail. The next claim
    /// of the resource counts against it; runs already holding it go on.
    pub(crate) async fn set_resource_capacity(
        &self,
        catalogue: &Catalogue,
        name: &str,
        capacity: Option<u32>,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<ResourceView, ResourceError> {
        let spec =
            catalogue.resource(name).ok_or_else(|| ResourceError::UnknownResource { resource: name.to_owned() })?;
        if spec.scope == ResourceScope::Daemon {
            return Err(ResourceError::DaemonScoped { resource: spec.name.clone() });
        }
        let capacity = capacity.map(|c| check_capacity(&spec.name, c)).transpose()?;
        let reason = Reason::new(reason, "the capacity")?;
        let stored = set_capacity(&self.db, &spec.name, capacity, actor, &reason).await?;
        let holders = self.db.retrying(|| db::resources::holders(&self.db)).await?;
        Ok(view(spec, stored.as_ref(), &holders))
    }

    /// Applies `change`, as an operator sent it, to the resource `name` (see [`Store::set_resource_capacity`]).
    pub(crate) async fn change_resource(
        &self,
        catalogue: &Catalogue,
        name: &str,
        actor: &str,
        change: &ResourceChange,
    ) -> Result<ResourceView, ResourceError> {
        match catalogue.resource(name) {
            None => return Err(ResourceError::UnknownResource { resource: name.to_owned() }),
            Some(spec) if spec.scope == ResourceScope::Daemon => {
                return Err(ResourceError::DaemonScoped { resource: spec.name.clone() });
            }
            Some(_) => {}
        }
        let capacity = change.capacity.ok_or(ResourceError::CapacityRequired)?;
        self.set_resource_capacity(catalogue, name, capacity, actor, change.reason.as_deref()).await
    }

    /// Every catalogue resource, in catalogue order, with its effective capacity, where that comes from and its
    /// holders; a daemon-scoped one with each live daemon (as of `gone_after`) that offers it. The daemons and
    /// their slots are read only when the catalogue has a daemon-scoped resource.
    pub(crate) async fn resources(
        &self,
        catalogue: &Catalogue,
        gone_after: Duration,
    ) -> Result<Vec<ResourceView>, DbError> {
        let stored = async { self.db.retrying(|| db::resource_overrides::list(&self.db)).await };
        let holders = async { self.db.retrying(|| db::resources::holders(&self.db)).await };
        let (stored, holders) = tokio::try_join!(stored, holders)?;
        let per_daemon = catalogue.resources.iter().any(|r| r.scope == ResourceScope::Daemon);
        let (daemons, slots) = if per_daemon {
            let daemons = async { self.db.retrying(|| db::daemons::list(&self.db, gone_after)).await };
            let slots = async { self.db.retrying(|| db::resources::daemon_slots(&self.db)).await };
            tokio::try_join!(daemons, slots)?
        } else {
            Default::default()
        };
        Ok(catalogue
            .resources
            .iter()
            .map(|spec| {
                let mut view = view(spec, stored.iter().find(|s| s.0 == spec.name), &holders);
                if spec.scope == ResourceScope::Daemon {
                    view.daemons = on_daemons(&spec.name, &daemons, &slots);
                    view.capacity = view.daemons.iter().map(|d| d.capacity).sum();
                }
                view
            })
            .collect())
    }

    /// The audit trail of the resource `name`, newest first (at most `limit` entries, 1 to 1000).
    pub(crate) async fn resource_audit(
        &self,
        catalogue: &Catalogue,
        name: &str,
        limit: u32,
    ) -> Result<Vec<ResourceAuditEntry>, ResourceError> {
        let spec =
            catalogue.resource(name).ok_or_else(|| ResourceError::UnknownResource { resource: name.to_owned() })?;
        let limit = limit.clamp(1, 1000);
        Ok(self.db.retrying(|| db::resource_overrides::audit_trail(&self.db, &spec.name, limit)).await?)
    }

    /// `catalogue` with each resource's capacity replaced by its override, for readers that reason about claims
    /// from the catalogue (why a run waits). Borrowed, and nothing is read, when it declares no resource.
    pub(crate) async fn with_effective_capacities<'a>(
        &self,
        catalogue: &'a Catalogue,
    ) -> Result<Cow<'a, Catalogue>, DbError> {
        if catalogue.resources.is_empty() {
            return Ok(Cow::Borrowed(catalogue));
        }
        let stored = self.db.retrying(|| db::resource_overrides::list(&self.db)).await?;
        if stored.is_empty() {
            return Ok(Cow::Borrowed(catalogue));
        }
        let mut effective = catalogue.clone();
        for spec in effective.resources.iter_mut().filter(|r| r.scope == ResourceScope::Global) {
            if let Some(capacity) = stored.iter().find(|s| s.0 == spec.name).and_then(|s| u32::try_from(s.1).ok()) {
                spec.capacity = capacity;
            }
        }
        Ok(Cow::Owned(effective))
    }
}

/// The live daemons that offer the daemon-scoped `resource`, each with its capacity and the holders of its slots
/// (`slots`: (resource, daemon, slot, run)).
fn on_daemons(
    resource: &str,
    daemons: &[Daemon],
    slots: &[(String, uuid::Uuid, u32, uuid::Uuid)],
) -> Vec<ResourceOnDaemon> {
    daemons
        .iter()
        .filter(|d| d.state != DaemonState::Gone)
        .filter_map(|d| {
            let capacity = d.resources.get(resource).copied().filter(|n| *n > 0)?;
            let holders = slots
                .iter()
                .filter(|(r, on, ..)| r == resource && *on == d.id)
                .map(|(.., slot, run)| SlotHolder { slot: *slot, run_id: *run });
            Some(ResourceOnDaemon { daemon: d.id, host: d.host.clone(), capacity, holders: holders.collect() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capacity_is_from_one_to_the_maximum() {
        assert_eq!(check_capacity("gpu", 1).ok(), Some(1));
        assert_eq!(check_capacity("gpu", MAX_CAPACITY).ok(), Some(MAX_CAPACITY));
        let zero = check_capacity("gpu", 0).expect_err("zero").to_string();
        assert!(zero.starts_with("A capacity of 0 would let no run that holds gpu start"), "{zero}");
        let huge = check_capacity("gpu", MAX_CAPACITY + 1).expect_err("too many").to_string();
        assert!(huge.contains("at most 10000"), "{huge}");
    }
}
