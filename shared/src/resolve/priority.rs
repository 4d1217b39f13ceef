//! Who goes first and how long a request may wait: a run's priority and its expiry, from its arguments, the
//! worker's override or its catalogue entry, checked with one sentence per key.

use scrinalia_wire::choice::{self, DEFAULT_PRIORITY};

use crate::{ExplicitArgs, OverrideValues, Resolved, Source, WorkerSpec};

use super::ResolveError;

/// The priority a run of the worker gets when its arguments name none: the override's, else the catalogue's,
/// else [`DEFAULT_PRIORITY`]. Raising a run's priority above it needs the admin role.
pub fn worker_priority(spec: &WorkerSpec, overrides: &OverrideValues) -> Result<Resolved<u8>, ResolveError> {
    let (value, source) = match (overrides.priority, spec.priority) {
        (Some(p), _) => (p, Source::Override),
        (None, Some(p)) => (p, Source::Default),
        (None, None) => return Ok(Resolved { value: DEFAULT_PRIORITY, source: Source::Default }),
    };
    let value = choice::priority(value).map_err(|problem| ResolveError::InvalidSetting { key: "priority", problem })?;
    Ok(Resolved { value, source })
}

/// The run's priority: its arguments', else the worker's (see [`worker_priority`]).
pub(super) fn priority_of(
    spec: &WorkerSpec,
    explicit: &ExplicitArgs,
    overrides: &OverrideValues,
) -> Result<Resolved<u8>, ResolveError> {
    match explicit.priority {
        Some(p) => choice::priority(p)
            .map(|value| Resolved { value, source: Source::Explicit })
            .map_err(|problem| ResolveError::InvalidSetting { key: "priority", problem }),
        None => worker_priority(spec, overrides),
    }
}

/// How long the run's request may wait to be claimed: its arguments', else the override's, else the
/// catalogue's; `None` when it waits as long as it takes.
pub(super) fn expires_of(
    spec: &WorkerSpec,
    explicit: &ExplicitArgs,
    overrides: &OverrideValues,
) -> Result<Option<Resolved<u64>>, ResolveError> {
    let (seconds, source) = match (explicit.expires_after_seconds, overrides.expires_after_seconds) {
        (Some(s), _) => (s, Source::Explicit),
        (None, Some(s)) => (s, Source::Override),
        (None, None) => match spec.expires_after_seconds {
            Some(s) => (s, Source::Default),
            None => return Ok(None),
        },
    };
    let value = choice::expires_after_seconds(seconds)
        .map_err(|problem| ResolveError::InvalidSetting { key: "expires_after_seconds", problem })?;
    Ok(Some(Resolved { value, source }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(extra: serde_json::Value) -> WorkerSpec {
        let mut worker = json!({"name": "tags", "command": ["w"]});
        worker.as_object_mut().expect("an object").extend(extra.as_object().expect("an object").clone());
        serde_json::from_value(worker).expect("a worker")
    }

    #[test]
    fn a_priority_comes_from_the_arguments_the_override_the_catalogue_or_50() {
        let args = |p: Option<i64>| ExplicitArgs { priority: p, ..ExplicitArgs::default() };
        let stored = |p: Option<i64>| OverrideValues { priority: p, ..OverrideValues::default() };
        let plain = spec(json!({}));
        let urgent = spec(json!({"priority": 80}));
        let of = |spec: &WorkerSpec, a, o| priority_of(spec, &args(a), &stored(o)).map(|r| (r.value, r.source));
        assert_eq!(of(&plain, None, None), Ok((50, Source::Default)));
        assert_eq!(of(&urgent, None, None), Ok((80, Source::Default)));
        assert_eq!(of(&urgent, None, Some(20)), Ok((20, Source::Override)));
        assert_eq!(of(&urgent, Some(10), Some(20)), Ok((10, Source::Explicit)));
        assert_eq!(worker_priority(&urgent, &stored(Some(20))).map(|r| r.value), Ok(20));
        let refused = of(&plain, Some(101), None).expect_err("out of range");
        assert_eq!(refused.to_string(), "priority must be a whole number from 0 to 100 (higher goes first), not 101.");
    }

    #[test]
    fn an_expiry_comes_from_the_arguments_the_override_or_the_catalogue() {
        let args = |s: Option<i64>| ExplicitArgs { expires_after_seconds: s, ..ExplicitArgs::default() };
        let stored = |s: Option<i64>| OverrideValues { expires_after_seconds: s, ..OverrideValues::default() };
        let of =
            |spec: &WorkerSpec, a, o| expires_of(spec, &args(a), &stored(o)).map(|r| r.map(|r| (r.value, r.source)));
        assert_eq!(of(&spec(json!({})), None, None), Ok(None));
        assert_eq!(of(&spec(json!({"expires_after_seconds": 600})), None, None), Ok(Some((600, Source::Default))));
        assert_eq!(of(&spec(json!({})), None, Some(60)), Ok(Some((60, Source::Override))));
        assert_eq!(of(&spec(json!({})), Some(2), Some(60)), Ok(Some((2, Source::Explicit))));
        let zero = of(&spec(json!({})), Some(0), None).expect_err("zero");
        assert!(zero.to_string().starts_with("expires_after_seconds must be at least 1"), "{zero}");
    }
}
