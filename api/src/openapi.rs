//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` attributes and the types they use,
//! and served at `/api/openapi.json`.

use axum::{Json, Router, routing::get};
use scrinalia_shared::Change;
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use crate::{
    routes::{
        bulk, chores, continuations, daemons, events, export, health, history, items, logs, me, meta, metrics,
        overrides, pauses, pipelines, quarantine, resources, runs, schedules, tokens, workers,
    },
    state::AppState,
};

/// The route of the document.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/openapi.json", get(document))
}

#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", responses((status = 200, description = "This document (OpenAPI 3.1)")))]
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Scrinalia Scheduler API",
        description = "Trigger and follow the archive's AI workers. Every error is a JSON object \
            `{\"code\": \"...\", \"message\": \"a sentence\"}`. Bearer tokens carry a role: viewer (read), \
            operator (trigger, cancel, ask for a describe, count or check; write schedules; start and cancel \
            pipeline runs; pause and resume a worker), admin (overrides, resource capacities, drain)."
    ),
    paths(
        workers::list_workers, workers::get_worker, workers::backlog_fires, history::worker_history,
        chores::describe_worker, chores::count_worker, chores::check_worker,
        runs::trigger_run, runs::list_runs, runs::get_run, runs::run_progress, runs::cancel_run, items::run_items, quarantine::get_quarantine, quarantine::release, logs::run_log,
        export::export_runs,
        continuations::resume_run, continuations::restart_run, continuations::rerun_run, continuations::rerun_failed,
        bulk::bulk_action, bulk::list_bulk_actions, bulk::get_bulk_action,
        overrides::set_override, overrides::clear_override, overrides::audit_trail,
        pauses::pause_worker, pauses::resume_worker, pauses::pause_history,
        resources::list_resources, resources::set_capacity, resources::resource_audit,
        schedules::list_schedules, schedules::create_schedule, schedules::preview_schedule, schedules::get_schedule,
        schedules::replace_schedule, schedules::delete_schedule, schedules::pause_schedule,
        schedules::resume_schedule, schedules::schedule_fires, schedules::schedule_audit,
        pipelines::list_pipelines, pipelines::start_pipeline, pipelines::list_pipeline_runs,
        pipelines::get_pipeline_run, pipelines::cancel_pipeline_run,
        daemons::list_daemons, daemons::drain_daemon,
        crate::routes::webhooks::list_webhooks, crate::routes::webhooks::list_deliveries,
        crate::routes::webhooks::test_webhook,
        health::health, events::events,
        tokens::create_token, tokens::list_tokens, tokens::revoke_token,
        me::me, me::signin, meta::healthz, meta::readyz, document, metrics::metrics,
    ),
    components(schemas(crate::error::ErrorBody, scrinalia_shared::Role, Change)),
    modifiers(&BearerAuth, &EventNames),
    tags(
        (name = "workers", description = "The catalogue with effective configuration, what each worker's code declares, readiness, queue and runs; asking for a describe, count or check"),
        (name = "runs", description = "Trigger, list, read, cancel and tail runs"),
        (name = "overrides", description = "Persisted per-worker overrides and their audit trail"),
        (name = "resources", description = "Shared resources: capacity (the catalogue's or an audited override), holders, audit trail"),
        (name = "schedules", description = "Cron schedules of workers and pipelines, their fires and their audit trail"),
        (name = "pipelines", description = "The catalogue's pipelines: start, follow and cancel their runs"),
        (name = "daemons", description = "The scheduler daemons"),
        (name = "webhooks", description = "Webhooks on run outcomes: configured hooks, deliveries with their attempts, a test event"),
        (name = "tokens", description = "Service tokens an admin creates and revokes without a restart"),
        (name = "health", description = "Health of the database, model servers, run-log store and daemons"),
        (name = "events", description = "Live changes (Server-Sent Events)"),
        (name = "meta", description = "Liveness, readiness, metrics and this document"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.info.version = scrinalia_shared::VERSION.to_owned();
    }
}

/// Names the live events in the description of `GET /api/events` from [`Change::PANEL_KINDS`], the one list the
/// panel and every other client can rely on.
struct EventNames;

impl Modify for EventNames {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(get) = openapi.paths.paths.get_mut("/api/events").and_then(|item| item.get.as_mut()) else { return };
        let names: Vec<String> = Change::PANEL_KINDS.iter().map(|k| format!("`{k}`")).collect();
        get.description = Some(format!(
            "Server-Sent Events. The first event is `ready`; then each event is named by its kind, one of {}, and \
             its data is the JSON of a `Change` (schema `Change`, tagged by `kind`). `resync` means changes may \
             have been missed: read everything again.",
            names.join(", ")
        ));
    }
}
