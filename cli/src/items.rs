//! `scrinalia items …` and `scrinalia quarantine …`: what happened to each document of a run (a page of one
//! outcome, searchable by id), and a worker's quarantine with its release, one item or all, with a reason.

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use scrinalia_wire::{ItemPage, QuarantineView, Reason, ReleaseBody};
use serde::Deserialize;
use uuid::Uuid;

use crate::{
    args::parse_reason,
    client::Client,
    output::{Out, note},
    table::{Table, clip},
    view::when,
};

/// An item outcome to list.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Outcome {
    /// Processed.
    Succeeded,
    /// Failed, with a class and an error.
    Failed,
    /// Skipped (quarantined, or not pending).
    Skipped,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

/// Prints one page of a run's items.
pub async fn items(
    client: &Client,
    out: Out,
    id: Uuid,
    outcome: Option<Outcome>,
    search: Option<String>,
    after: Option<String>,
    limit: u32,
) -> anyhow::Result<()> {
    let mut query = vec![("limit", limit.to_string())];
    query.extend(outcome.map(|o| ("outcome", o.name().to_owned())));
    query.extend(search.map(|s| ("search", s)));
    query.extend(after.map(|a| ("after", a)));
    let body = client
        .get(&["runs", &id.to_string(), "items"], &query)
        .await
        .with_context(|| format!("the items of run {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let page: ItemPage = body.parse()?;
    if page.items.is_empty() {
        note(&format!("Run {id} has no such items."));
        return Ok(());
    }
    let mut table = Table::new(&["ITEM", "OUTCOME", "CLASS", "ERROR"]);
    for item in &page.items {
        table.row(vec![
            item.id.as_str().into(),
            item.outcome.as_str().into(),
            item.class.as_deref().unwrap_or_default().into(),
            clip(item.error.as_deref().unwrap_or_default(), 80).into(),
        ]);
    }
    out.text(&table.render(out.colour))?;
    if let Some(next) = page.next_after {
        note(&format!("More: scrinalia items {id} --after {next}"));
    }
    Ok(())
}

/// `scrinalia quarantine …`.
#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// List a worker's quarantined items, with their last errors and the last releases.
    List {
        /// The worker's name.
        worker: String,
    },
    /// Release a quarantined item (or, with --all, every one): later runs process it again.
    Release {
        /// The worker's name.
        worker: String,
        /// The item's id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        item: Option<String>,
        /// Release every quarantined item of the worker.
        #[arg(long)]
        all: bool,
        /// Why (required; kept in the audit trail).
        #[arg(long, value_name = "REASON", value_parser = parse_reason)]
        reason: Reason,
    },
}

/// What a release answered.
#[derive(Debug, Deserialize)]
struct Released {
    released: u64,
}

/// Runs `scrinalia quarantine …`.
pub async fn quarantine(client: &Client, out: Out, command: QuarantineCommand) -> anyhow::Result<()> {
    match command {
        QuarantineCommand::List { worker } => list(client, out, &worker).await,
        QuarantineCommand::Release { worker, item, reason, .. } => {
            let body = ReleaseBody { item: item.clone(), reason: Some(reason.to_string()) };
            let reply = client
                .post(&["workers", &worker, "quarantine", "release"], Some(&body))
                .await
                .with_context(|| format!("releasing the quarantine of {worker}"))?;
            if out.json {
                return out.body(&reply);
            }
            let released: Released = reply.parse()?;
            match item {
                Some(item) => out.text(&format!("Item {item} of {worker} is released: its next run processes it.")),
                None => out.text(&format!("{} quarantined items of {worker} are released.", released.released)),
            }
        }
    }
}

async fn list(client: &Client, out: Out, worker: &str) -> anyhow::Result<()> {
    let body = client
        .get(&["workers", worker, "quarantine"], &[])
        .await
        .with_context(|| format!("the quarantine of {worker}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: QuarantineView = body.parse()?;
    let Some(after) = view.quarantine_after else {
        note(&format!("Worker {worker} has no quarantine (quarantine_after is not set in its catalogue entry)."));
        return Ok(());
    };
    if view.items.is_empty() {
        out.text(&format!("No item of {worker} is quarantined (an item is after failing {after} runs in a row)."))?;
    } else {
        let mut table = Table::new(&["ITEM", "FAILED RUNS", "LAST FAILED", "LAST ERROR"]);
        for item in &view.items {
            let last = item.errors.first();
            let error = last.map(|e| {
                let class = e.class.as_deref().map(|c| format!("{c}: ")).unwrap_or_default();
                format!("{class}{}", e.error.as_deref().unwrap_or_default())
            });
            table.row(vec![
                item.id.as_str().into(),
                item.failures.to_string().into(),
                when(item.last_failed_at).into(),
                clip(&error.unwrap_or_default(), 70).into(),
            ]);
        }
        out.text(&format!(
            "{} items of {worker} are quarantined (after {after} failing runs in a row):",
            view.quarantined
        ))?;
        out.text(&table.render(out.colour))?;
    }
    for release in view.releases.iter().take(5) {
        let what = release.item.as_deref().map_or_else(|| format!("all ({})", release.released), str::to_owned);
        note(&format!("released {what} by {} at {}: {}", release.actor, when(release.at), release.reason));
    }
    Ok(())
}
