//! `scrinalia worker pause|resume|pauses NAME`: pause a worker by hand (no run of it is requested until it is
//! resumed), resume it, and read its pause history. Each change needs a reason, kept in the history.

use anyhow::Context;
use clap::{Args, Subcommand};
use scrinalia_wire::{PauseView, Reason, ReasonBody};

use crate::{
    args::parse_reason,
    client::Client,
    output::Out,
    table::{Table, clip},
    view::when,
};

/// `scrinalia worker pause|resume|pauses`.
#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Pause a worker: no run of it is requested (schedules, retries, pipeline steps, a Run) until it is resumed;
    /// its queued retries are cancelled.
    Pause(PauseArgs),
    /// Resume a paused worker: its runs are requested again, and its failures in a row count from 0.
    Resume(PauseArgs),
    /// Whether a worker is paused, and every pause and resume of it, newest first.
    Pauses {
        /// The worker's name.
        name: String,
        /// At most this many entries (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

/// `scrinalia worker pause|resume NAME --reason …`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The worker's name.
    pub name: String,
    /// Why (required; kept in the pause history).
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Reason,
}

/// Runs `command`.
pub async fn run(client: &Client, out: Out, command: WorkerCommand) -> anyhow::Result<()> {
    match command {
        WorkerCommand::Pause(args) => toggle(client, out, args, true).await,
        WorkerCommand::Resume(args) => toggle(client, out, args, false).await,
        WorkerCommand::Pauses { name, limit } => history(client, out, &name, limit).await,
    }
}

async fn toggle(client: &Client, out: Out, args: PauseArgs, pausing: bool) -> anyhow::Result<()> {
    let (verb, doing) = if pausing { ("pause", "pausing") } else { ("resume", "resuming") };
    let body = client
        .post(&["workers", &args.name, verb], Some(&ReasonBody::new(args.reason.to_string())))
        .await
        .with_context(|| format!("{doing} worker {}", args.name))?;
    if out.json {
        return out.body(&body);
    }
    let view: PauseView = body.parse()?;
    let text = match &view.paused {
        Some(p) => format!(
            "Worker {} is paused (since {}, by {}: {}): no run of it is requested until it is resumed \
             (scrinalia worker resume {} --reason …).",
            view.worker,
            when(p.at),
            p.by,
            p.reason,
            view.worker
        ),
        None => format!("Worker {} is resumed: its runs are requested again.", view.worker),
    };
    out.text(&text)
}

async fn history(client: &Client, out: Out, name: &str, limit: u32) -> anyhow::Result<()> {
    let body = client
        .get(&["workers", name, "pauses"], &[("limit", limit.to_string())])
        .await
        .with_context(|| format!("reading the pauses of worker {name}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: PauseView = body.parse()?;
    let mut table = Table::new(&["WHEN", "ACTION", "BY", "REASON"]);
    for entry in &view.history {
        let action = if entry.automatic { format!("{} (automatic)", entry.action) } else { entry.action.to_string() };
        table.row(vec![
            when(entry.at).into(),
            action.into(),
            entry.actor.as_str().into(),
            clip(&entry.reason, 100).into(),
        ]);
    }
    let head = match &view.paused {
        Some(p) => format!("Worker {} is paused since {} (by {}: {}).", view.worker, when(p.at), p.by, p.reason),
        None => format!("Worker {} is not paused.", view.worker),
    };
    out.text(&format!("{head}\n\n{}", table.render(out.colour)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    #[test]
    fn worker_name_still_shows_a_worker_and_pause_resume_take_a_reason() {
        let shown = Cli::try_parse_from(["scrinalia", "worker", "embed"]).expect("parses");
        assert!(matches!(shown.command, Command::Worker { name: Some(ref n), command: None } if n == "embed"));
        let paused = Cli::try_parse_from(["scrinalia", "worker", "pause", "embed", "--reason", "model server down"])
            .expect("parses");
        let Command::Worker { command: Some(WorkerCommand::Pause(args)), name: None } = paused.command else {
            panic!("a pause: {paused:?}")
        };
        assert_eq!((args.name.as_str(), args.reason.as_str()), ("embed", "model server down"));
        assert!(Cli::try_parse_from(["scrinalia", "worker", "resume", "embed"]).is_err(), "a resume needs --reason");
        assert!(Cli::try_parse_from(["scrinalia", "worker", "pause", "embed", "--reason", " "]).is_err());
        let history = Cli::try_parse_from(["scrinalia", "worker", "pauses", "embed"]).expect("parses");
        assert!(matches!(
            history.command,
            Command::Worker { command: Some(WorkerCommand::Pauses { limit: 100, .. }), .. }
        ));
    }
}
