//! The command line's grammar (clap derive), with the exit codes in `scrinalia --help`.

use clap::{Args, Parser, Subcommand};
use serde_json::Value;
use uuid::Uuid;

/// The long help's epilogue: environment and exit codes, kept in step with docs/operations.md.
const AFTER_LONG_HELP: &str = "\
Environment:
  SCRINALIA_API     base URL of the API (same as --api; default http://127.0.0.1:8080)
  SCRINALIA_TOKEN   bearer token sent as `Authorization: Bearer <token>`
  SCRINALIA_CA_FILE certificate authorities to trust for an https:// API (same as --ca-file)
  NO_COLOR          set to turn colour off (it is always off when stdout is not a terminal)

Exit codes:
  0    ok
  1    generic error (including a server error, or `health` reporting a check that is not ok)
  2    usage error (a bad flag or argument)
  3    cannot reach the API (connection refused, timeout, or a proxy answering 502/504)
  4    unauthorized or forbidden (401/403: no token, an unknown token, or a role too low)
  5    not found (404: no such worker, run or daemon)
  6    conflict (409: a run of that worker is already in flight; the API's sentence is printed)
  7    bad request (400/413/415/422: the API refused the arguments; its sentence is printed)
  8    the followed run ended but did not succeed (failed, cancelled or interrupted)
  130  Ctrl-C while following a run (the run goes on; `scrinalia cancel ID` stops it)";

/// Operate Scrinalia Scheduler from a shell.
#[derive(Debug, Parser)]
#[command(
    name = "scrinalia",
    version,
    about = "Operate Scrinalia Scheduler: list workers, trigger, cancel and tail runs; ask for a worker's describe, \
count or check; list and drain daemons; check health.",
    long_about = "Operate Scrinalia Scheduler from a shell through its HTTP API: list workers (with their readiness \
and where their catalogue entry and their code disagree) and runs, trigger, cancel and tail runs, ask a daemon to \
describe, count or check a worker now, list and drain daemons, check health, and hash tokens for the \
configuration.\n\n\
Tables are for people; --json prints the API's own JSON for scripts. Errors print the API's sentence on stderr.",
    after_long_help = AFTER_LONG_HELP
)]
pub struct Cli {
    /// Base URL of the API: http:// on its host, https:// through the TLS-terminating proxy.
    #[arg(long, global = true, env = "SCRINALIA_API", default_value = "http://127.0.0.1:8080", value_name = "URL")]
    pub api: String,

    /// A PEM file of certificate authorities to trust for an https:// API, besides the system's (a proxy whose
    /// certificate a private CA signed).
    #[arg(long, global = true, env = "SCRINALIA_CA_FILE", value_name = "PATH")]
    pub ca_file: Option<std::path::PathBuf>,

    /// Print the API's JSON instead of a table (one object per line while following).
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the workers in catalogue order: effective engine, readiness, queue, run in flight, last run.
    ///
    /// Beneath the table: what a worker that is not ready lacks, and where a catalogue entry and its code
    /// disagree (the code wins).
    Workers,
    /// Show one worker: readiness, its last description, disagreements, configuration, options, queue, runs.
    Worker {
        /// The worker's name.
        name: String,
    },
    /// Ask a daemon to run the worker's `describe` again now (after its code was deployed, say).
    Describe {
        /// The worker's name.
        worker: String,
    },
    /// Ask a daemon to count the worker's queue now.
    Count {
        /// The worker's name.
        worker: String,
    },
    /// Ask a daemon to run the worker's `check` now: whether it has what it needs.
    Check {
        /// The worker's name.
        worker: String,
    },
    /// List runs, newest first.
    Runs(RunsArgs),
    /// Show one run.
    Run {
        /// What to do with the run.
        #[command(subcommand)]
        command: RunCommand,
    },
    /// Request a run of a worker.
    Trigger(TriggerArgs),
    /// Cancel a run (a queued run at once; a running one is stopped by its daemon).
    Cancel {
        /// The run's id.
        id: Uuid,
    },
    /// Print a run's output.
    Logs {
        /// The run's id.
        id: Uuid,
        /// Keep printing until the run ends; exit 8 unless it succeeded.
        #[arg(short, long)]
        follow: bool,
    },
    /// List the daemons: state, runs in flight, heartbeat.
    Daemons,
    /// Ask a daemon to drain: it finishes its runs, claims nothing new, then stops.
    Drain {
        /// The daemon's id (see `scrinalia daemons`).
        id: Uuid,
    },
    /// Check the database, model servers, object store, daemons and workers; exit 1 unless all are ok.
    Health,
    /// Tokens for `auth.tokens` of the configuration.
    Token {
        /// What to do with a token.
        #[command(subcommand)]
        command: TokenCommand,
    },
}

/// `scrinalia run …`.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Show a run: state, times, daemon, resolved configuration with sources, progress, result, error.
    Show {
        /// The run's id.
        id: Uuid,
    },
}

/// `scrinalia token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print the `sha256:` hash of a token read from stdin, or of a new token with --new.
    Hash {
        /// Generate a new random token and print it with its hash.
        #[arg(long)]
        new: bool,
    },
}

/// `scrinalia runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this worker.
    #[arg(long, value_name = "WORKER")]
    pub worker: Option<String>,
    /// Only runs in this state (queued, running, succeeded, failed, cancelled, interrupted).
    #[arg(long, value_name = "STATE")]
    pub state: Option<scrinalia_wire::RunState>,
    /// At most this many runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: Option<u32>,
    /// Keep printing runs as they appear or change (polls every second; Ctrl-C stops).
    #[arg(short, long)]
    pub follow: bool,
}

/// `scrinalia trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The worker to run.
    pub worker: String,
    /// Engine for this run (instead of the override or the catalogue default).
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<String>,
    /// Preset for this run.
    #[arg(long, value_name = "PRESET")]
    pub preset: Option<String>,
    /// An option for this run, as name=value; the value is read as JSON when it parses (15, true, "15"), else
    /// as text. Repeat for several options.
    #[arg(long = "option", short = 'o', value_name = "NAME=VALUE", value_parser = parse_option)]
    pub options: Vec<(String, Value)>,
    /// Print the run's output until it ends, and exit with its outcome (8 unless it succeeded).
    #[arg(short, long)]
    pub follow: bool,
}

/// Parses `name=value`: the value as JSON when it is valid JSON (numbers, booleans, quoted strings, …), else
/// as the text itself.
pub fn parse_option(s: &str) -> Result<(String, Value), String> {
    let (name, text) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{s:?} has no option name before '='"));
    }
    let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    Ok((name.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use serde_json::json;

    use super::*;

    #[test]
    fn option_values_are_json_when_they_parse_and_text_otherwise() {
        let parsed = |s: &str| parse_option(s).expect("parses").1;
        assert_eq!(parsed("n=15"), json!(15));
        assert_eq!(parsed("x=1.5"), json!(1.5));
        assert_eq!(parsed("b=true"), json!(true));
        assert_eq!(parsed("s=\"15\""), json!("15"));
        assert_eq!(parsed("s=hello world"), json!("hello world"));
        assert_eq!(parsed("s=a=b"), json!("a=b"));
        assert_eq!(parsed("s="), json!(""));
        assert!(parse_option("novalue").is_err());
        assert!(parse_option("=3").is_err());
    }

    #[test]
    fn the_grammar_is_consistent_and_documents_every_exit_code() {
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        for code in (0..=8).chain([130]) {
            assert!(help.contains(&format!("\n  {code:<3}  ")), "exit code {code} is missing from --help");
        }
    }

    #[test]
    fn a_bad_state_is_a_usage_error() {
        let err = Cli::try_parse_from(["scrinalia", "runs", "--state", "done"]).expect_err("not a state");
        assert_eq!(err.exit_code(), 2);
    }
}
