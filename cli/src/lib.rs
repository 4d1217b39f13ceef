//! The `scrinalia` command line: talks to the HTTP API to list, trigger, cancel and tail runs, manage schedules,
//! run pipelines, list and drain daemons and check health, and hashes tokens for the configuration. Output is an aligned table for people, or
//! the API's own JSON with `--json` for scripts; the exit code says what went wrong (see [`exit::Exit`]).

// A command line's standard output is its product, so printing to it is the point, not a leftover.
#![allow(clippy::print_stdout)]

pub mod args;
pub mod bulk;
pub mod client;
pub mod commands;
pub mod exit;
pub mod follow;
pub mod items;
pub mod json;
pub mod output;
pub mod overrides;
pub mod pauses;
pub mod pipelines;
pub mod resources;
pub mod schedules;
pub mod table;
pub mod token;
pub mod tokens;
pub mod view;

use std::process::ExitCode;

use clap::Parser;

pub use crate::{args::Cli, exit::Exit};

/// Parses the command line, runs the command and turns its outcome into the documented exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(Exit::Usage.code()));
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("scrinalia: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Error.code());
        }
    };
    let outcome = runtime.block_on(commands::run(cli));
    ExitCode::from(exit::finish(outcome).code())
}
