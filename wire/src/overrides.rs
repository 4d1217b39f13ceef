//! Persisted overrides of a worker's configuration and their append-only audit trail: the override, a change of
//! it as an operator sends it, the worker's override after a change, and the trail.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{Named, OverrideValues, ResolvedConfig, RetryPolicy, choice::MemoryMax, named};

/// A worker's persisted override.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Override {
    /// The worker.
    pub worker: String,
    /// The overridden values.
    #[cfg_attr(feature = "sqlx", sqlx(flatten))]
    pub values: OverrideValues,
    /// Who last changed it.
    pub updated_by: String,
    /// When.
    pub updated_at: DateTime<Utc>,
}

/// What a change of an override did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OverrideAction {
    /// The override was set (created or changed).
    Set,
    /// The override was removed: the defaults apply again.
    Clear,
}

impl Named for OverrideAction {
    const ALL: &'static [Self] = &[Self::Set, Self::Clear];
    const NOUN: &'static str = "an override action";
    const PLURAL: &'static str = "the override actions";

    fn name(self) -> &'static str {
        match self {
            Self::Set => "set",
            Self::Clear => "clear",
        }
    }
}
named!(OverrideAction);

/// One entry of the append-only audit trail of overrides.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Its position.
    pub id: i64,
    /// The worker.
    pub worker: String,
    /// Who.
    pub actor: String,
    /// When.
    pub at: DateTime<Utc>,
    /// `set` or `clear`.
    pub action: OverrideAction,
    /// The override before (absent: none).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub before: Option<OverrideValues>,
    /// The override after (absent: none).
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub after: Option<OverrideValues>,
    /// Why.
    pub reason: String,
}

/// `GET /api/workers/{name}/audit`: a worker's audit trail, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditView {
    /// The worker.
    pub worker: String,
    /// Who changed what, when and why; newest first.
    pub entries: Vec<AuditEntry>,
}

/// A worker's override after a change, and the configuration a run without arguments now uses.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OverrideView {
    /// The worker.
    pub worker: String,
    /// The stored override; absent when it is cleared.
    #[serde(rename = "override")]
    pub override_: Option<Override>,
    /// The effective configuration, each field with its source.
    pub effective: Option<ResolvedConfig>,
    /// Why the effective configuration cannot be resolved, if it cannot.
    pub effective_error: Option<String>,
}

/// A change of an override, as an operator sends it: for `engine`, `preset`, `retry`, each limit and each
/// option, absent keeps the current value, `null` clears it (the default applies again), a value sets it. The
/// reason is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OverrideChange {
    /// The engine; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub engine: Option<Option<String>>,
    /// The preset; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub preset: Option<Option<String>>,
    /// Option values; a `null` value clears that option's override.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub options: BTreeMap<String, Value>,
    /// The retry policy; `null` clears it (the catalogue's applies again).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub retry: Option<Option<RetryPolicy>>,
    /// The memory limit (`"4GiB"`, `"512MiB"` or a whole number of bytes); `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub memory_max: Option<Option<MemoryMax>>,
    /// The CPU limit, in cores; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub cpu_max: Option<Option<f64>>,
    /// The stall watchdog, in seconds; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub stall_seconds: Option<Option<i64>>,
    /// How many shards a run is split into; `null` clears it (one plain run).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub shards: Option<Option<i64>>,
    /// The worker's priority (0 to 100, higher first); `null` clears it (the catalogue's, else 50).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub priority: Option<Option<i64>>,
    /// How long a queued request waits to be claimed before it expires, in seconds; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub expires_after_seconds: Option<Option<i64>>,
    /// After how many failed runs in a row the worker is paused; `null` clears it (the catalogue's, else never).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub pause_after_failures: Option<Option<i64>>,
    /// The backlog trigger's threshold; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub when_pending_at_least: Option<Option<i64>>,
    /// The backlog trigger's debounce, in seconds; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub quiet_seconds: Option<Option<i64>>,
    /// The backlog trigger's longest wait, in seconds; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub max_delay_seconds: Option<Option<i64>>,
    /// The freshness target, in seconds; `null` clears it.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub fresh_within_seconds: Option<Option<i64>>,
    /// Why (required, recorded in the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A field that is present in the JSON, `null` included, is `Some`: `Some(None)` clears, `None` keeps.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl OverrideChange {
    /// The override that results from applying this change to `current`.
    pub fn apply(&self, current: Option<&OverrideValues>) -> OverrideValues {
        let mut next = current.cloned().unwrap_or_default();
        if let Some(engine) = &self.engine {
            next.engine.clone_from(engine);
        }
        if let Some(preset) = &self.preset {
            next.preset.clone_from(preset);
        }
        if let Some(retry) = &self.retry {
            next.retry.clone_from(retry);
        }
        if let Some(memory_max) = &self.memory_max {
            next.memory_max.clone_from(memory_max);
        }
        if let Some(cpu_max) = self.cpu_max {
            next.cpu_max = cpu_max;
        }
        if let Some(stall_seconds) = self.stall_seconds {
            next.stall_seconds = stall_seconds;
        }
        if let Some(shards) = self.shards {
            next.shards = shards;
        }
        if let Some(priority) = self.priority {
            next.priority = priority;
        }
        if let Some(expires) = self.expires_after_seconds {
            next.expires_after_seconds = expires;
        }
        if let Some(pause) = self.pause_after_failures {
            next.pause_after_failures = pause;
        }
        for (changed, field) in [
            (self.when_pending_at_least, &mut next.when_pending_at_least),
            (self.quiet_seconds, &mut next.quiet_seconds),
            (self.max_delay_seconds, &mut next.max_delay_seconds),
            (self.fresh_within_seconds, &mut next.fresh_within_seconds),
        ] {
            if let Some(value) = changed {
                *field = value;
            }
        }
        for (name, value) in &self.options {
            if value.is_null() {
                next.options.remove(name);
            } else {
                next.options.insert(name.clone(), value.clone());
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_change_tells_null_from_absent_both_ways() {
        let change: OverrideChange =
            serde_json::from_value(json!({"engine": null, "preset": "big", "options": {"n": null}, "reason": "r"}))
                .expect("a change");
        assert_eq!(
            (change.engine.clone(), change.preset.clone(), change.retry.clone()),
            (Some(None), Some(Some("big".into())), None)
        );
        assert_eq!(
            serde_json::to_value(&change).expect("json"),
            json!({"engine": null, "preset": "big", "options": {"n": null}, "reason": "r"})
        );
        assert!(serde_json::from_value::<OverrideChange>(json!({"presets": "big"})).is_err());
    }

    #[test]
    fn limits_are_kept_cleared_and_set_like_the_other_fields() {
        let current = OverrideValues {
            memory_max: Some("4GiB".into()),
            cpu_max: Some(2.0),
            stall_seconds: Some(600),
            ..OverrideValues::default()
        };
        let change: OverrideChange =
            serde_json::from_value(json!({"memory_max": null, "stall_seconds": 30, "reason": "r"})).expect("a change");
        assert_eq!(
            (change.memory_max.clone(), change.cpu_max, change.stall_seconds),
            (Some(None), None, Some(Some(30)))
        );
        let next = change.apply(Some(&current));
        assert_eq!((next.memory_max, next.cpu_max, next.stall_seconds), (None, Some(2.0), Some(30)));
        // Written as given: a size stays text, bytes stay a number.
        let set: OverrideChange = serde_json::from_value(json!({"memory_max": 1_048_576, "reason": "r"})).expect("set");
        assert_eq!(serde_json::to_value(set.apply(None)).expect("json"), json!({"memory_max": 1_048_576}));
    }
}
