//! Shared resources: each catalogue resource with the capacity claims count against now, where it comes from and
//! the runs holding it; changing that capacity as an audited override (or back to the catalogue's); and the
//! audit trail of every change. A change applies from the next claim on; runs already holding are not stopped. A
//! daemon-scoped resource's capacity is each daemon's `daemon.resources`: a change of it is refused (409).

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, put},
};
use scrinalia_shared::resources::{MAX_CAPACITY, ResourceError};
use scrinalia_wire::{ResourceAudit, ResourceChange, ResourceView, ResourcesView};

use crate::{
    auth::{Admin, Viewer},
    error::{ApiError, ApiResult, ErrorBody, quote},
    extract::{JsonBody, Limit, TrailLimit},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/resources", get(list_resources))
        .route("/api/resources/{name}", put(set_capacity))
        .route("/api/resources/{name}/audit", get(resource_audit))
}

impl From<ResourceError> for ApiError {
    fn from(e: ResourceError) -> Self {
        match e {
            ResourceError::UnknownResource { resource } => Self::not_found(
                "unknown_resource",
                format!("There is no resource {}; GET /api/resources lists the resources.", quote(&resource)),
            ),
            refused @ ResourceError::DaemonScoped { .. } => {
                Self::conflict("daemon_scoped_resource", refused.to_string())
            }
            ResourceError::Reason(e) => e.into(),
            ResourceError::Database(e) => e.into(),
            refused @ (ResourceError::CapacityRequired | ResourceError::InvalidCapacity(_)) => {
                Self::bad_request("invalid_capacity", refused.to_string()).with("max_capacity", MAX_CAPACITY)
            }
        }
    }
}

#[utoipa::path(get, path = "/api/resources", tag = "resources",
    responses((status = 200, body = ResourcesView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_resources(_: Viewer, State(state): State<AppState>) -> ApiResult<Json<ResourcesView>> {
    Ok(Json(ResourcesView { resources: state.db().resources(state.catalogue(), state.gone_after()).await? }))
}

#[utoipa::path(put, path = "/api/resources/{name}", tag = "resources",
    params(("name" = String, Path, description = "The resource's name")),
    request_body = ResourceChange,
    responses((status = 200, body = ResourceView, description = "The resource with its capacity now"),
        (status = 400, body = ErrorBody, description = "Missing reason, missing capacity, or a capacity out of range"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "A daemon-scoped resource: its capacity is each daemon's daemon.resources"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn set_capacity(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(change): JsonBody<ResourceChange>,
) -> ApiResult<Json<ResourceView>> {
    let view = state.db().change_resource(state.catalogue(), &name, &caller.name, &change).await?;
    tracing::info!(resource = %name, actor = %caller.name, capacity = view.capacity, source = %view.source,
        holders = view.holders.len(), "resource capacity changed");
    Ok(Json(view))
}

#[utoipa::path(get, path = "/api/resources/{name}/audit", tag = "resources",
    params(("name" = String, Path, description = "The resource's name"), TrailLimit),
    responses((status = 200, body = ResourceAudit), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn resource_audit(
    _: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Limit(limit): TrailLimit,
) -> ApiResult<Json<ResourceAudit>> {
    let entries = state.db().resource_audit(state.catalogue(), &name, limit).await?;
    Ok(Json(ResourceAudit { resource: name, entries }))
}
