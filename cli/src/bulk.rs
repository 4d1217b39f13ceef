//! `scrinalia runs bulk`: one action (cancel, rerun, resume) on every run a ledger filter matches. It always
//! shows the dry run first (the count, the newest runs, the snapshot); acting needs a reason and the count
//! confirmed, typed at the prompt or given with `--yes --expect N` in a script. The daemons then work it in
//! batches: `--wait` prints its progress until it is done, and `scrinalia runs bulk-status ID` reads it later.

use std::{
    collections::BTreeMap,
    io::{self, BufRead, IsTerminal, Write},
    time::Duration,
};

use anyhow::Context;
use clap::Args;
use scrinalia_wire::{BulkAction, BulkActionKind, BulkPreview, BulkRequest, Reason, RunState};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    args::parse_reason,
    client::Client,
    exit::{Exit, Verdict},
    output::{Out, note},
};

/// How often `--wait` reads the progress.
const POLL: Duration = Duration::from_secs(1);

/// `scrinalia runs bulk`.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// What to do to each matching run: cancel, rerun or resume (a rerun or resume makes at most one run per
    /// worker, from its newest matching run).
    #[arg(long, value_name = "ACTION")]
    pub action: BulkActionKind,
    /// Only runs of this worker.
    #[arg(long, value_name = "WORKER")]
    pub worker: Option<String>,
    /// Only runs in this state (queued, running, succeeded, failed, cancelled, interrupted).
    #[arg(long, value_name = "STATE")]
    pub state: Option<RunState>,
    /// Only runs requested at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Only runs requested before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    /// Only runs requested by this caller (the exact name).
    #[arg(long, value_name = "NAME")]
    pub requested_by: Option<String>,
    /// Only runs whose error contains this text, whatever its case.
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Only this run, or the runs whose id starts with these hex digits (4 or more).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Only runs that carry this tag (`collection:1921-letters`).
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// Only show what would be acted on (the count, the newest runs, the snapshot); change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Why (required to act; kept with the action).
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Option<Reason>,
    /// Act without asking, if the count is the one given with --expect.
    #[arg(long, requires = "expect")]
    pub yes: bool,
    /// The count the dry run showed, to confirm without a prompt (with --yes).
    #[arg(long, value_name = "N")]
    pub expect: Option<u64>,
    /// After acting, print the progress until every run has its outcome.
    #[arg(long)]
    pub wait: bool,
}

impl BulkArgs {
    /// The ledger filter, with the field names of `GET /api/runs`'s query.
    fn filter(&self) -> BTreeMap<String, Value> {
        let fields = [
            ("worker", self.worker.clone()),
            ("state", self.state.map(|s| s.as_str().to_owned())),
            ("from", self.from.clone()),
            ("to", self.to.clone()),
            ("requested_by", self.requested_by.clone()),
            ("q", self.error.clone()),
            ("id", self.id.clone()),
            ("tag", self.tag.clone()),
        ];
        fields.into_iter().filter_map(|(k, v)| Some((k.to_owned(), Value::String(v?)))).collect()
    }
}

/// Runs `scrinalia runs bulk`.
pub async fn bulk(client: &Client, out: Out, args: BulkArgs) -> anyhow::Result<()> {
    let filter = args.filter();
    let dry =
        BulkRequest { filter: filter.clone(), action: Some(args.action), dry_run: true, ..BulkRequest::default() };
    let body = client.post(&["runs", "bulk"], Some(&dry)).await.context("counting the matching runs")?;
    let preview: BulkPreview = body.parse()?;
    if args.dry_run {
        return if out.json { out.body(&body) } else { out.text(&preview_text(&preview)) };
    }
    let Some(reason) = args.reason else {
        let message = "--reason is required to act (it is kept with the action); --dry-run only shows.".to_owned();
        return Err(Verdict { exit: Exit::Usage, message }.into());
    };
    let expect = match (args.yes, args.expect) {
        (true, Some(n)) => n,
        _ => confirm(&preview, args.expect)?,
    };
    if expect != preview.count {
        let message = format!(
            "The filter matches {} runs now, not the {expect} confirmed; nothing was done. Look again with --dry-run.",
            preview.count
        );
        return Err(Verdict { exit: Exit::Conflict, message }.into());
    }
    let real = BulkRequest {
        filter,
        action: Some(args.action),
        dry_run: false,
        expect_count: Some(expect),
        snapshot: preview.snapshot,
        reason: Some(reason.to_string()),
    };
    let body = client.post(&["runs", "bulk"], Some(&real)).await.context("storing the bulk action")?;
    let stored: BulkAction = body.parse()?;
    if !args.wait {
        if out.json {
            return out.body(&body);
        }
        return out.text(&format!(
            "Bulk {} {} of {} runs stored; the daemons work it in batches.\nFollow it with: scrinalia runs \
             bulk-status {} --wait",
            stored.action, stored.id, stored.total, stored.id
        ));
    }
    note(&format!("Bulk {} {} of {} runs stored; waiting for the daemons.", stored.action, stored.id, stored.total));
    status(client, out, stored.id, true).await
}

/// Asks on the terminal for the count shown (typed back); without a terminal, a usage error naming the flags.
fn confirm(preview: &BulkPreview, expect: Option<u64>) -> anyhow::Result<u64> {
    if !io::stdin().is_terminal() {
        let message = format!(
            "Confirm with --yes --expect {} (the count shown), or run it on a terminal to be asked.",
            preview.count
        );
        return Err(Verdict { exit: Exit::Usage, message }.into());
    }
    eprintln!("{}", preview_text(preview));
    eprint!(
        "Type the count ({}) to {} them{}: ",
        preview.count,
        preview.action,
        expect.map(|e| format!(" (you gave --expect {e})")).unwrap_or_default()
    );
    io::stderr().flush().ok();
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line).context("reading the confirmation")?;
    line.trim()
        .parse::<u64>()
        .map_err(|_| Verdict { exit: Exit::Usage, message: "Not confirmed: nothing was done.".to_owned() }.into())
}

/// The dry run, for people.
fn preview_text(preview: &BulkPreview) -> String {
    let mut text = format!("{}\n", preview.message);
    for run in &preview.sample {
        text.push_str(&format!(
            "  {}  {:<20} {:<11} {}\n",
            run.id,
            run.worker,
            run.state,
            run.requested_at.to_rfc3339()
        ));
    }
    if preview.count > preview.sample.len() as u64 {
        text.push_str(&format!("  … and {} more\n", preview.count - preview.sample.len() as u64));
    }
    if let Some(s) = preview.snapshot {
        text.push_str(&format!(
            "Snapshot: run {} requested at {} (runs after it are left alone).",
            s.id,
            s.requested_at.to_rfc3339()
        ));
    }
    text
}

/// Runs `scrinalia runs bulk-status ID`: the action's progress, until it is done with `wait`.
pub async fn status(client: &Client, out: Out, id: Uuid, wait: bool) -> anyhow::Result<()> {
    let path = id.to_string();
    let mut last = String::new();
    loop {
        let body =
            client.get(&["runs", "bulk", &path], &[]).await.with_context(|| format!("reading bulk action {id}"))?;
        let action: BulkAction = body.parse()?;
        let finished = !matches!(action.state, scrinalia_wire::BulkState::Queued | scrinalia_wire::BulkState::Running);
        if !wait || finished {
            return if out.json { out.body(&body) } else { out.text(&status_text(&action)) };
        }
        let line = progress_line(&action);
        if line != last {
            note(&line);
            last = line;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn progress_line(a: &BulkAction) -> String {
    format!(
        "{} {}: {} of {} runs have an outcome ({} done, {} skipped, {} failed)",
        a.action,
        a.state,
        a.done + a.skipped + a.failed,
        a.total,
        a.done,
        a.skipped,
        a.failed
    )
}

fn status_text(a: &BulkAction) -> String {
    let mut text = format!(
        "Bulk {} {} by {} at {}: {}\nReason: {}\n{}\n",
        a.action,
        a.id,
        a.requested_by,
        a.requested_at.to_rfc3339(),
        serde_json::to_string(&a.filter).unwrap_or_default(),
        a.reason,
        progress_line(a)
    );
    for r in &a.reasons {
        text.push_str(&format!("  {} {} (e.g. run {}): {}\n", r.count, r.outcome, r.example, r.sentence));
    }
    if let Some(e) = &a.error {
        text.push_str(&format!("Failed: {e}\n"));
    }
    text
}
