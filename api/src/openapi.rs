//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` attributes and the types they use.

use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use crate::routes::{daemons, events, health, logs, me, meta, metrics, overrides, runs, workers};

/// The API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Scrinalia Scheduler API",
        description = "Trigger and follow the archive's AI workers. Every error is a JSON object \
            `{\"code\": \"...\", \"message\": \"a sentence\"}`. Bearer tokens carry a role: viewer (read), \
            operator (trigger, cancel), admin (overrides, drain)."
    ),
    paths(
        workers::list_workers, workers::get_worker,
        runs::trigger_run, runs::list_runs, runs::get_run, runs::cancel_run, logs::run_log,
        overrides::set_override, overrides::clear_override, overrides::audit_trail,
        daemons::list_daemons, daemons::drain_daemon,
        health::health, events::events,
        me::me, meta::healthz, meta::readyz, meta::openapi, metrics::metrics,
    ),
    components(schemas(crate::error::ErrorBody, scrinalia_shared::auth::Role)),
    modifiers(&BearerAuth),
    tags(
        (name = "workers", description = "The catalogue with effective configuration, queue and runs"),
        (name = "runs", description = "Trigger, list, read, cancel and tail runs"),
        (name = "overrides", description = "Persisted per-worker overrides and their audit trail"),
        (name = "daemons", description = "The scheduler daemons"),
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
