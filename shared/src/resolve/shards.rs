//! How many shards a run is split into: a number from its arguments or an override, checked, and refused for a
//! worker whose code does not say it takes a shard (it would process every document N times over).

use crate::{ExplicitArgs, OverrideValues, Resolved, Source, effective::EffectiveWorker};

use super::ResolveError;

/// The number of shards a run is split into, from its arguments, else the override; `None` for one plain run. More
/// than one needs a worker whose description declares the `shards` capability.
pub(super) fn shards_of(
    worker: &EffectiveWorker,
    explicit: &ExplicitArgs,
    overrides: &OverrideValues,
) -> Result<Option<Resolved<u32>>, ResolveError> {
    let (n, source) = match (explicit.shards, overrides.shards) {
        (Some(n), _) => (n, Source::Explicit),
        (None, Some(n)) => (n, Source::Override),
        (None, None) => return Ok(None),
    };
    let n = scrinalia_wire::choice::shards(n).map_err(|problem| ResolveError::InvalidShards { problem })?;
    if n == 1 {
        return Ok(None);
    }
    let capabilities = worker.described.as_ref().map(|d| d.capabilities.as_ref().is_some_and(|c| c.shards));
    let why = match capabilities {
        Some(true) => return Ok(Some(Resolved { value: n, source })),
        Some(false) => "does not declare the `shards` capability in its describe output",
        None => "has not described itself yet, so whether it takes a shard is not known",
    };
    Err(ResolveError::ShardsNotTaken { worker: worker.spec.name.clone(), why })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Catalogue, Description, catalogue::WorkerSpec};

    fn shards(
        capabilities: Option<serde_json::Value>,
        explicit: Option<i64>,
        stored: Option<i64>,
    ) -> Result<Option<u32>, String> {
        let spec: WorkerSpec = serde_json::from_value(json!({"name": "embed", "command": ["w"]})).expect("a worker");
        let catalogue = Catalogue::default();
        let description: Option<Description> =
            capabilities.map(|c| serde_json::from_value(json!({"capabilities": c})).expect("a description"));
        let worker = EffectiveWorker::of(&catalogue, &spec, description.as_ref());
        let explicit = ExplicitArgs { shards: explicit, ..ExplicitArgs::default() };
        let stored = OverrideValues { shards: stored, ..OverrideValues::default() };
        shards_of(&worker, &explicit, &stored).map(|r| r.map(|r| r.value)).map_err(|e| e.to_string())
    }

    #[test]
    fn more_than_one_shard_needs_a_worker_that_says_it_takes_one() {
        let takes = || Some(json!({"shards": true}));
        assert_eq!(shards(takes(), Some(4), None), Ok(Some(4)));
        assert_eq!(shards(takes(), None, Some(3)), Ok(Some(3)), "an override sets it");
        assert_eq!(shards(takes(), Some(2), Some(3)), Ok(Some(2)), "the argument wins over the override");
        assert_eq!(shards(takes(), Some(1), Some(3)), Ok(None), "1 is one plain run");
        assert_eq!(shards(None, None, None), Ok(None));
        assert_eq!(shards(None, Some(1), None), Ok(None), "one shard needs nothing of the worker");
        let refused = shards(Some(json!({"items": true})), Some(2), None).expect_err("refused");
        assert!(refused.contains("does not declare the `shards` capability"), "{refused}");
        let unknown = shards(None, Some(2), None).expect_err("refused");
        assert!(unknown.contains("has not described itself yet"), "{unknown}");
        let zero = shards(takes(), Some(0), None).expect_err("refused");
        assert_eq!(zero, "shards must be at least 1 (1 is one plain run), not 0.");
    }
}
