//! A worker's backlog trigger and freshness target, from its override, else its catalogue entry, key by key,
//! checked together (a debounce longer than the longest wait is refused whichever layer gave each). They are
//! worker settings: a run's arguments that name one are refused.

use scrinalia_wire::backlog::{self, BacklogTrigger, FRESH_WITHIN_SECONDS};

use crate::{ExplicitArgs, OverrideValues, Resolved, Source, WorkerSpec};

use super::ResolveError;

/// The trigger the worker has now, if any, with `override` as its source when the override gives any key.
pub(super) fn trigger_of(
    spec: &WorkerSpec,
    overrides: &OverrideValues,
) -> Result<Option<Resolved<BacklogTrigger>>, ResolveError> {
    let overridden = overrides.when_pending_at_least.is_some()
        || overrides.quiet_seconds.is_some()
        || overrides.max_delay_seconds.is_some();
    let trigger = backlog::trigger(
        overrides.when_pending_at_least.or(spec.when_pending_at_least),
        overrides.quiet_seconds.or(spec.quiet_seconds),
        overrides.max_delay_seconds.or(spec.max_delay_seconds),
    )
    .map_err(|(key, problem)| ResolveError::InvalidSetting { key, problem })?;
    let source = if overridden { Source::Override } else { Source::Default };
    Ok(trigger.map(|value| Resolved { value, source }))
}

/// The freshness target the worker has now, if any.
pub(super) fn fresh_of(spec: &WorkerSpec, overrides: &OverrideValues) -> Result<Option<Resolved<u64>>, ResolveError> {
    let (seconds, source) = match (overrides.fresh_within_seconds, spec.fresh_within_seconds) {
        (Some(s), _) => (s, Source::Override),
        (None, Some(s)) => (s, Source::Default),
        (None, None) => return Ok(None),
    };
    let value = backlog::seconds(FRESH_WITHIN_SECONDS, seconds)
        .map_err(|problem| ResolveError::InvalidSetting { key: FRESH_WITHIN_SECONDS, problem })?;
    Ok(Some(Resolved { value, source }))
}

/// A run's arguments may not set a backlog or freshness key: only the catalogue and an audited override do.
pub(super) fn refuse_in_arguments(explicit: &ExplicitArgs) -> Result<(), ResolveError> {
    let given = [
        (backlog::WHEN_PENDING_AT_LEAST, explicit.when_pending_at_least.is_some()),
        (backlog::QUIET_SECONDS, explicit.quiet_seconds.is_some()),
        (backlog::MAX_DELAY_SECONDS, explicit.max_delay_seconds.is_some()),
        (FRESH_WITHIN_SECONDS, explicit.fresh_within_seconds.is_some()),
    ];
    match given.into_iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(ResolveError::WorkerSettingInArguments { key }),
        None => Ok(()),
    }
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
    fn each_key_comes_from_the_override_else_the_catalogue_and_they_are_checked_together() {
        let catalogue = spec(json!({"when_pending_at_least": 50, "quiet_seconds": 30, "max_delay_seconds": 600}));
        let none = OverrideValues::default();
        let got = trigger_of(&catalogue, &none).expect("valid").expect("a trigger");
        assert_eq!((got.value.when_pending_at_least, got.source), (50, Source::Default));
        let lower = OverrideValues { max_delay_seconds: Some(20), ..OverrideValues::default() };
        let refused = trigger_of(&catalogue, &lower).expect_err("quiet 30 > max 20");
        assert!(refused.to_string().starts_with("quiet_seconds (30) cannot be longer"), "{refused}");
        let more = OverrideValues { when_pending_at_least: Some(5), ..OverrideValues::default() };
        let got = trigger_of(&catalogue, &more).expect("valid").expect("a trigger");
        assert_eq!(
            (got.value.when_pending_at_least, got.value.quiet_seconds, got.source),
            (5, Some(30), Source::Override)
        );
        assert_eq!(trigger_of(&spec(json!({})), &none), Ok(None));
        let zero = OverrideValues { fresh_within_seconds: Some(0), ..OverrideValues::default() };
        assert_eq!(
            fresh_of(&spec(json!({})), &zero).expect_err("zero").to_string(),
            "fresh_within_seconds must be at least 1 second, not 0."
        );
        let args = ExplicitArgs { quiet_seconds: Some(3), ..ExplicitArgs::default() };
        assert!(
            refuse_in_arguments(&args).expect_err("an argument").to_string().starts_with("quiet_seconds is a setting")
        );
    }
}
