//! The command line's grammar (clap derive), with the exit codes in `scrinalia --help`.

use clap::{Args, Parser, Subcommand};
use scrinalia_wire::Reason;
use serde_json::Value;
use uuid::Uuid;

mod run;
pub use run::{RerunArgs, RunArguments, TriggerArgs};

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
  5    not found (404: no such worker, run, daemon, schedule, pipeline or pipeline run)
  6    conflict (409: a run of that worker or pipeline is already in flight, the worker is paused, a schedule name
       is taken; the API's sentence is printed)
  7    bad request (400/413/415/422: the API refused the arguments; its sentence is printed)
  8    the followed run ended but did not succeed (failed, cancelled or interrupted)
  130  Ctrl-C while following a run (the run goes on; `scrinalia cancel ID` stops it)";

/// Operate Scrinalia Scheduler from a shell.
#[derive(Debug, Parser)]
#[command(
    name = "scrinalia",
    version,
    about = "Operate Scrinalia Scheduler: list workers, trigger, cancel and tail runs; ask for a worker's describe, \
count or check; manage schedules; run pipelines; list and drain daemons; check health.",
    long_about = "Operate Scrinalia Scheduler from a shell through its HTTP API: list workers (with their readiness \
and where their catalogue entry and their code disagree) and runs, trigger, cancel and tail runs, ask a daemon to \
describe, count or check a worker now, create, change, pause and preview cron schedules, run and cancel pipelines, \
list and drain daemons, check health, and hash tokens for the configuration.\n\n\
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
    /// Show one worker: readiness, its last description, disagreements, configuration, options, queue, runs; or
    /// pause and resume it (`worker pause NAME --reason …`).
    #[command(args_conflicts_with_subcommands = true, arg_required_else_help = true)]
    Worker {
        /// The worker's name.
        name: Option<String>,
        /// Pause, resume, or read its pauses.
        #[command(subcommand)]
        command: Option<crate::pauses::WorkerCommand>,
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
    /// Say why a queued run has not started.
    Why {
        /// The run's id.
        id: Uuid,
    },
    /// Resume an interrupted or failed run from its last checkpoint (a new run, with its configuration).
    Resume {
        /// The run's id.
        id: Uuid,
    },
    /// Restart an interrupted or failed run from nothing (a new run, with its configuration).
    Restart {
        /// The run's id.
        id: Uuid,
    },
    /// Rerun a finished run: its explicit arguments, with any given here over them, resolved with today's
    /// overrides and defaults (a new run; `run show` of it lists what changed since).
    Rerun(RerunArgs),
    /// Rerun only the items a finished run reported failed (a new run scoped to them; its worker must take a
    /// scope), optionally with other arguments.
    RerunFailed(RerunArgs),
    /// List a run's items: what happened to each document, one page at a time.
    Items {
        /// The run's id.
        id: Uuid,
        /// Only items of this outcome.
        #[arg(long, value_enum)]
        outcome: Option<crate::items::Outcome>,
        /// Only items whose id contains this text.
        #[arg(long, value_name = "TEXT")]
        search: Option<String>,
        /// Only items after this id (the one the previous page names).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// At most this many.
        #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
    },
    /// A worker's quarantined items (documents that failed in several runs in a row), and their release.
    Quarantine {
        /// What to do.
        #[command(subcommand)]
        command: crate::items::QuarantineCommand,
    },
    /// Print a run's output.
    Logs {
        /// The run's id.
        id: Uuid,
        /// Keep printing until the run ends; exit 8 unless it succeeded.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines (with --follow: the last N lines, then what comes).
        #[arg(short = 'n', long, value_name = "N")]
        tail: Option<u64>,
    },
    /// List the schedules (name, target, cron and zone, paused or not, next fire, last outcome), or manage one.
    Schedules {
        /// What to do with a schedule; without one, list them.
        #[command(subcommand)]
        command: Option<ScheduleCommand>,
    },
    /// List the catalogue's pipelines with their last runs, or run, show and cancel a pipeline run.
    Pipelines {
        /// What to do with a pipeline; without one, list them.
        #[command(subcommand)]
        command: Option<PipelineCommand>,
    },
    /// List the workers' overrides, change or clear one with a reason, or read its audit trail.
    Overrides {
        /// What to do with a worker's override; without one, list them.
        #[command(subcommand)]
        command: Option<crate::overrides::OverrideCommand>,
    },
    /// List the shared resources (capacity, where it comes from, holders), or change a capacity with a reason.
    Resources {
        /// What to do with a resource; without one, list them.
        #[command(subcommand)]
        command: Option<crate::resources::ResourceCommand>,
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
    /// Service tokens, managed through the API without a restart (admin): create, list, revoke.
    Tokens {
        /// What to do with the service tokens.
        #[command(subcommand)]
        command: crate::tokens::TokensCommand,
    },
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

/// `scrinalia schedules …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Show a schedule: its definition, its next three fires, its last fires and its audit trail.
    Show {
        /// The schedule's name or id.
        key: String,
    },
    /// Create a schedule of a worker or a pipeline.
    Create(ScheduleCreateArgs),
    /// Change a schedule: the flags given replace those fields of its current definition, the rest stays.
    Edit(ScheduleEditArgs),
    /// Pause a schedule: it does not fire until it is resumed.
    Pause(ScheduleReasonArgs),
    /// Resume a paused schedule: it fires from now on (what fell while it was paused is not run).
    Resume(ScheduleReasonArgs),
    /// Delete a schedule (its fires and audit trail stay readable by its id).
    Delete(ScheduleReasonArgs),
    /// List a schedule's fires, newest first: what each did, the run it requested or why it was skipped.
    Fires {
        /// The schedule's name or id.
        key: String,
        /// At most this many fires.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// List a schedule's audit trail, newest first: who changed what, when and why.
    Audit {
        /// The schedule's name or id.
        key: String,
        /// At most this many entries.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Print the next three fire times of a cron expression, as the API computes them, before saving it.
    Preview {
        /// The cron expression: five fields (`*/15 9-17 * * MON-FRI`), six with leading seconds, or `@daily`.
        cron: String,
        /// The IANA time zone the expression is read in (default UTC).
        #[arg(long, value_name = "ZONE")]
        time_zone: Option<String>,
    },
}

/// `scrinalia schedules create`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("target").required(true).args(["worker", "pipeline"]))]
pub struct ScheduleCreateArgs {
    /// A unique name (letters, digits, `-`, `_`, `.`); its runs are requested by `schedule:<name>`.
    pub name: String,
    /// The worker to run at each fire.
    #[arg(long, value_name = "WORKER")]
    pub worker: Option<String>,
    /// The pipeline to run at each fire.
    #[arg(long, value_name = "PIPELINE")]
    pub pipeline: Option<String>,
    /// The cron expression: five fields (`*/15 9-17 * * MON-FRI`), six with leading seconds, or `@daily`.
    #[arg(long, value_name = "EXPR")]
    pub cron: String,
    #[command(flatten)]
    pub common: ScheduleFields,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// Why (required; kept in the audit trail).
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Reason,
}

/// The fields of a schedule that `create` and `edit` share.
#[derive(Debug, Args)]
pub struct ScheduleFields {
    /// The IANA time zone the expression is read in (`Europe/Berlin`; default UTC).
    #[arg(long, value_name = "ZONE")]
    pub time_zone: Option<String>,
    /// What a fire does while the target still has a run in flight: skip it, or queue it (at most one waits).
    #[arg(long, value_name = "skip|queue")]
    pub overlap: Option<scrinalia_wire::OverlapPolicy>,
    /// What happens to fires that fell while no daemon ran: skip them, or run the latest once.
    #[arg(long, value_name = "skip|once")]
    pub missed: Option<scrinalia_wire::MissedPolicy>,
    /// An option of its runs as name=value (a pipeline's as STEP.name=value, STEP a step's worker); the value is
    /// read as JSON when it parses, else as text. Repeat for several options.
    #[arg(long = "option", short = 'o', value_name = "NAME=VALUE", value_parser = parse_option)]
    pub options: Vec<(String, Value)>,
    /// A tag its runs carry (a short word); repeat for several, up to 10. Given to `edit`, they replace its tags.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
}

/// `scrinalia schedules edit`.
#[derive(Debug, Args)]
pub struct ScheduleEditArgs {
    /// The schedule's name or id.
    pub key: String,
    /// A new name.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Fire this worker instead.
    #[arg(long, value_name = "WORKER", conflicts_with = "pipeline")]
    pub worker: Option<String>,
    /// Fire this pipeline instead.
    #[arg(long, value_name = "PIPELINE")]
    pub pipeline: Option<String>,
    /// A new cron expression.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    #[command(flatten)]
    pub common: ScheduleFields,
    /// Drop the options it has before applying the --option values given.
    #[arg(long)]
    pub clear_options: bool,
    /// Pause it.
    #[arg(long, conflicts_with = "enabled")]
    pub paused: bool,
    /// Resume it.
    #[arg(long)]
    pub enabled: bool,
    /// Why (required; kept in the audit trail).
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Reason,
}

/// `scrinalia schedules pause|resume|delete`.
#[derive(Debug, Args)]
pub struct ScheduleReasonArgs {
    /// The schedule's name or id.
    pub key: String,
    /// Why (required; kept in the audit trail).
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Reason,
}

/// `scrinalia pipelines …`.
#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Start a run of a pipeline: its first step is requested at once, each next one when the one before succeeded.
    Run {
        /// The pipeline.
        name: String,
        /// An option of a step as STEP.name=value (STEP a step's worker); the value is read as JSON when it
        /// parses, else as text. Repeat for several options.
        #[arg(long = "option", short = 'o', value_name = "STEP.NAME=VALUE", value_parser = parse_option)]
        options: Vec<(String, Value)>,
        /// A tag every step's run carries, besides the pipeline's own; repeat for several.
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
    },
    /// List a pipeline's runs, newest first.
    Runs {
        /// The pipeline.
        name: String,
        /// At most this many runs.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: Option<u32>,
    },
    /// Show a pipeline run: its state, and each step with its run, state and attempt.
    Show {
        /// The pipeline run's id.
        id: Uuid,
    },
    /// Cancel a pipeline run: its current step is cancelled and no further step starts.
    Cancel {
        /// The pipeline run's id.
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
    /// Only runs that carry this tag.
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// At most this many runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: Option<u32>,
    /// Keep printing runs as they appear or change (polls every second; Ctrl-C stops).
    #[arg(short, long)]
    pub follow: bool,
    /// What else to do with runs.
    #[command(subcommand)]
    pub command: Option<RunsCommand>,
}

/// `scrinalia runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Write, as JSON lines on stdout, the runs that retention would prune now (`[retention]`), for an archive
    /// that must keep records: run it, keep its output, and the daemons' next passes delete those runs.
    Export {
        /// Only runs that finished before this time: an RFC 3339 time or a date (2026-01-31, its midnight UTC).
        #[arg(long, value_name = "DATE")]
        before: String,
        /// Only runs of this worker.
        #[arg(long, value_name = "WORKER")]
        worker: Option<String>,
    },
    /// Cancel, rerun or resume every run a filter matches: shows the count, the newest runs and the snapshot
    /// first; acting needs --reason and the count confirmed (typed, or --yes --expect N).
    Bulk(crate::bulk::BulkArgs),
    /// A bulk action's progress (total, done, skipped with the reasons, failed).
    BulkStatus {
        /// The bulk action's id.
        id: uuid::Uuid,
        /// Print the progress until every run has its outcome.
        #[arg(long)]
        wait: bool,
    },
}

/// Checks a `--reason` as the API would, so that one it would refuse is a usage error before any request.
pub fn parse_reason(s: &str) -> Result<Reason, String> {
    Reason::new(Some(s), "it").map_err(|e| e.to_string())
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
    fn a_schedule_needs_one_target_a_cron_and_a_reason() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["scrinalia", "schedules", "create", "s"], args].concat());
        let ok = parse(&["--worker", "w", "--cron", "@daily", "--reason", "r", "--overlap", "queue", "-o", "n=3"]);
        let Ok(Cli { command: Command::Schedules { command: Some(ScheduleCommand::Create(args)) }, .. }) = ok else {
            panic!("parses: {ok:?}");
        };
        assert_eq!(args.common.overlap, Some(scrinalia_wire::OverlapPolicy::Queue));
        assert_eq!(args.common.options, [("n".to_owned(), serde_json::json!(3))]);
        for bad in [
            &["--cron", "@daily", "--reason", "r"][..],
            &["--worker", "w", "--pipeline", "p", "--cron", "@daily", "--reason", "r"],
            &["--worker", "w", "--cron", "@daily"],
            &["--worker", "w", "--cron", "@daily", "--reason", "r", "--missed", "later"],
        ] {
            assert_eq!(parse(bad).expect_err("refused").exit_code(), 2, "{bad:?}");
        }
        assert!(Cli::try_parse_from(["scrinalia", "schedules"]).is_ok());
        assert!(Cli::try_parse_from(["scrinalia", "schedules", "pause", "s"]).is_err(), "a reason is required");
    }

    #[test]
    fn a_bad_state_is_a_usage_error() {
        let err = Cli::try_parse_from(["scrinalia", "runs", "--state", "done"]).expect_err("not a state");
        assert_eq!(err.exit_code(), 2);
    }
}
