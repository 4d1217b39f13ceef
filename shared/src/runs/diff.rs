//! A rerun's diff: what of its resolved configuration differs from the run it reruns, each side with its
//! source, and for a value that came from an override, the audit entry that set it. Computed when the rerun is
//! read, from the two runs' stored configurations and the append-only audit trail, so it never goes stale.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::{
    AuditEntry, ConfigChange, DbError, FollowKind, Origin, OverrideValues, ResolvedConfig, Run, Source, Store,
};

/// The most audit entries read to find who set a field; a worker changed more often than this since the
/// original run shows an override without its author.
const AUDIT_DEPTH: u32 = 1000;

/// One field's value and source, as a run resolved it.
type Side = Option<(Value, Source)>;

/// Every field of a resolved configuration, by name, with its value and source. The model and endpoint follow
/// from the engine and preset through the catalogue (or the external source); the timeout is the catalogue's.
fn fields(c: &ResolvedConfig) -> Vec<(String, Side)> {
    let code = match c.engine.as_ref().map(|e| e.source) {
        Some(Source::External) => Source::External,
        _ => Source::Default,
    };
    let text = |v: &str| Value::String(v.to_owned());
    let mut out = vec![
        ("engine".to_owned(), c.engine.as_ref().map(|r| (text(&r.value), r.source))),
        ("preset".to_owned(), c.preset.as_ref().map(|r| (text(&r.value), r.source))),
        ("model".to_owned(), c.model.as_deref().map(|m| (text(m), code))),
        ("endpoint".to_owned(), c.endpoint.as_deref().map(|e| (text(e), code))),
        ("timeout_seconds".to_owned(), Some((Value::from(c.timeout_seconds), Source::Default))),
        ("retry".to_owned(), c.retry.as_ref().map(|r| (serde_json::to_value(&r.value).unwrap_or_default(), r.source))),
        ("memory_max_bytes".to_owned(), c.memory_max_bytes.as_ref().map(|r| (Value::from(r.value), r.source))),
        ("cpu_max".to_owned(), c.cpu_max.as_ref().map(|r| (Value::from(r.value), r.source))),
        ("stall_seconds".to_owned(), c.stall_seconds.as_ref().map(|r| (Value::from(r.value), r.source))),
        ("shards".to_owned(), c.shards.as_ref().map(|r| (Value::from(r.value), r.source))),
    ];
    out.extend(c.options.iter().map(|(name, r)| (format!("options.{name}"), Some((r.value.clone(), r.source)))));
    out
}

/// What an override says of `field` (absent: it leaves the field to the default).
fn overridden(values: Option<&OverrideValues>, field: &str) -> Option<Value> {
    let values = values?;
    match field {
        "engine" => values.engine.clone().map(Value::String),
        "preset" => values.preset.clone().map(Value::String),
        "retry" => values.retry.as_ref().and_then(|r| serde_json::to_value(r).ok()),
        "memory_max_bytes" => values.memory_max.as_ref().map(|m| m.0.clone()),
        "cpu_max" => values.cpu_max.map(Value::from),
        "stall_seconds" => values.stall_seconds.map(Value::from),
        "shards" => values.shards.map(Value::from),
        _ => field.strip_prefix("options.").and_then(|name| values.options.get(name).cloned()),
    }
}

/// Where a side came from; for an override, the last audit entry (of `audit`, newest first) at or before `at`
/// that changed `field`.
fn origin(field: &str, source: Source, at: DateTime<Utc>, audit: &[AuditEntry]) -> Origin {
    if source != Source::Override {
        return Origin::of(source);
    }
    let setter = audit
        .iter()
        .filter(|e| e.at <= at)
        .find(|e| overridden(e.before.as_ref(), field) != overridden(e.after.as_ref(), field));
    match setter {
        Some(e) => {
            Origin { source, changed_by: Some(e.actor.clone()), changed_at: Some(e.at), reason: Some(e.reason.clone()) }
        }
        None => Origin::of(source),
    }
}

/// The fields whose value differs between `before` (resolved at `before_at`) and `after` (at `after_at`), in
/// the order of [`fields`], then the options the original had and the rerun has not.
pub fn config_changes(
    before: (&ResolvedConfig, DateTime<Utc>),
    after: (&ResolvedConfig, DateTime<Utc>),
    audit: &[AuditEntry],
) -> Vec<ConfigChange> {
    let old = fields(before.0);
    let mut new = fields(after.0);
    for (name, _) in &old {
        if !new.iter().any(|(n, _)| n == name) {
            new.push((name.clone(), None));
        }
    }
    new.into_iter()
        .filter_map(|(field, now)| {
            let was = old.iter().find(|(n, _)| *n == field).and_then(|(_, side)| side.clone());
            if was.as_ref().map(|w| &w.0) == now.as_ref().map(|n| &n.0) {
                return None;
            }
            Some(ConfigChange {
                before_source: was.as_ref().map(|(_, s)| origin(&field, *s, before.1, audit)),
                after_source: now.as_ref().map(|(_, s)| origin(&field, *s, after.1, audit)),
                before: was.map(|(v, _)| v),
                after: now.map(|(v, _)| v),
                field,
            })
        })
        .collect()
}

impl Store {
    /// For a rerun: what of its configuration differs from the run it reruns (see [`config_changes`]); `None`
    /// for any other run, or when the original is no longer in the ledger.
    pub(crate) async fn rerun_changes(&self, run: &Run) -> Result<Option<Vec<ConfigChange>>, DbError> {
        let (Some(original), Some(FollowKind::Rerun)) = (run.follows, run.follows_as) else {
            return Ok(None);
        };
        let Some(original) = self.get_run(original).await? else {
            return Ok(None);
        };
        let audit = self.audit_trail(&run.worker, AUDIT_DEPTH).await?;
        Ok(Some(config_changes((&original.config, original.requested_at), (&run.config, run.requested_at), &audit)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Duration;
    use serde_json::json;

    use super::*;
    use crate::{OverrideAction, Resolved};

    fn config(batch: (i64, Source), preset: (&str, Source)) -> ResolvedConfig {
        ResolvedConfig {
            engine: Some(Resolved { value: "ollama".into(), source: Source::Default }),
            preset: Some(Resolved { value: preset.0.into(), source: preset.1 }),
            model: Some(format!("model-{}", preset.0)),
            options: BTreeMap::from([("batch_size".into(), Resolved { value: json!(batch.0), source: batch.1 })]),
            timeout_seconds: 600,
            ..ResolvedConfig::empty()
        }
    }

    fn entry(actor: &str, at: DateTime<Utc>, before: Option<Value>, after: Option<Value>) -> AuditEntry {
        let values = |v: Option<Value>| v.map(|v| serde_json::from_value(v).expect("override values"));
        AuditEntry {
            id: 0,
            worker: "w".into(),
            actor: actor.into(),
            at,
            action: OverrideAction::Set,
            before: values(before),
            after: values(after),
            reason: format!("{actor}'s reason"),
        }
    }

    #[test]
    fn an_override_change_names_its_author_and_unchanged_fields_are_left_out() {
        let t0 = Utc::now();
        let (t1, t2, t3) = (t0 + Duration::minutes(1), t0 + Duration::minutes(2), t0 + Duration::minutes(3));
        // Newest first, as the audit trail reads: ada set the preset before the original run, then bo set the
        // batch size (an unrelated field ada's entry also carries), then the rerun.
        let audit = vec![
            entry(
                "bo",
                t2,
                Some(json!({"preset": "fast"})),
                Some(json!({"preset": "fast", "options": {"batch_size": 8}})),
            ),
            entry("ada", t0, None, Some(json!({"preset": "fast"}))),
        ];
        let before = config((50, Source::Default), ("fast", Source::Override));
        let after = config((8, Source::Override), ("fast", Source::Override));
        let changes = config_changes((&before, t1), (&after, t3), &audit);
        assert_eq!(changes.len(), 1, "{changes:?}");
        let change = &changes[0];
        assert_eq!(change.field, "options.batch_size");
        assert_eq!((change.before.clone(), change.after.clone()), (Some(json!(50)), Some(json!(8))));
        assert_eq!(change.before_source, Some(Origin::of(Source::Default)));
        let after = change.after_source.as_ref().expect("source");
        assert_eq!(
            (after.source, after.changed_by.as_deref(), after.changed_at),
            (Source::Override, Some("bo"), Some(t2))
        );
        assert_eq!(after.reason.as_deref(), Some("bo's reason"));
    }

    #[test]
    fn a_preset_change_carries_its_model_and_a_dropped_option_is_shown_gone() {
        let t0 = Utc::now();
        let mut before = config((50, Source::Default), ("fast", Source::Default));
        before.options.insert("language".into(), Resolved { value: json!("fr"), source: Source::Explicit });
        let after = config((50, Source::Default), ("thorough", Source::Explicit));
        let changes = config_changes((&before, t0), (&after, t0), &[]);
        let names: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(names, ["preset", "model", "options.language"]);
        assert_eq!(changes[2].after, None);
        assert_eq!(changes[2].before_source, Some(Origin::of(Source::Explicit)));
        assert_eq!(changes[0].after_source, Some(Origin::of(Source::Explicit)));
    }
}
