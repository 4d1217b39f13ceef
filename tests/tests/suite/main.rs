//! Every integration test of Scrinalia Scheduler, in one test binary: one link of the whole graph instead of one
//! per file, and one pool of test threads for all of them (`cargo test -p scrinalia-tests --test suite`; a module
//! alone: `… --test suite db_queue::`). Each module is a file of this folder, named for what it tests; the chaos
//! suite is ignored here and run by `scripts/chaos`.

mod alert_rules;
mod api_admin;
mod api_continuations;
mod api_health;
mod api_processes;
mod api_proxy;
mod api_resources;
mod api_runs;
mod api_schedules;
mod api_security;
mod api_waiting;
mod bad_input;
mod chaos;
mod cli;
mod cli_overrides;
mod cli_rerun;
mod cli_resources;
mod cli_schedules;
mod daemon_checkpoints;
mod daemon_chores;
mod daemon_costs;
mod daemon_fencing;
mod daemon_lifecycle;
mod daemon_pipelines;
mod daemon_resources;
mod daemon_resume_archive;
mod daemon_retention;
mod daemon_retries;
mod daemon_runs;
mod daemon_schedules;
mod daemon_supervisor;
mod db_changes;
mod db_chores;
mod db_continuations;
mod db_ledger;
mod db_queue;
mod db_resources;
mod db_retention;
mod demo_validator;
mod deploy_units;
mod object_store_s3;
mod panel_e2e;
mod panel_resources;
mod pgbouncer;
mod python_adapter;
mod python_archive;
mod run_logs;
mod run_logs_memory;
mod telemetry_logs;
mod telemetry_metrics;
mod telemetry_traces;
mod worker_protocol;
