//! Values of the wire types for the unit tests of the domain's rules, which need no database.

use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

use crate::{EndReason, PipelineRun, PipelineState, ResolvedConfig, Run, RunState};

/// A run of worker `b` in `state`, first attempt, whose cancellation `bob` asked for only if a test says so.
pub(crate) fn run(state: RunState) -> Run {
    serde_json::from_value(json!({
        "id": Uuid::now_v7(), "worker": "b", "state": state, "requested_by": "ada", "requested_at": Utc::now(),
        "arguments": {}, "config": ResolvedConfig::empty(), "daemon_id": null, "claimed_at": null,
        "lease_expires_at": null, "started_at": null, "finished_at": null, "duration_ms": null, "exit_code": null,
        "end_reason": state.is_terminal().then_some(EndReason::ExitStatus), "error": "exit status 2",
        "progress": null, "result": null, "cancel_requested_at": null, "cancel_requested_by": "bob",
        "trace_context": null, "log_key": null, "attempt": 1
    }))
    .expect("a run")
}

/// A running pipeline run of steps `a`, `b`, `c`, at step `step` (0-based).
pub(crate) fn pipeline(step: i32) -> PipelineRun {
    PipelineRun {
        id: Uuid::now_v7(),
        pipeline: "p".into(),
        state: PipelineState::Running,
        steps: vec!["a".into(), "b".into(), "c".into()],
        step,
        current_run: None,
        arguments: json!({}),
        requested_by: "ada".into(),
        requested_at: Utc::now(),
        finished_at: None,
        error: None,
        schedule_id: None,
        fire_at: None,
        cancel_requested_at: None,
        cancel_requested_by: None,
        tags: Vec::new(),
    }
}

/// A schedule of worker `b` every minute in UTC, next due at `next`, with the given policies.
pub(crate) fn schedule(
    overlap: crate::OverlapPolicy,
    missed: crate::MissedPolicy,
    next: chrono::DateTime<Utc>,
) -> crate::Schedule {
    crate::Schedule {
        id: Uuid::now_v7(),
        name: "every-minute".into(),
        target_kind: crate::TargetKind::Worker,
        target: "b".into(),
        cron: "* * * * *".into(),
        time_zone: "UTC".into(),
        arguments: json!({}),
        enabled: true,
        overlap,
        missed,
        next_fire_at: Some(next),
        waiting_fire_at: None,
        created_by: "ada".into(),
        created_at: Utc::now(),
        updated_by: "ada".into(),
        updated_at: Utc::now(),
        tags: Vec::new(),
    }
}

/// A catalogue of one worker, `b`, with no engine.
pub(crate) fn catalogue() -> crate::Catalogue {
    let worker = crate::WorkerSpec {
        name: "b".into(),
        title: None,
        axis: "enrichment".into(),
        governance: "curated".into(),
        stamp: "b_v1".into(),
        description: None,
        command: vec!["worker".into()],
        engine: None,
        preset: None,
        engine_source: None,
        engine_source_url: None,
        options: Vec::new(),
        timeout_seconds: 600,
        env: Default::default(),
        retry: None,
        resources: Vec::new(),
        labels: Vec::new(),
        quarantine_after: None,
        memory_max: None,
        cpu_max: None,
        stall_seconds: None,
        priority: None,
        expires_after_seconds: None,
        preemptible: false,
        pause_after_failures: None,
        when_pending_at_least: None,
        quiet_seconds: None,
        max_delay_seconds: None,
        fresh_within_seconds: None,
    };
    crate::Catalogue::new(vec![worker], Default::default()).expect("a valid catalogue")
}
