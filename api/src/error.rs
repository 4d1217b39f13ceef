//! The one error type of the API. Every error answers with a JSON body `{"code": "...", "message": "..."}` (plus
//! fields that help a program act on it); the message is a sentence a person can read. Server-side failures
//! answer with an opaque message and a reference, and are logged in full under that reference.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use scrinalia_shared::{
    DbError, Role, cron::CronError, daemons::DrainError, overrides::OverrideError, pipelines::PipelineError,
    runs::RequestError, schedules::ScheduleError,
};
pub use scrinalia_wire::ErrorBody;
use scrinalia_wire::ReasonError;
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

/// An error answered to a client.
#[derive(Debug)]
pub enum ApiError {
    /// A client error: a 4xx status, a code, a sentence and optional extra fields.
    Client { status: StatusCode, code: &'static str, message: String, details: Map<String, Value> },
    /// No or an unknown bearer token.
    Unauthorized(String),
    /// Something the request needs cannot be reached (the database, the run-log store): a 503 with `code` that
    /// the client may retry.
    Unavailable { code: &'static str, message: String },
    /// Anything else: logged in full, answered with an opaque 500.
    Internal(anyhow::Error),
}

/// The result type of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A client error (a 4xx `status`) without extra fields.
    pub fn client(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        debug_assert!(status.is_client_error(), "{status} is not a client error");
        Self::Client { status, code, message: message.into(), details: Map::new() }
    }

    /// Adds an extra field to a client error (ignored for other kinds).
    pub fn with(mut self, key: &str, value: impl Serialize) -> Self {
        if let Self::Client { details, .. } = &mut self {
            details.insert(key.to_owned(), serde_json::to_value(value).unwrap_or(Value::Null));
        }
        self
    }

    /// 400 with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::client(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 with `code`.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::client(StatusCode::NOT_FOUND, code, message)
    }

    /// 409 with `code`.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::client(StatusCode::CONFLICT, code, message)
    }

    /// 403: the caller's role is below `needed`.
    pub fn forbidden(needed: Role, name: &str, has: Role) -> Self {
        Self::client(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("This needs the {needed} role; {name} has the {has} role."),
        )
        .with("required_role", needed)
    }

    /// 503 with `code`.
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::Unavailable { code, message: message.into() }
    }

    /// 404 for a worker that is not in the catalogue. The name is quoted (and shortened), never interpreted.
    pub fn unknown_worker(name: &str) -> Self {
        Self::not_found(
            "unknown_worker",
            format!("There is no worker {}; GET /api/workers lists the workers.", quote(name)),
        )
    }

    /// 404 for a run id that is well formed but unknown.
    pub fn unknown_run(id: Uuid) -> Self {
        Self::not_found("unknown_run", format!("There is no run {id}."))
    }

    /// 404 for a pipeline that is not in the catalogue.
    pub fn unknown_pipeline(name: &str) -> Self {
        Self::not_found(
            "pipeline_not_found",
            format!("There is no pipeline {}; GET /api/pipelines lists the pipelines.", quote(name)),
        )
    }

    /// 404 for a pipeline run id that is well formed but unknown.
    pub fn unknown_pipeline_run(id: Uuid) -> Self {
        Self::not_found("pipeline_run_not_found", format!("There is no pipeline run {id}."))
    }

    /// 400 for a path segment that should be a UUID.
    pub fn invalid_id(what: &str, given: &str) -> Self {
        Self::bad_request("invalid_id", format!("{} is not a valid {what} id; ids are UUIDs.", quote(given)))
    }

    /// 404 for a route that does not exist.
    pub fn no_route(path: &str) -> Self {
        Self::not_found(
            "not_found",
            format!("There is nothing at {}; GET /api/openapi.json lists the endpoints.", quote(path)),
        )
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::Client { status, .. } => *status,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        if e.is_timed_out() {
            tracing::warn!(error = %e, "a database statement exceeded api.statement_timeout_seconds");
            return Self::unavailable(
                "database_timeout",
                "The database did not answer this request in time (api.statement_timeout_seconds); try again shortly.",
            );
        }
        if e.is_unavailable() {
            tracing::warn!(error = %e, "database unavailable");
            return Self::unavailable("unavailable", "The database cannot be reached right now; try again shortly.");
        }
        Self::Internal(e.into())
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::UnknownWorker { worker } => Self::unknown_worker(&worker),
            RequestError::InvalidArguments(e) => Self::bad_request("invalid_arguments", e.to_string()),
            RequestError::InvalidTags(e) => Self::bad_request("invalid_tags", e),
            e @ RequestError::InvalidOverride { .. } => Self::conflict("invalid_override", e.to_string()),
            RequestError::InFlight { run_id, state, daemon_id, .. } => Self::conflict("run_in_flight", e.to_string())
                .with("run_id", run_id)
                .with("state", state)
                .with("daemon_id", daemon_id),
            RequestError::Paused { ref worker, ref pause } => {
                let resume = format!("/api/workers/{worker}/resume");
                let pause = pause.clone();
                Self::conflict("worker_paused", e.to_string()).with("paused", pause).with("resume", resume)
            }
            RequestError::Database(e) => e.into(),
        }
    }
}

impl From<ReasonError> for ApiError {
    fn from(e: ReasonError) -> Self {
        Self::bad_request(e.code(), e.to_string())
    }
}

impl From<OverrideError> for ApiError {
    fn from(e: OverrideError) -> Self {
        match e {
            OverrideError::UnknownWorker { worker } => Self::unknown_worker(&worker),
            OverrideError::Reason(e) => e.into(),
            OverrideError::Database(e) => e.into(),
            invalid @ OverrideError::Invalid(_) => Self::bad_request("invalid_override", invalid.to_string()),
        }
    }
}

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::NotFound(key) => Self::not_found(
                "schedule_not_found",
                format!("There is no schedule {}; GET /api/schedules lists the schedules.", quote(&key)),
            ),
            ScheduleError::NameTaken(ref name) => {
                let name = name.clone();
                Self::conflict("schedule_name_taken", e.to_string()).with("name", name)
            }
            ScheduleError::Cron(CronError::Expression { field, message }) => {
                Self::bad_request("invalid_cron", message).with("field", field)
            }
            ScheduleError::Cron(CronError::TimeZone { message }) => Self::bad_request("invalid_time_zone", message),
            ScheduleError::Reason(e) => e.into(),
            ScheduleError::Database(e) => e.into(),
            ScheduleError::Tags(e) => Self::bad_request("invalid_tags", e),
            invalid @ (ScheduleError::InvalidName(_)
            | ScheduleError::Target
            | ScheduleError::UnknownWorker(_)
            | ScheduleError::UnknownPipeline(_)
            | ScheduleError::Arguments(_)) => Self::bad_request("invalid_schedule", invalid.to_string()),
        }
    }
}

impl From<PipelineError> for ApiError {
    fn from(e: PipelineError) -> Self {
        match e {
            PipelineError::UnknownPipeline(name) => Self::unknown_pipeline(&name),
            PipelineError::NotFound(id) => Self::unknown_pipeline_run(id),
            PipelineError::InFlight { pipeline_run, step, .. } => Self::conflict("pipeline_in_flight", e.to_string())
                .with("pipeline_run_id", pipeline_run)
                .with("step", step),
            // As when a run is triggered: the stored override is at fault, not the request.
            PipelineError::Step { error: RequestError::InvalidOverride { .. }, .. } => {
                Self::conflict("invalid_override", e.to_string())
            }
            PipelineError::Step { error: RequestError::Database(e), .. } | PipelineError::Database(e) => e.into(),
            PipelineError::Tags(e) => Self::bad_request("invalid_tags", e),
            invalid @ (PipelineError::Arguments(_) | PipelineError::Step { .. }) => {
                Self::bad_request("invalid_arguments", invalid.to_string())
            }
        }
    }
}

impl From<DrainError> for ApiError {
    fn from(e: DrainError) -> Self {
        match e {
            DrainError::Unknown(_) => Self::not_found("unknown_daemon", e.to_string()),
            DrainError::Gone(id) => Self::conflict("daemon_gone", e.to_string()).with("daemon_id", id),
            DrainError::Database(e) => e.into(),
        }
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        Self::Internal(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (code, message, details) = match self {
            Self::Client { code, message, details, .. } => (code, message, details),
            Self::Unauthorized(message) => ("unauthorized", message, Map::new()),
            Self::Unavailable { code, message } => (code, message, Map::new()),
            Self::Internal(e) => {
                let reference = Uuid::new_v4();
                tracing::error!(error.reference = %reference, error.message = %e, error.cause_chain = ?e, "request failed");
                let message =
                    format!("Something went wrong on the server; it has been logged under reference {reference}.");
                ("internal", message, Map::new())
            }
        };
        error_response(status, code, &message, details)
    }
}

/// The answer of an error: `status` with the JSON body `{code, message, …details}` (and the challenge of a 401).
pub fn error_response(
    status: StatusCode,
    code: &str,
    message: impl Into<String>,
    details: Map<String, Value>,
) -> Response {
    let body = ErrorBody { code: code.to_owned(), message: message.into(), details };
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// Quotes user input for a message: Rust's debug quoting escapes control characters, and long input is cut.
pub fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        return format!("{s:?}");
    }
    let cut: String = s.chars().take(MAX).collect();
    format!("{cut:?}…")
}

/// Turns a message from a parser into the end of a sentence.
pub fn sentence(s: impl std::fmt::Display) -> String {
    let s = s.to_string();
    let s = s.trim_end();
    if s.ends_with('.') { s.to_owned() } else { format!("{s}.") }
}
