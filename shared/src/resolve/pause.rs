//! After how many failed runs in a row a worker pauses: the override's, else the catalogue's, checked with one
//! sentence naming the key. Only the catalogue and an override set it; a run's arguments are refused.

use scrinalia_wire::choice;

use crate::{OverrideValues, Resolved, Source, WorkerSpec};

use super::ResolveError;

/// The key, as the catalogue, an override and the sentences name it.
pub const PAUSE_AFTER_FAILURES: &str = "pause_after_failures";

/// `pause_after_failures` of the worker: the override's, else the catalogue's; `None` when it never pauses by
/// itself.
pub(super) fn pause_of(spec: &WorkerSpec, overrides: &OverrideValues) -> Result<Option<Resolved<u32>>, ResolveError> {
    let (k, source) = match (overrides.pause_after_failures, spec.pause_after_failures) {
        (Some(k), _) => (k, Source::Override),
        (None, Some(k)) => (k, Source::Default),
        (None, None) => return Ok(None),
    };
    let value = choice::pause_after_failures(k)
        .map_err(|problem| ResolveError::InvalidSetting { key: PAUSE_AFTER_FAILURES, problem })?;
    Ok(Some(Resolved { value, source }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn it_comes_from_the_override_else_the_catalogue_and_is_at_least_1() {
        let spec = |k: Option<i64>| -> WorkerSpec {
            let mut w = json!({"name": "embed", "command": ["w"]});
            if let Some(k) = k {
                w["pause_after_failures"] = json!(k);
            }
            serde_json::from_value(w).expect("a worker")
        };
        let stored = |k: Option<i64>| OverrideValues { pause_after_failures: k, ..OverrideValues::default() };
        let of = |s, o| pause_of(&spec(s), &stored(o)).map(|r| r.map(|r| (r.value, r.source)));
        assert_eq!(of(None, None), Ok(None));
        assert_eq!(of(Some(3), None), Ok(Some((3, Source::Default))));
        assert_eq!(of(Some(3), Some(5)), Ok(Some((5, Source::Override))));
        let zero = of(None, Some(0)).expect_err("zero");
        assert!(zero.to_string().starts_with("pause_after_failures must be at least 1"), "{zero}");
    }
}
