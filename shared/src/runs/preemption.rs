//! Preemption: a run of higher priority that has waited `preempt_after_seconds` for a resource held by a
//! preemptible run of lower priority has that run asked to yield at its next checkpoint; it ends `preempted` and
//! its resume is requested with its end. Which runs to ask is a pure rule ([`choose`]) over facts read at once;
//! any daemon may apply it (the flag is set once, by a conditional update) and the daemon holding a flagged run
//! asks its worker.

use std::{collections::BTreeMap, time::Duration};

use uuid::Uuid;

use crate::{
    Catalogue, Daemon, DaemonState, DbError, ResourceScope, Store,
    db::{self, preemption::Holder, preemption::Waiter},
};

/// Why a worker's runs cannot be preempted, as the end of a sentence; `None` when they can. `capabilities` is
/// what its code declared (`None`: it has not described itself).
pub fn not_preemptible(
    preemptible: bool,
    capabilities: Option<scrinalia_wire::worker::Capabilities>,
) -> Option<&'static str> {
    match capabilities {
        _ if !preemptible => Some("it is not declared preemptible in the catalogue"),
        None => Some("its code has not described itself, so whether it can yield is not known"),
        Some(c) if !c.checkpoints => Some("its code does not declare the `checkpoints` capability"),
        Some(c) if !c.yields => Some("its code does not declare the `yield` capability"),
        Some(_) => None,
    }
}

/// What the rule weighs, read at once.
pub(crate) struct Facts<'a> {
    /// The catalogue, with its resources' effective capacities.
    pub catalogue: &'a Catalogue,
    /// The live daemons.
    pub daemons: &'a [Daemon],
    /// The running holders of the resources that may be preempted.
    pub holders: &'a [Holder],
    /// The queued, due requests of the workers that hold them, highest priority first.
    pub waiters: &'a [Waiter],
    /// Why each worker cannot be preempted, by worker (absent: it can).
    pub not_preemptible: &'a BTreeMap<String, &'static str>,
}

/// The runs to ask to yield, each with the run it yields for: for each resource with `preempt_after_seconds`,
/// full (on the daemon that holds the victim, for a daemon-scoped one), each waiter that has waited that long,
/// highest priority first, takes the holder of lowest priority (then the newest claim) that is lower than its
/// own, preemptible, has a checkpoint and runs where the waiter could take its slot (a daemon-scoped resource:
/// a daemon that can take the waiter's worker). A holder asked already is not asked again, and a waiter one is
/// asked for already takes no other.
pub(crate) fn choose(facts: &Facts<'_>) -> Vec<(Uuid, Uuid)> {
    let mut chosen: Vec<(Uuid, Uuid)> = Vec::new();
    let asked = |run: Uuid, chosen: &[(Uuid, Uuid)]| chosen.iter().any(|(v, _)| *v == run);
    let served = |urgent: Uuid, chosen: &[(Uuid, Uuid)]| chosen.iter().any(|(_, u)| *u == urgent);
    for spec in &facts.catalogue.resources {
        let Some(after) = spec.preempt_after_seconds.and_then(|s| u64::try_from(s).ok()) else { continue };
        let held: Vec<&Holder> = facts.holders.iter().filter(|h| h.resource == spec.name).collect();
        for waiter in
            facts.waiters.iter().filter(|w| Duration::from_secs_f64(w.waited_seconds.max(0.0)).as_secs() >= after)
        {
            let needs = facts.catalogue.worker(&waiter.worker).is_some_and(|w| w.resources.contains(&spec.name));
            let already = held.iter().any(|h| h.preempted_for == Some(waiter.id));
            if !needs || already || served(waiter.id, &chosen) {
                continue;
            }
            let labels = facts.catalogue.worker(&waiter.worker).map(|w| w.labels.clone()).unwrap_or_default();
            let victim = held
                .iter()
                .filter(|h| h.priority < waiter.priority && h.has_checkpoint && h.preempt_requested_at.is_none())
                .filter(|h| !facts.not_preemptible.contains_key(&h.worker) && !asked(h.run_id, &chosen))
                .filter(|h| full_where_held(spec.scope, spec.capacity, h, &held, facts.daemons))
                .filter(|h| match spec.scope {
                    ResourceScope::Global => true,
                    ResourceScope::Daemon => facts
                        .daemons
                        .iter()
                        .find(|d| Some(d.id) == h.daemon_id)
                        .is_some_and(|d| super::waiting::cannot_take(d, &waiter.worker, &labels).is_none()),
                })
                // Holders come lowest priority first, then the newest claim: the least urgent, least advanced.
                .min_by_key(|h| (h.priority, std::cmp::Reverse(h.claimed_at)));
            if let Some(victim) = victim {
                chosen.push((victim.run_id, waiter.id));
            }
        }
    }
    chosen
}

/// Whether the resource is full where `holder` holds it: everywhere for a global one, on its daemon for a
/// daemon-scoped one (a free slot elsewhere serves the waiter without a preemption).
fn full_where_held(scope: ResourceScope, capacity: u32, holder: &Holder, held: &[&Holder], daemons: &[Daemon]) -> bool {
    match scope {
        ResourceScope::Global => held.len() >= capacity as usize,
        ResourceScope::Daemon => {
            let on_daemon = held.iter().filter(|h| h.daemon_id == holder.daemon_id).count();
            let capacity = daemons
                .iter()
                .find(|d| Some(d.id) == holder.daemon_id)
                .and_then(|d| d.resources.get(&holder.resource).copied())
                .unwrap_or(0);
            on_daemon >= capacity as usize
        }
    }
}

impl Store {
    /// Flags the runs the preemption rule picks now ([`choose`]); the (victim, urgent) pairs flagged by this
    /// call. Nothing is read when no resource may be preempted.
    pub(crate) async fn request_preemptions(
        &self,
        catalogue: &Catalogue,
        gone_after: Duration,
    ) -> Result<Vec<(Uuid, Uuid)>, DbError> {
        let resources: Vec<String> =
            catalogue.resources.iter().filter(|r| r.preempt_after_seconds.is_some()).map(|r| r.name.clone()).collect();
        if resources.is_empty() {
            return Ok(Vec::new());
        }
        let workers: Vec<String> = catalogue
            .workers
            .iter()
            .filter(|w| w.resources.iter().any(|r| resources.contains(r)))
            .map(|w| w.name.clone())
            .collect();
        // An idle system has no waiter: one statement a second per daemon, and nothing more.
        let waiters = self.db.retrying(|| db::preemption::waiters(&self.db, &workers)).await?;
        if waiters.is_empty() {
            return Ok(Vec::new());
        }
        let holders = self.db.retrying(|| db::preemption::holders(&self.db, &resources)).await?;
        if holders.is_empty() {
            return Ok(Vec::new());
        }
        let catalogue = &*self.with_effective_capacities(catalogue).await?;
        let (daemons, not_preemptible) =
            tokio::try_join!(self.list_daemons(gone_after), self.not_preemptible(catalogue))?;
        let daemons: Vec<Daemon> = daemons.into_iter().filter(|d| d.state != DaemonState::Gone).collect();
        let facts = Facts {
            catalogue,
            daemons: &daemons,
            holders: &holders,
            waiters: &waiters,
            not_preemptible: &not_preemptible,
        };
        let mut flagged = Vec::new();
        for (victim, urgent) in choose(&facts) {
            if self.db.retrying(|| db::preemption::flag(&self.db, victim, urgent)).await? {
                flagged.push((victim, urgent));
            }
        }
        Ok(flagged)
    }

    /// The running runs of `daemon` flagged for preemption.
    pub(crate) async fn preemption_requests(&self, daemon: Uuid) -> Result<Vec<Uuid>, DbError> {
        self.db.retrying(|| db::preemption::requests(&self.db, daemon)).await
    }
}

#[cfg(test)]
#[path = "preemption_tests.rs"]
mod tests;
