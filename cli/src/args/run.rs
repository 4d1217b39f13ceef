//! The arguments of a run, as `trigger` takes them and the reruns take them over an earlier run's.

use clap::Args;
use serde_json::Value;
use uuid::Uuid;

use super::parse_option;

/// `scrinalia trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The worker to run.
    pub worker: String,
    /// The run's arguments.
    #[command(flatten)]
    pub arguments: RunArguments,
    /// Print the run's output until it ends, and exit with its outcome (8 unless it succeeded).
    #[arg(short, long)]
    pub follow: bool,
    /// A tag the run carries (a short word such as collection:1921-letters); repeat for several, up to 10.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
}

/// `scrinalia rerun` and `rerun-failed`: each argument given replaces the earlier run's (an option that option).
#[derive(Debug, Args)]
pub struct RerunArgs {
    /// The run's id.
    pub id: Uuid,
    /// Arguments over the earlier run's.
    #[command(flatten)]
    pub arguments: RunArguments,
}

/// A run's explicit arguments, as `trigger` and the reruns take them.
#[derive(Debug, Args)]
pub struct RunArguments {
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
    /// Split the run into N shards, each a child run given `SCRINALIA_SHARD=i/N` (the worker must declare that it
    /// takes a shard); 1 is one plain run.
    #[arg(long, value_name = "N")]
    pub shards: Option<i64>,
    /// The run's priority, 0 to 100 (higher goes first among runs waiting for the same resource or slots); above
    /// the worker's own needs the admin role.
    #[arg(long, value_name = "0-100", allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Cancel the request (`expired`) if no daemon has claimed it this many seconds after it is due.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub expires_after_seconds: Option<i64>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::args::{Cli, Command};

    #[test]
    fn a_rerun_takes_the_arguments_a_trigger_takes() {
        let parsed = Cli::try_parse_from(["scrinalia", "rerun-failed", &Uuid::nil().to_string(), "--preset", "p"]);
        let Ok(Cli { command: Command::RerunFailed(args), .. }) = parsed else { panic!("parses: {parsed:?}") };
        assert_eq!((args.arguments.preset.as_deref(), args.arguments.options.len()), (Some("p"), 0));
        let parsed = Cli::try_parse_from(["scrinalia", "rerun", &Uuid::nil().to_string(), "-o", "n=3", "-o", "s=x"]);
        let Ok(Cli { command: Command::Rerun(args), .. }) = parsed else { panic!("parses: {parsed:?}") };
        assert_eq!(args.arguments.options, [("n".to_owned(), json!(3)), ("s".to_owned(), json!("x"))]);
    }

    #[test]
    fn trigger_and_runs_take_tags() {
        let parsed =
            Cli::try_parse_from(["scrinalia", "trigger", "w", "--tag", "collection:1921-letters", "--tag", "b"]);
        let Ok(Cli { command: Command::Trigger(args), .. }) = parsed else { panic!("parses: {parsed:?}") };
        assert_eq!(args.tags, ["collection:1921-letters", "b"]);
        let parsed = Cli::try_parse_from(["scrinalia", "runs", "--tag", "b"]);
        let Ok(Cli { command: Command::Runs(args), .. }) = parsed else { panic!("parses: {parsed:?}") };
        assert_eq!(crate::commands::runs_query(&args), [("tag", "b".to_owned())]);
    }
}
