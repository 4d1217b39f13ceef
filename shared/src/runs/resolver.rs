//! What a run's configuration is resolved against besides its arguments, read once for many runs: the overrides
//! and the workers' stored descriptions. A schedule's fire pass or a pipeline's start resolves many runs, and a
//! fire pass reads both inside its transaction; one read of each table serves them all.

use std::collections::HashMap;

use crate::{
    Catalogue, EffectiveWorker, ExplicitArgs, Override, ResolvedConfig, WorkerDescription, WorkerSpec, resolve,
};

use super::RequestError;

/// The overrides and descriptions of every worker, as read at one moment.
#[derive(Debug, Default)]
pub(crate) struct Resolver {
    overrides: HashMap<String, Override>,
    descriptions: HashMap<String, WorkerDescription>,
}

impl Resolver {
    pub(crate) fn new(overrides: Vec<Override>, descriptions: Vec<WorkerDescription>) -> Self {
        Self {
            overrides: overrides.into_iter().map(|o| (o.worker.clone(), o)).collect(),
            descriptions: descriptions.into_iter().map(|d| (d.worker.clone(), d)).collect(),
        }
    }

    /// The configuration a run of `spec` with `arguments` resolves to.
    pub(crate) fn resolve(
        &self,
        catalogue: &Catalogue,
        spec: &WorkerSpec,
        arguments: &ExplicitArgs,
    ) -> Result<ResolvedConfig, RequestError> {
        resolve_with(catalogue, spec, arguments, self.overrides.get(&spec.name), self.descriptions.get(&spec.name))
    }
}

/// Explicit argument > `stored` override > the worker's default (its code's description over the catalogue's).
pub(crate) fn resolve_with(
    catalogue: &Catalogue,
    spec: &WorkerSpec,
    arguments: &ExplicitArgs,
    stored: Option<&Override>,
    described: Option<&WorkerDescription>,
) -> Result<ResolvedConfig, RequestError> {
    let worker = EffectiveWorker::of(catalogue, spec, described.and_then(|d| d.description.as_ref()));
    resolve(&worker, arguments, stored.map(|o| &o.values)).map_err(|error| {
        // Arguments that resolve alone point at the override.
        if stored.is_some() && resolve(&worker, arguments, None).is_ok() {
            RequestError::InvalidOverride { worker: spec.name.clone(), error }
        } else {
            RequestError::InvalidArguments(error)
        }
    })
}
