//! Layered configuration: built-in defaults < a TOML file < `SCRINALIA__SECTION__KEY` environment variables.
//!
//! Everything is validated at load, and every error names the file, the key and what is wrong. Secrets (the
//! database password, object-store keys) are never printed: `Debug` redacts them.

use std::{
    collections::BTreeMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{
    auth::Role,
    catalogue::{Catalogue, Engine, WorkerSpec},
};

mod auth_oidc;
mod daemon_resources;
mod database;
mod edges;
mod items;
mod limits;
mod logs;
mod object_store;
mod retention;
mod webhooks;
pub mod worker_env;

pub use auth_oidc::{
    MAX_LEEWAY_SECONDS, OidcSettings, PanelSignIn, Peer, ProxySettings, WIDEST_TRUST_PREFIX, auth_problems, role_of,
};
pub use database::{DatabaseSettings, Pooler, redact_url};
pub use edges::{WebOrigin, api_problems, is_loopback_host, split_host_port};
pub use items::{ItemSettings, MAX_KEEP_SUCCEEDED};
pub use logs::{LogSettings, MIN_LOG_CAP};
pub use object_store::{DEFAULT_REGION, ObjectStoreKind, ObjectStoreSettings, clean_endpoint, s3_problems};
pub use retention::{RetentionSettings, retention_problems};
pub use webhooks::{SECRET_PREFIX, Webhook, WebhookEvent, WebhookSettings, decode_secret, resolve_webhooks};

/// The environment variable naming the configuration file when `--config` is not given.
pub const CONFIG_ENV: &str = "SCRINALIA_CONFIG";

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment could not be read or parsed, or a value has the wrong type.
    #[error("configuration {origin}: {message}")]
    Parse {
        /// The file (or "the environment") the error came from.
        origin: String,
        /// What the parser said, naming the key.
        message: String,
    },
    /// Values parsed but do not make sense together.
    #[error("configuration {origin}: {}", .problems.iter().map(|p| format!("`{}`: {}", p.0, p.1)).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The file (or "the environment") the configuration came from.
        origin: String,
        /// Key → what is wrong.
        problems: Vec<(String, String)>,
    },
}

/// A value that must never be printed.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Self {
        Self(secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The HTTP API's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSettings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Origins allowed by CORS (exact match); empty means no cross-origin access. `*` is refused. A write
    /// without a bearer token from one of these origins is accepted too.
    pub cors_origins: Vec<String>,
    /// The origin people's browsers reach the API at (`https://scheduler.example.org`) when it is behind a TLS
    /// proxy; a write without a bearer token must come from it (or `cors_origins`). When absent, the origin is the
    /// request's own `Host`.
    pub public_origin: Option<String>,
    /// Host names (any port) accepted in `Host` when an anonymous role applies, besides `localhost`, loopback
    /// addresses and `public_origin`'s host: a name that resolves to this host by DNS rebinding is refused.
    pub allowed_hosts: Vec<String>,
    /// Largest request body accepted.
    pub body_limit_bytes: usize,
    /// Longest time a request (other than a live stream) may take.
    pub request_timeout_seconds: u64,
    /// SQLite has no LISTEN/NOTIFY: how often live events poll for changes.
    pub events_poll_ms: u64,
    /// Whether `/metrics` is served (on `metrics_listen` when set, else on the API's own listener).
    pub metrics: bool,
    /// A listener of its own for `/metrics` (then not served on `listen`); none by default.
    pub metrics_listen: Option<SocketAddr>,
    /// The hash (`sha256:…`, as `scrinalia-api token` prints) of a bearer token `/metrics` then requires.
    pub metrics_token_hash: Option<String>,
    /// How long a client may take to send a request's headers; also how long an idle keep-alive connection is
    /// kept waiting for its next request.
    pub header_read_timeout_seconds: u64,
    /// How many connections are served at once; the next ones wait in the listen backlog.
    pub connection_limit: usize,
    /// How many live streams (events, followed logs) one caller may hold open at once.
    pub streams_per_caller: usize,
    /// PostgreSQL's `statement_timeout` for the API's own statements (0: none); not for migrations nor the
    /// daemon's batch work. SQLite has none.
    pub statement_timeout_seconds: u64,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            cors_origins: Vec::new(),
            public_origin: None,
            allowed_hosts: Vec::new(),
            body_limit_bytes: 64 * 1024,
            request_timeout_seconds: 30,
            events_poll_ms: 500,
            metrics: true,
            metrics_listen: None,
            metrics_token_hash: None,
            header_read_timeout_seconds: 10,
            connection_limit: 4096,
            streams_per_caller: 1024,
            statement_timeout_seconds: 30,
        }
    }
}

/// The daemon's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSettings {
    /// How many runs at once.
    pub capacity: u32,
    /// Which workers this daemon takes; empty means all.
    pub workers: Vec<String>,
    /// What this daemon advertises (`gpu`, …; its host name is always one): it takes runs only of workers whose
    /// `labels` it has.
    pub labels: Vec<String>,
    /// This daemon's capacity of each daemon-scoped resource (`{ gpu = 1 }`): how many of its runs may hold one at
    /// once, each given its slot number. A resource it does not name (or names with 0) it never claims a run for.
    pub resources: BTreeMap<String, u32>,
    /// Length of a run's lease; renewed about every third of it.
    pub lease_seconds: u64,
    /// On shutdown, how long in-flight runs may take to finish before they are stopped.
    pub drain_seconds: u64,
    /// Fallback poll when no wake-up arrives.
    pub poll_seconds: u64,
    /// How often the daemon says it is alive.
    pub heartbeat_seconds: u64,
    /// A daemon whose heartbeat is older than this is marked gone.
    pub gone_after_seconds: u64,
    /// After SIGTERM to a cancelled or stopped worker, how long before SIGKILL.
    pub cancel_grace_seconds: u64,
    /// How often each worker's `count-pending` runs (by one daemon at a time across all daemons).
    pub queue_count_interval_seconds: u64,
    /// How long one `count-pending`, `check` or `describe` may take before its process group is killed.
    pub queue_count_timeout_seconds: u64,
    /// How often each worker's `check` runs (by one daemon at a time across all daemons).
    pub check_interval_seconds: u64,
    /// A schedule's fire found due later than this after its time is recorded as missed (no daemon was running
    /// then), and its schedule's `missed` policy applies.
    pub missed_fire_after_seconds: u64,
    /// Where the daemon serves `/metrics`; none by default.
    pub metrics_listen: Option<SocketAddr>,
    /// Extra environment for every worker process.
    pub worker_env: BTreeMap<String, String>,
    /// Variables of the daemon's own environment that workers inherit besides `PATH`, `HOME`, `LANG` and `TZ`:
    /// names (`VIRTUAL_ENV`) or prefixes (`CUDA_*`). Nothing else of the daemon's environment reaches a worker.
    pub worker_env_pass: Vec<String>,
    /// The program started as each run's supervisor (`<program> supervise …`); the daemon's own executable when
    /// not set. Only for a program that embeds the daemon (its own executable has no `supervise` command).
    pub supervisor_program: Option<PathBuf>,
    /// Whether the runs of workers with limits (`memory_max`, `cpu_max`) get a cgroup of their own (on by
    /// default). Off, the limits are not enforced on this host, which health and the worker cards say.
    pub cgroups: bool,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        Self {
            capacity: 3,
            workers: Vec::new(),
            labels: Vec::new(),
            resources: BTreeMap::new(),
            lease_seconds: 30,
            drain_seconds: 60,
            poll_seconds: 10,
            heartbeat_seconds: 5,
            gone_after_seconds: 30,
            cancel_grace_seconds: 10,
            missed_fire_after_seconds: 60,
            queue_count_interval_seconds: 60,
            queue_count_timeout_seconds: 30,
            check_interval_seconds: 300,
            metrics_listen: None,
            worker_env: BTreeMap::new(),
            worker_env_pass: Vec::new(),
            supervisor_program: None,
            cgroups: true,
        }
    }
}

impl DaemonSettings {
    /// The lease as a duration.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_seconds)
    }

    /// How long a daemon may stay silent before it is gone.
    pub fn gone_after(&self) -> Duration {
        Duration::from_secs(self.gone_after_seconds)
    }

    /// How often this daemon's chores (counts, checks) come due.
    pub fn chore_intervals(&self) -> crate::descriptions::ChoreIntervals {
        crate::descriptions::ChoreIntervals {
            count: Duration::from_secs(self.queue_count_interval_seconds),
            check: Duration::from_secs(self.check_interval_seconds),
            min_gap: Duration::from_secs(1).min(Duration::from_secs(self.queue_count_interval_seconds)),
            settle: Duration::from_millis(500),
        }
    }
}

/// A token, stored as a hash.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    /// Who holds it; recorded as the actor of every write.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// `sha256:<hex>` of the token (`scrinalia-api token` prints one).
    pub hash: String,
}

/// Who may do what.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// The role of a request without a token; none by default.
    pub anonymous_role: Option<Role>,
    /// Grant the anonymous role only to requests from the loopback interface (the default).
    pub anonymous_loopback_only: bool,
    /// Grant the anonymous role to requests that came through a proxy: they carry `Forwarded`,
    /// `X-Forwarded-For`, `X-Real-IP` or `Via`, or come from an address of `[auth.proxy].trusted`. Off by
    /// default: a reverse proxy on the same host makes every request a loopback one, which would give the
    /// anonymous role to the whole network behind it.
    pub anonymous_through_proxy: bool,
    /// The tokens.
    pub tokens: Vec<TokenSettings>,
    /// `[auth.oidc]`: OpenID Connect access tokens from one issuer (off when absent).
    pub oidc: Option<OidcSettings>,
    /// `[auth.proxy]`: a trusted reverse proxy that signs people in (off when absent).
    pub proxy: Option<ProxySettings>,
    /// `[auth.groups]`: a person's group (claim value or proxy header value) → role; the highest wins.
    pub groups: BTreeMap<String, Role>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            anonymous_role: None,
            anonymous_loopback_only: true,
            anonymous_through_proxy: false,
            tokens: Vec::new(),
            oidc: None,
            proxy: None,
            groups: BTreeMap::new(),
        }
    }
}

/// How the processes log.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySettings {
    /// `text` (one readable line per event) or `json`.
    pub log_format: LogFormat,
    /// A `tracing` filter such as `info,scrinalia_daemon=debug`; `RUST_LOG` wins when set.
    pub log_filter: String,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self { log_format: LogFormat::Text, log_filter: "info".to_owned() }
    }
}

/// Log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A configuration file as written: every section, each field with its default. [`Settings`] is what it becomes
/// once loaded and validated; tests and tools write configurations by serialising this to TOML.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsFile {
    /// `[database]`.
    #[serde(default)]
    pub database: DatabaseSettings,
    /// `[api]`.
    #[serde(default)]
    pub api: ApiSettings,
    /// `[daemon]`.
    #[serde(default)]
    pub daemon: DaemonSettings,
    /// `[object_store]`.
    #[serde(default)]
    pub object_store: ObjectStoreSettings,
    /// `[logs]`.
    #[serde(default)]
    pub logs: LogSettings,
    /// `[items]`.
    #[serde(default)]
    pub items: ItemSettings,
    /// `[retention]`.
    #[serde(default)]
    pub retention: RetentionSettings,
    /// `[auth]`.
    #[serde(default)]
    pub auth: AuthSettings,
    /// `[telemetry]`.
    #[serde(default)]
    pub telemetry: TelemetrySettings,
    /// `[engines.<name>]`.
    #[serde(default)]
    pub engines: BTreeMap<String, Engine>,
    /// `[[workers]]`, in catalogue order.
    #[serde(default)]
    pub workers: Vec<WorkerSpec>,
    /// `[[pipelines]]`, in catalogue order.
    #[serde(default)]
    pub pipelines: Vec<crate::catalogue::PipelineSpec>,
    /// `[[resources]]`, shared by the workers that name them.
    #[serde(default)]
    pub resources: Vec<crate::catalogue::ResourceSpec>,
    /// `[[webhooks]]`, where run outcomes are announced.
    #[serde(default)]
    pub webhooks: Vec<WebhookSettings>,
}

/// The whole, validated configuration of a process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where it was loaded from, for messages.
    pub origin: String,
    /// The database.
    pub database: DatabaseSettings,
    /// The API.
    pub api: ApiSettings,
    /// The daemon.
    pub daemon: DaemonSettings,
    /// Where run logs are kept.
    pub object_store: ObjectStoreSettings,
    /// How much of each run's log is kept.
    pub logs: LogSettings,
    /// How many of each run's items are kept one by one.
    pub items: ItemSettings,
    /// How long finished runs and gone daemons are kept.
    pub retention: RetentionSettings,
    /// Tokens and roles.
    pub auth: AuthSettings,
    /// Logs.
    pub telemetry: TelemetrySettings,
    /// Workers and engines.
    pub catalogue: Catalogue,
    /// Where run outcomes are announced, validated.
    pub webhooks: Vec<Webhook>,
}

impl Settings {
    /// Loads the file at `path` (or `$SCRINALIA_CONFIG`, or nothing) and the environment over the defaults.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let from_env = std::env::var_os(CONFIG_ENV).map(PathBuf::from);
        let path = path.map(Path::to_path_buf).or(from_env);
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_from(path.as_deref(), env)
    }

    /// Loads from an explicit file and environment (tests pass their own).
    pub fn load_from(path: Option<&Path>, env: Vec<(String, String)>) -> Result<Self, ConfigError> {
        let origin = match path {
            Some(p) => format!("file {}", p.display()),
            None => "built-in defaults and the environment".to_owned(),
        };
        let mut builder = config::Config::builder();
        if let Some(p) = path {
            if !p.is_file() {
                return Err(ConfigError::Parse {
                    origin,
                    message: "the file does not exist or is not a file".to_owned(),
                });
            }
            builder = builder.add_source(config::File::from(p).format(config::FileFormat::Toml));
        }
        let env_map: std::collections::HashMap<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with("SCRINALIA__")).collect();
        builder = builder.add_source(
            config::Environment::with_prefix("SCRINALIA")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .list_separator(",")
                .with_list_parse_key("daemon.workers")
                .with_list_parse_key("daemon.worker_env_pass")
                .with_list_parse_key("api.cors_origins")
                .with_list_parse_key("api.allowed_hosts")
                .source(Some(env_map)),
        );
        let parse = |e: config::ConfigError| ConfigError::Parse { origin: origin.clone(), message: e.to_string() };
        let raw: SettingsFile = builder.build().map_err(parse)?.try_deserialize().map_err(parse)?;
        Self::validate(origin.clone(), raw)
    }

    /// Validates a configuration read from `origin` (a sentence for messages, e.g. "file /etc/…").
    pub fn validate(origin: String, raw: SettingsFile) -> Result<Self, ConfigError> {
        let mut problems: Vec<(String, String)> = daemon_resources::problems(&raw.daemon.resources, &raw.resources);
        let catalogue = match Catalogue::with_resources(raw.workers, raw.engines, raw.pipelines, raw.resources) {
            Ok(c) => c,
            Err(found) => {
                problems.extend(found.into_iter().map(|p| (p.key, p.message)));
                Catalogue::default()
            }
        };
        let url = &raw.database.url;
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://") || url.starts_with("sqlite:")) {
            problems.push((
                "database.url".into(),
                format!("{:?} is neither a postgres:// nor a sqlite:// URL", redact_url(url)),
            ));
        }
        if let Some(listen) = &raw.database.listen_url {
            if !(listen.starts_with("postgres://") || listen.starts_with("postgresql://")) {
                problems
                    .push(("database.listen_url".into(), format!("{:?} is not a postgres:// URL", redact_url(listen))));
            } else if raw.database.pooler != Pooler::Transaction {
                problems.push((
                    "database.listen_url".into(),
                    "is only used with database.pooler = \"transaction\" (without a pooler the feed listens on database.url)".into(),
                ));
            }
        }
        let d = &raw.daemon;
        if d.capacity == 0 {
            problems.push(("daemon.capacity".into(), "must be at least 1".into()));
        }
        if d.lease_seconds < 3 {
            problems.push(("daemon.lease_seconds".into(), "must be at least 3 seconds".into()));
        }
        if d.heartbeat_seconds == 0 || d.heartbeat_seconds >= d.gone_after_seconds {
            problems.push((
                "daemon.heartbeat_seconds".into(),
                "must be at least 1 and below daemon.gone_after_seconds".into(),
            ));
        }
        if d.poll_seconds == 0 {
            problems.push(("daemon.poll_seconds".into(), "must be at least 1 second".into()));
        }
        if d.missed_fire_after_seconds == 0 {
            problems.push(("daemon.missed_fire_after_seconds".into(), "must be at least 1 second".into()));
        }
        if d.check_interval_seconds == 0 {
            problems.push(("daemon.check_interval_seconds".into(), "must be at least 1 second".into()));
        }
        if d.queue_count_interval_seconds == 0 || d.queue_count_timeout_seconds == 0 {
            problems.push((
                "daemon.queue_count_interval_seconds".into(),
                "the interval and the timeout must be at least 1 second".into(),
            ));
        }
        problems.extend(worker_env::pass_problems(&d.worker_env_pass));
        if !problems.iter().any(|(k, _)| k.starts_with("workers")) {
            for name in d.workers.iter().filter(|n| catalogue.worker(n).is_none()) {
                problems.push(("daemon.workers".into(), format!("{name:?} is not a worker of the catalogue")));
            }
        }
        problems.extend(logs::log_problems(&raw.logs).into_iter().map(|(key, message)| (key.to_owned(), message)));
        problems.extend(items::item_problems(&raw.items).into_iter().map(|(key, message)| (key.to_owned(), message)));
        problems.extend(retention_problems(&raw.retention).into_iter().map(|(key, message)| (key.to_owned(), message)));
        if raw.object_store.kind == ObjectStoreKind::S3 {
            let found = s3_problems(&raw.object_store);
            problems.extend(found.into_iter().map(|(key, message)| (key.to_owned(), message)));
        }
        problems.extend(auth_oidc::token_problems(&raw.auth.tokens));
        let (webhooks, found) = resolve_webhooks(&raw.webhooks, &catalogue);
        problems.extend(found);
        problems.extend(auth_problems(raw.auth.oidc.as_ref(), raw.auth.proxy.as_ref(), &raw.auth.groups));
        problems.extend(api_problems(&raw.api));
        problems.extend(limits::problems(&raw.api));
        if raw.api.body_limit_bytes < 1024 {
            problems.push(("api.body_limit_bytes".into(), "must be at least 1024".into()));
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid { origin, problems });
        }
        Ok(Self {
            origin,
            database: raw.database,
            api: raw.api,
            daemon: raw.daemon,
            object_store: raw.object_store,
            logs: raw.logs,
            items: raw.items,
            retention: raw.retention,
            auth: raw.auth,
            telemetry: raw.telemetry,
            catalogue,
            webhooks,
        })
    }
}

#[cfg(test)]
mod tests;
