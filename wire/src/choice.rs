//! What can be chosen for a run (engine, preset and option values), by a request or by a persisted override,
//! and the configuration a run resolves to, each value with where it came from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod limits;

pub use limits::MemoryMax;

/// Engine, preset and option values; every field is optional. The same shape is a run request's explicit
/// arguments ([`ExplicitArgs`]) and a worker's persisted override ([`OverrideValues`], where an absent field
/// keeps following the default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Choices {
    /// The engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The preset of that engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Option values, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "sqlx", sqlx(json))]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub options: BTreeMap<String, Value>,
    /// The retry policy (a run's own, or the worker's override of the catalogue's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    pub retry: Option<crate::RetryPolicy>,
    /// The memory limit of the worker's runs, swap included: `"4GiB"`, `"512MiB"` (binary units B, KiB, MiB,
    /// GiB, TiB) or a whole number of bytes, kept as written. Only an override sets it: a run's arguments that
    /// name a limit are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "sqlx", sqlx(json(nullable)))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub memory_max: Option<MemoryMax>,
    /// The CPU limit of the worker's runs, in cores (0.5 is half a core; more than 0, at most 1024). Only an
    /// override sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_max: Option<f64>,
    /// The stall watchdog: a run that reports no progress, item or checkpoint for this many seconds is stopped
    /// and ends `interrupted` (`stalled`). At least 1. Only an override sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_seconds: Option<i64>,
    /// How many shards a run is split into: 1 (or none) is one plain run; N > 1 is a parent run and N child runs,
    /// each given `SCRINALIA_SHARD=i/N`, for a worker whose `describe` declares the `shards` capability. A run's
    /// arguments (a schedule's, a pipeline step's) or an override set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<i64>,
    /// Who goes first among runs waiting for the same resource or daemon slots: 0 to 100, higher first (the
    /// worker's default is its catalogue `priority`, else 50). A run's arguments may lower it; raising it above
    /// the worker's default needs the admin role. Retries, resumes and shard children keep their run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// A queued request not claimed this many seconds after it was made ends `cancelled` (end reason
    /// `expired`). At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after_seconds: Option<i64>,
    /// After this many runs of the worker in a row end `failed`, the worker is paused (no run is requested for
    /// it until an operator resumes it). At least 1. Only the catalogue and an override set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<i64>,
    /// The backlog trigger's threshold: when the worker's pending count is at least this (and quiet, see
    /// `quiet_seconds`), the daemons request one run of it. Only the catalogue and an override set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_pending_at_least: Option<i64>,
    /// The backlog trigger's debounce: the count must not have grown for this many seconds. At least 1, at most
    /// `max_delay_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_seconds: Option<i64>,
    /// The backlog trigger's longest wait: a run is requested this many seconds after the count first reached
    /// the threshold, quiet or not. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_seconds: Option<i64>,
    /// The freshness target: the worker's oldest pending document must be younger than this many seconds. At
    /// least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_within_seconds: Option<i64>,
}

/// The priority of a run nothing else sets.
pub const DEFAULT_PRIORITY: u8 = 50;
/// The highest priority.
pub const MAX_PRIORITY: u8 = 100;

/// A priority as the catalogue, an override or a run's arguments give it, checked: 0 to [`MAX_PRIORITY`];
/// otherwise a sentence naming `priority`.
pub fn priority(n: i64) -> Result<u8, String> {
    match u8::try_from(n) {
        Ok(p) if p <= MAX_PRIORITY => Ok(p),
        _ => Err(format!("priority must be a whole number from 0 to {MAX_PRIORITY} (higher goes first), not {n}.")),
    }
}

/// The longest `expires_after_seconds`: a year.
pub const MAX_EXPIRES_AFTER_SECONDS: u64 = 366 * 86_400;

/// An `expires_after_seconds` checked: at least 1, at most a year; otherwise a sentence naming the key.
pub fn expires_after_seconds(n: i64) -> Result<u64, String> {
    match u64::try_from(n) {
        Ok(s @ 1..=MAX_EXPIRES_AFTER_SECONDS) => Ok(s),
        _ if n < 1 => Err(format!(
            "expires_after_seconds must be at least 1 (a queued request not claimed by then is cancelled), not {n}."
        )),
        _ => Err(format!("expires_after_seconds must be at most {MAX_EXPIRES_AFTER_SECONDS} (a year), not {n}.")),
    }
}

/// The largest `pause_after_failures`.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 1000;

/// A `pause_after_failures` checked: at least 1, at most [`MAX_PAUSE_AFTER_FAILURES`]; otherwise a sentence
/// naming the key.
pub fn pause_after_failures(n: i64) -> Result<u32, String> {
    match u32::try_from(n) {
        Ok(k @ 1..=MAX_PAUSE_AFTER_FAILURES) => Ok(k),
        _ if n < 1 => Err(format!(
            "pause_after_failures must be at least 1 (the worker is paused after that many failed runs in a row), \
             not {n}."
        )),
        _ => Err(format!("pause_after_failures must be at most {MAX_PAUSE_AFTER_FAILURES}, not {n}.")),
    }
}

/// The most shards a run may be split into.
pub const MAX_SHARDS: u32 = 64;

/// A number of shards as a run's arguments or an override give it, checked: at least 1, at most
/// [`MAX_SHARDS`]; otherwise a sentence naming `shards`.
pub fn shards(n: i64) -> Result<u32, String> {
    match u32::try_from(n) {
        Ok(n @ 1..=MAX_SHARDS) => Ok(n),
        _ if n < 1 => Err(format!("shards must be at least 1 (1 is one plain run), not {n}.")),
        _ => Err(format!("shards must be at most {MAX_SHARDS}, not {n}.")),
    }
}

/// The arguments given with a run request.
pub type ExplicitArgs = Choices;
/// A worker's persisted override.
pub type OverrideValues = Choices;

impl Choices {
    /// Whether nothing is chosen.
    pub fn is_empty(&self) -> bool {
        self.engine.is_none()
            && self.preset.is_none()
            && self.options.is_empty()
            && self.retry.is_none()
            && !self.has_limits()
            && self.shards.is_none()
            && self.priority.is_none()
            && self.expires_after_seconds.is_none()
            && self.pause_after_failures.is_none()
            && !self.has_backlog_settings()
    }

    /// Whether a backlog or freshness setting (worker settings, never a run's arguments) is chosen.
    pub fn has_backlog_settings(&self) -> bool {
        self.when_pending_at_least.is_some()
            || self.quiet_seconds.is_some()
            || self.max_delay_seconds.is_some()
            || self.fresh_within_seconds.is_some()
    }

    /// Whether a limit (`memory_max`, `cpu_max`, `stall_seconds`) is chosen.
    pub fn has_limits(&self) -> bool {
        self.memory_max.is_some() || self.cpu_max.is_some() || self.stall_seconds.is_some()
    }
}

/// Where a resolved value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Passed with the run request.
    Explicit,
    /// The worker's persisted override.
    Override,
    /// The catalogue.
    Default,
    /// Configured elsewhere (see the worker's `engine_source`).
    External,
}

/// A value and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resolved<T> {
    /// The value.
    pub value: T,
    /// Its source.
    pub source: Source,
}

/// The configuration a run uses, each field with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResolvedConfig {
    /// The engine, if the worker uses one.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub engine: Option<Resolved<String>>,
    /// The preset, if the worker uses one.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub preset: Option<Resolved<String>>,
    /// The model the preset resolves to.
    pub model: Option<String>,
    /// Where the model is called.
    pub endpoint: Option<String>,
    /// Whether engine and preset can be chosen here.
    pub engine_configurable: bool,
    /// When they cannot: where the engine comes from, as the worker last described it. The engine, preset
    /// and model above are then what that source said at the time; the run reports what it really used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_source: Option<crate::EngineSource>,
    /// Option values (only those with a value), by name.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub options: BTreeMap<String, Resolved<Value>>,
    /// The run's timeout.
    pub timeout_seconds: u64,
    /// The retry policy, if the run is retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub retry: Option<Resolved<crate::RetryPolicy>>,
    /// The memory limit of the run, in bytes, swap included (the catalogue's `memory_max` or an override's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub memory_max_bytes: Option<Resolved<u64>>,
    /// The CPU limit of the run, in cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub cpu_max: Option<Resolved<f64>>,
    /// The stall watchdog of the run, in seconds: no progress, item or checkpoint line for this long stops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub stall_seconds: Option<Resolved<u64>>,
    /// How many shards the run is split into, when more than one (see [`Choices::shards`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub shards: Option<Resolved<u32>>,
    /// The run's priority, 0 to 100, higher first (see [`Choices::priority`]). A configuration stored before
    /// priorities existed reads as the default.
    #[serde(default = "default_priority")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub priority: Resolved<u8>,
    /// How long a queued request of the run waits to be claimed before it ends `expired`, when it may expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub expires_after_seconds: Option<Resolved<u64>>,
    /// After how many failed runs in a row the worker is paused, when it is (see [`Choices::pause_after_failures`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub pause_after_failures: Option<Resolved<u32>>,
    /// The worker's backlog trigger, when it has one (the catalogue's keys, each overridable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub backlog: Option<Resolved<crate::BacklogTrigger>>,
    /// The worker's freshness target, in seconds, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub fresh_within_seconds: Option<Resolved<u64>>,
}

/// A run's priority when a stored row or answer has none (see [`DEFAULT_PRIORITY`]).
pub fn default_priority_value() -> i16 {
    i16::from(DEFAULT_PRIORITY)
}

fn default_priority() -> Resolved<u8> {
    Resolved { value: DEFAULT_PRIORITY, source: Source::Default }
}

impl ResolvedConfig {
    /// Nothing resolved: what a worker asked to `describe` itself is given, so that it answers with its own
    /// defaults.
    pub fn empty() -> Self {
        Self {
            engine: None,
            preset: None,
            model: None,
            endpoint: None,
            engine_configurable: true,
            engine_source: None,
            options: BTreeMap::new(),
            timeout_seconds: 0,
            retry: None,
            memory_max_bytes: None,
            cpu_max: None,
            stall_seconds: None,
            shards: None,
            priority: default_priority(),
            expires_after_seconds: None,
            pause_after_failures: None,
            backlog: None,
            fresh_within_seconds: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priority_is_from_0_to_100_and_an_expiry_at_least_a_second() {
        assert_eq!(priority(0), Ok(0));
        assert_eq!(priority(100), Ok(100));
        let refused = "priority must be a whole number from 0 to 100 (higher goes first), not";
        assert_eq!(priority(101), Err(format!("{refused} 101.")));
        assert_eq!(priority(-1), Err(format!("{refused} -1.")));
        assert_eq!(expires_after_seconds(2), Ok(2));
        assert!(expires_after_seconds(0).is_err_and(|e| e.starts_with("expires_after_seconds must be at least 1")));
        assert!(expires_after_seconds(-5).is_err_and(|e| e.ends_with("not -5.")));
        assert!(expires_after_seconds(i64::MAX).is_err_and(|e| e.contains("at most")));
        let stored: ResolvedConfig = serde_json::from_value(serde_json::json!({"engine": null, "preset": null,
            "model": null, "endpoint": null, "engine_configurable": true, "options": {}, "timeout_seconds": 5}))
        .expect("a configuration stored before priorities");
        assert_eq!(stored.priority, Resolved { value: 50, source: Source::Default });
    }

    #[test]
    fn a_number_of_shards_is_between_one_and_the_maximum() {
        assert_eq!(shards(1), Ok(1));
        assert_eq!(shards(64), Ok(64));
        assert_eq!(shards(0), Err("shards must be at least 1 (1 is one plain run), not 0.".to_owned()));
        assert_eq!(shards(-3), Err("shards must be at least 1 (1 is one plain run), not -3.".to_owned()));
        assert_eq!(shards(65), Err("shards must be at most 64, not 65.".to_owned()));
        assert_eq!(shards(i64::MAX), Err(format!("shards must be at most 64, not {}.", i64::MAX)));
    }
}
