//! The webhooks configured (`[[webhooks]]`, without their secrets), their deliveries with every attempt and what
//! answered, and a test event, queued and delivered by the daemons as every other event is.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::{get, post},
};
use scrinalia_shared::{
    config::{Webhook, WebhookEvent},
    webhooks::Delivery,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::{
    auth::{Admin, Viewer},
    error::{ApiError, ApiResult, ErrorBody},
    extract::{Limit, PageLimit, QueryArgs},
    state::AppState,
};

/// The routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/webhooks", get(list_webhooks))
        .route("/api/webhooks/deliveries", get(list_deliveries))
        .route("/api/webhooks/{name}/test", post(test_webhook))
}

/// A webhook as configured, without its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookView {
    /// Its name.
    pub name: String,
    /// The receiver's origin (its path and query are not shown: they often hold a token).
    pub url: String,
    /// The outcomes it wants.
    pub events: Vec<WebhookEvent>,
    /// The workers it listens to; empty: all.
    pub workers: Vec<String>,
    /// One attempt's limit.
    pub timeout_seconds: f64,
    /// Attempts before a delivery is given up.
    pub max_attempts: u32,
    /// The waits after failed attempts (the last repeats).
    pub retry_seconds: Vec<f64>,
}

impl From<&Webhook> for WebhookView {
    fn from(h: &Webhook) -> Self {
        Self {
            name: h.name.clone(),
            url: h.shown_url(),
            events: h.events.clone(),
            workers: h.workers.clone(),
            timeout_seconds: h.timeout.as_secs_f64(),
            max_attempts: h.max_attempts,
            retry_seconds: h.retry.iter().map(|d| d.as_secs_f64()).collect(),
        }
    }
}

/// The webhooks configured.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhooksView {
    /// In configuration order.
    pub webhooks: Vec<WebhookView>,
}

/// Deliveries, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveriesView {
    /// Each with its attempts, oldest first.
    pub deliveries: Vec<Delivery>,
}

/// A test event queued.
#[derive(Debug, Serialize, ToSchema)]
pub struct TestQueued {
    /// The `webhook-id` its attempts carry.
    pub event_id: Uuid,
    /// The webhook.
    pub webhook: String,
    /// What happens next, in a sentence.
    pub message: String,
}

/// The filters of the deliveries.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// Only the deliveries to this webhook.
    pub webhook: Option<String>,
    /// Only the deliveries of events about this run (a UUID).
    pub run: Option<String>,
}

#[utoipa::path(get, path = "/api/webhooks", tag = "webhooks",
    responses((status = 200, body = WebhooksView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list_webhooks(_: Viewer, State(state): State<AppState>) -> Json<WebhooksView> {
    Json(WebhooksView { webhooks: state.settings().webhooks.iter().map(WebhookView::from).collect() })
}

#[utoipa::path(get, path = "/api/webhooks/deliveries", tag = "webhooks", params(DeliveryQuery, PageLimit),
    responses((status = 200, body = DeliveriesView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "`unknown_webhook`")),
    security(("bearer" = [])))]
pub(crate) async fn list_deliveries(
    _: Viewer,
    State(state): State<AppState>,
    QueryArgs(query): QueryArgs<DeliveryQuery>,
    Limit(limit): PageLimit,
) -> ApiResult<Json<DeliveriesView>> {
    if let Some(name) = &query.webhook {
        find(&state, name)?;
    }
    let run = match &query.run {
        Some(id) => Some(Uuid::parse_str(id).map_err(|_| ApiError::invalid_id("run", id))?),
        None => None,
    };
    let deliveries = state.db().webhook_deliveries(query.webhook.as_deref(), run, limit).await?;
    Ok(Json(DeliveriesView { deliveries }))
}

#[utoipa::path(post, path = "/api/webhooks/{name}/test", tag = "webhooks",
    params(("name" = String, Path, description = "The webhook's name")),
    responses((status = 202, body = TestQueued, description = "Queued; a daemon delivers it within seconds"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn test_webhook(
    Admin(caller): Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<TestQueued>)> {
    let hook = find(&state, &name)?;
    let event_id = state.db().queue_webhook_test(hook, &caller.name).await?;
    tracing::info!(webhook = %hook.name, %event_id, actor = %caller.name, "webhook test queued");
    let message = format!(
        "A test event for {} was queued; a daemon with this webhook delivers it within seconds. Its attempts are \
         listed by GET /api/webhooks/deliveries?webhook={}.",
        hook.name, hook.name
    );
    Ok((StatusCode::ACCEPTED, Json(TestQueued { event_id, webhook: hook.name.clone(), message })))
}

fn find<'a>(state: &'a AppState, name: &str) -> ApiResult<&'a Webhook> {
    state.settings().webhooks.iter().find(|h| h.name == name).ok_or_else(|| {
        let known: Vec<&str> = state.settings().webhooks.iter().map(|h| h.name.as_str()).collect();
        let known =
            if known.is_empty() { "none is configured".to_owned() } else { format!("known: {}", known.join(", ")) };
        ApiError::not_found("unknown_webhook", format!("No webhook is named {name:?} ({known})."))
    })
}
