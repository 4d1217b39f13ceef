//! Backlog-driven runs and freshness targets: a worker's trigger on its own queue count (`when_pending_at_least`,
//! `quiet_seconds`, `max_delay_seconds`), its freshness target (`fresh_within_seconds`), the checks that refuse a
//! bad one with a sentence naming its key (the catalogue's load and an override's change use the same ones), the
//! fire history of the trigger and where a worker stands against its target.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The key of the trigger's threshold.
pub const WHEN_PENDING_AT_LEAST: &str = "when_pending_at_least";
/// The key of the trigger's debounce.
pub const QUIET_SECONDS: &str = "quiet_seconds";
/// The key of the trigger's longest wait.
pub const MAX_DELAY_SECONDS: &str = "max_delay_seconds";
/// The key of the freshness target.
pub const FRESH_WITHIN_SECONDS: &str = "fresh_within_seconds";
/// The longest duration any of these keys takes: a year.
pub const MAX_SECONDS: i64 = 366 * 86_400;

/// A worker's trigger on its own queue: when its last count (taken after its last run ended) is at least
/// `when_pending_at_least` and has not grown for `quiet_seconds`, or `max_delay_seconds` have passed since it
/// first reached that, the daemons request one run of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BacklogTrigger {
    /// The threshold: at least 1.
    pub when_pending_at_least: u64,
    /// The debounce: the count must not have grown for this long (none: no wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_seconds: Option<u64>,
    /// Run anyway this long after the count first reached the threshold (none: wait for quiet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_seconds: Option<u64>,
}

/// A duration key checked: a whole number of seconds from 1 to a year; otherwise a sentence naming the key.
pub fn seconds(key: &str, n: i64) -> Result<u64, String> {
    match u64::try_from(n) {
        Ok(s) if (1..=MAX_SECONDS.unsigned_abs()).contains(&s) => Ok(s),
        _ if n < 1 => Err(format!("{key} must be at least 1 second, not {n}.")),
        _ => Err(format!("{key} must be at most {MAX_SECONDS} seconds (a year), not {n}.")),
    }
}

/// The trigger the three keys make, checked together; `Ok(None)` when none is given. The sentence of a refusal
/// names the key: a threshold below 1, a duration below 1 s, a debounce longer than the longest wait, a debounce
/// or a longest wait without a threshold.
pub fn trigger(
    when_pending_at_least: Option<i64>,
    quiet_seconds: Option<i64>,
    max_delay_seconds: Option<i64>,
) -> Result<Option<BacklogTrigger>, (&'static str, String)> {
    let quiet = quiet_seconds.map(|s| seconds(QUIET_SECONDS, s).map_err(|p| (QUIET_SECONDS, p))).transpose()?;
    let max =
        max_delay_seconds.map(|s| seconds(MAX_DELAY_SECONDS, s).map_err(|p| (MAX_DELAY_SECONDS, p))).transpose()?;
    let Some(n) = when_pending_at_least else {
        return match (quiet, max) {
            (None, None) => Ok(None),
            (Some(_), _) => Err((
                QUIET_SECONDS,
                format!("{QUIET_SECONDS} needs {WHEN_PENDING_AT_LEAST}: it is the debounce of a backlog trigger."),
            )),
            (None, Some(_)) => Err((
                MAX_DELAY_SECONDS,
                format!("{MAX_DELAY_SECONDS} needs {WHEN_PENDING_AT_LEAST}: it bounds the wait of a backlog trigger."),
            )),
        };
    };
    let n = match u64::try_from(n) {
        Ok(n) if n >= 1 => n,
        _ => {
            return Err((
                WHEN_PENDING_AT_LEAST,
                format!("{WHEN_PENDING_AT_LEAST} must be at least 1 (a pending count that requests a run), not {n}."),
            ));
        }
    };
    if let (Some(q), Some(m)) = (quiet, max)
        && q > m
    {
        return Err((
            QUIET_SECONDS,
            format!(
                "{QUIET_SECONDS} ({q}) cannot be longer than {MAX_DELAY_SECONDS} ({m}): the run would always wait \
                 the max delay."
            ),
        ));
    }
    Ok(Some(BacklogTrigger { when_pending_at_least: n, quiet_seconds: quiet, max_delay_seconds: max }))
}

/// What a fire of a backlog trigger did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BacklogFire {
    /// Its position.
    pub id: i64,
    /// The worker.
    pub worker: String,
    /// When (database clock).
    pub fired_at: DateTime<Utc>,
    /// The pending count it fired on.
    pub pending: i64,
    /// Why it fired: "62 pending for 30 s", "62 pending, waited the max delay of 600 s".
    pub reason: String,
    /// The run it requested, when it requested one.
    pub run_id: Option<Uuid>,
    /// Why it requested none, when it did not.
    pub skipped_reason: Option<String>,
}

/// `GET /api/workers/{name}/backlog-fires`: a worker's backlog fires, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BacklogFiresView {
    /// The worker.
    pub worker: String,
    /// Its trigger as it resolves now (catalogue, else override); none when it has none.
    pub trigger: Option<BacklogTrigger>,
    /// Its fires, newest first.
    pub fires: Vec<BacklogFire>,
}

/// Where a worker with a freshness target stands against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Freshness {
    /// The target: the oldest pending document (or, without its age, the time since the last successful run
    /// while anything is pending) must be younger than this.
    pub within_seconds: i64,
    /// That age now, in whole seconds; none when nothing is pending (or it is not known).
    pub age_seconds: Option<i64>,
    /// Whether the age is over the target.
    pub breached: bool,
    /// When breached, why, as a sentence: "no daemon with label gpu for 3 h", "last 4 runs failed".
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_is_checked_with_a_sentence_naming_its_key() {
        let ok = trigger(Some(50), Some(30), Some(600)).expect("valid");
        assert_eq!(
            ok,
            Some(BacklogTrigger { when_pending_at_least: 50, quiet_seconds: Some(30), max_delay_seconds: Some(600) })
        );
        assert_eq!(trigger(None, None, None), Ok(None));
        let longer = trigger(Some(5), Some(700), Some(600)).expect_err("quiet longer than max");
        assert_eq!(longer.0, QUIET_SECONDS);
        assert!(longer.1.contains("cannot be longer than max_delay_seconds"), "{}", longer.1);
        assert_eq!(trigger(Some(0), None, None).expect_err("zero").0, WHEN_PENDING_AT_LEAST);
        assert_eq!(
            trigger(Some(5), Some(0), None).expect_err("zero").1,
            "quiet_seconds must be at least 1 second, not 0."
        );
        assert_eq!(trigger(Some(5), None, Some(-3)).expect_err("negative").0, MAX_DELAY_SECONDS);
        assert_eq!(trigger(None, Some(3), None).expect_err("no threshold").0, QUIET_SECONDS);
        assert_eq!(
            seconds(FRESH_WITHIN_SECONDS, 0),
            Err("fresh_within_seconds must be at least 1 second, not 0.".into())
        );
    }
}
