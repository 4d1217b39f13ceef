//! The endpoints, one module per resource; each module exposes `router()`.

pub mod bulk;
pub mod chores;
pub mod continuations;
pub mod daemons;
pub mod events;
pub mod export;
pub mod health;
pub mod history;
pub mod items;
pub mod logs;
pub mod me;
pub mod meta;
pub mod metrics;
pub mod overrides;
pub mod pauses;
pub mod pipelines;
pub mod quarantine;
pub mod resources;
pub mod runs;
pub mod schedules;
pub mod tokens;
pub mod webhooks;
pub mod workers;
