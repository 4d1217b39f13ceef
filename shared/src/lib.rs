//! What the Scrinalia API and daemon share: the worker catalogue, layered configuration, configuration
//! resolution, the database layer over PostgreSQL and SQLite, the run-log store, tokens, telemetry and metrics.
#![warn(missing_docs)]

pub mod auth;
pub mod catalogue;
pub mod config;
pub mod db;
pub mod logstore;
pub mod metrics;
pub mod resolve;
pub mod telemetry;

pub use catalogue::{Catalogue, Engine, OptionSpec, OptionType, WorkerSpec};
pub use config::{ConfigError, Settings};
pub use db::{Database, DbError};
pub use resolve::{ExplicitArgs, OverrideValues, ResolveError, Resolved, ResolvedConfig, Source, resolve};

/// The version every binary reports (daemon registry, health, OpenAPI).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
