//! One function per subcommand: call the API, then print a table (or the API's JSON with `--json`).

use std::collections::BTreeMap;

use anyhow::Context;
use scrinalia_wire::{
    CancelKind, CancelView, ChoreKind, ChoreRequested, Daemon, DaemonsView, ExplicitArgs, HealthView, Named, Run,
    RunDetail, RunPage, Status, TriggerBody, WorkerView, WorkersView,
};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    args::{Cli, Command, RerunArgs, RunArguments, RunCommand, RunsArgs, RunsCommand, TokenCommand, TriggerArgs},
    client::Client,
    exit::{Exit, Verdict},
    follow,
    output::{Out, note},
    pipelines, schedules, token, view,
};

/// Runs the command of `cli`.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let out = Out::new(cli.json);
    if let Command::Token { command: TokenCommand::Hash { new } } = cli.command {
        return token::hash(out, new);
    }
    let token = std::env::var("SCRINALIA_TOKEN").ok();
    let client = Client::new(&cli.api, token.as_deref(), cli.ca_file.as_deref())
        .map_err(|e| Verdict { exit: Exit::Usage, message: format!("{e:#}") })?;
    match cli.command {
        Command::Workers => workers(&client, out).await,
        Command::Worker { command: Some(command), .. } => crate::pauses::run(&client, out, command).await,
        Command::Worker { name: Some(name), command: None } => worker(&client, out, &name).await,
        Command::Worker { name: None, command: None } => {
            Err(Verdict { exit: Exit::Usage, message: "Give a worker's name: scrinalia worker NAME.".into() }.into())
        }
        Command::Describe { worker } => chore(&client, out, &worker, ChoreKind::Describe).await,
        Command::Count { worker } => chore(&client, out, &worker, ChoreKind::Count).await,
        Command::Check { worker } => chore(&client, out, &worker, ChoreKind::Check).await,
        Command::Runs(RunsArgs { command: Some(RunsCommand::Export { before, worker }), .. }) => {
            export(&client, out, before, worker).await
        }
        Command::Runs(RunsArgs { command: Some(RunsCommand::Bulk(args)), .. }) => {
            crate::bulk::bulk(&client, out, args).await
        }
        Command::Runs(RunsArgs { command: Some(RunsCommand::BulkStatus { id, wait }), .. }) => {
            crate::bulk::status(&client, out, id, wait).await
        }
        Command::Runs(args) if args.follow => follow::runs(&client, out, &runs_query(&args)).await,
        Command::Runs(args) => runs(&client, out, &args).await,
        Command::Run { command: RunCommand::Show { id } } => show(&client, out, id).await,
        Command::Trigger(args) => trigger(&client, out, args).await,
        Command::Cancel { id } => cancel(&client, out, id).await,
        Command::Why { id } => why(&client, out, id).await,
        Command::Resume { id } => continue_run(&client, out, id, "resume", None).await,
        Command::Restart { id } => continue_run(&client, out, id, "restart", None).await,
        Command::Rerun(RerunArgs { id, arguments }) => {
            continue_run(&client, out, id, "rerun", Some(explicit(arguments)?)).await
        }
        Command::RerunFailed(RerunArgs { id, arguments }) => {
            continue_run(&client, out, id, "rerun-failed", Some(explicit(arguments)?)).await
        }
        Command::Items { id, outcome, search, after, limit } => {
            crate::items::items(&client, out, id, outcome, search, after, limit).await
        }
        Command::Quarantine { command } => crate::items::quarantine(&client, out, command).await,
        Command::Logs { id, follow: true, tail } => follow::run_to_end(&client, out, id, tail).await,
        Command::Logs { id, follow: false, tail } => logs(&client, out, id, tail).await,
        Command::Schedules { command } => schedules::run(&client, out, command).await,
        Command::Pipelines { command } => pipelines::run(&client, out, command).await,
        Command::Resources { command } => crate::resources::run(&client, out, command).await,
        Command::Overrides { command } => crate::overrides::run(&client, out, command).await,
        Command::Tokens { command } => crate::tokens::run(&client, out, command).await,
        Command::Daemons => daemons(&client, out).await,
        Command::Drain { id } => drain(&client, out, id).await,
        Command::Health => health(&client, out).await,
        // Answered above, without a client: hashing a token needs no API.
        Command::Token { .. } => Ok(()),
    }
}

async fn workers(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["workers"], &[]).await.context("listing the workers")?;
    if out.json {
        return out.body(&body);
    }
    let view: WorkersView = body.parse()?;
    let mut text = view::workers_table(&view).render(out.colour);
    let notes = view::workers_notes(&view);
    if !notes.is_empty() {
        text = format!("{}\n\n{}", text.trim_end(), notes.join("\n"));
    }
    out.text(&text)
}

async fn worker(client: &Client, out: Out, name: &str) -> anyhow::Result<()> {
    let body = client.get(&["workers", name], &[]).await.with_context(|| format!("reading worker {name}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: WorkerView = body.parse()?;
    out.text(&view::worker_detail(&view, out.colour))
}

/// Asks for a chore of `worker` now; the API answers at once (202) and a daemon does it within seconds.
async fn chore(client: &Client, out: Out, worker: &str, kind: ChoreKind) -> anyhow::Result<()> {
    let verb = kind.name();
    let body = client
        .post::<()>(&["workers", worker, verb], None)
        .await
        .with_context(|| format!("asking for a {verb} of {worker}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: ChoreRequested = body.parse()?;
    let follow = match kind {
        ChoreKind::Describe | ChoreKind::Check => format!("See what it said with: scrinalia worker {worker}"),
        ChoreKind::Count => format!("See the queue with: scrinalia worker {worker}"),
    };
    out.text(&format!("{}\n{follow}", view.message))
}

/// The query string of `scrinalia runs`.
pub fn runs_query(args: &RunsArgs) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if let Some(w) = &args.worker {
        query.push(("worker", w.clone()));
    }
    if let Some(s) = args.state {
        query.push(("state", s.as_str().to_owned()));
    }
    if let Some(t) = &args.tag {
        query.push(("tag", t.clone()));
    }
    if let Some(l) = args.limit {
        query.push(("limit", l.to_string()));
    }
    query
}

async fn runs(client: &Client, out: Out, args: &RunsArgs) -> anyhow::Result<()> {
    let body = client.get(&["runs"], &runs_query(args)).await.context("listing the runs")?;
    if out.json {
        return out.body(&body);
    }
    let page: RunPage = body.parse()?;
    if page.runs.is_empty() {
        note("No runs match.");
        return Ok(());
    }
    out.text(&view::runs_table(&page.runs).render(out.colour))?;
    if page.next.is_some() {
        note(&format!("Showing the newest {}; use --limit (up to 500) for more.", page.runs.len()));
    }
    Ok(())
}

async fn show(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let body = client.get(&["runs", &id.to_string()], &[]).await.with_context(|| format!("reading run {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let detail: RunDetail = body.parse()?;
    out.text(&view::run_detail(&detail, out.colour))
}

/// The `--option` values by name; a name given twice is a usage error.
pub fn options_once(given: Vec<(String, Value)>) -> Result<BTreeMap<String, Value>, Verdict> {
    let mut options = BTreeMap::new();
    for (name, value) in given {
        if options.insert(name.clone(), value).is_some() {
            let message = format!("--option {name} is given twice; give each option once.");
            return Err(Verdict { exit: Exit::Usage, message });
        }
    }
    Ok(options)
}

/// The explicit arguments of `--engine`, `--preset` and `--option`s.
fn explicit(given: RunArguments) -> Result<ExplicitArgs, Verdict> {
    let options = options_once(given.options)?;
    Ok(ExplicitArgs {
        engine: given.engine,
        preset: given.preset,
        options,
        shards: given.shards,
        priority: given.priority,
        expires_after_seconds: given.expires_after_seconds,
        ..ExplicitArgs::default()
    })
}

async fn trigger(client: &Client, out: Out, args: TriggerArgs) -> anyhow::Result<()> {
    let arguments = TriggerBody { arguments: explicit(args.arguments)?, tags: args.tags };
    let body = client
        .post(&["workers", &args.worker, "runs"], Some(&arguments))
        .await
        .with_context(|| format!("requesting a run of {}", args.worker))?;
    let run: Run = body.parse()?;
    let split = run.shards.map(|n| format!(", split into {n} shards")).unwrap_or_default();
    let queued = format!("Queued run {} of worker {}{split}.", run.id, run.worker);
    if args.follow {
        note(&format!("{queued} Following its output; Ctrl-C stops following, not the run."));
        return follow::run_to_end(client, out, run.id, None).await;
    }
    if out.json {
        return out.body(&body);
    }
    out.text(&format!("{queued}\nFollow it with: scrinalia logs {} --follow", run.id))
}

async fn cancel(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let body = client
        .post::<()>(&["runs", &id.to_string(), "cancel"], None)
        .await
        .with_context(|| format!("cancelling run {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: CancelView = body.parse()?;
    let text = match view.outcome {
        CancelKind::Cancelled => format!("Run {id} of worker {} was queued and is now cancelled.", view.run.worker),
        CancelKind::Requested => format!(
            "Cancellation of run {id} of worker {} requested; its daemon is stopping the worker (see: scrinalia run show {id}).",
            view.run.worker
        ),
    };
    out.text(&text)
}

/// Why run `id` waits: the code and sentence the API computed, or its state when it is not queued.
async fn why(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let body = client.get(&["runs", &id.to_string()], &[]).await.with_context(|| format!("reading run {id}"))?;
    let detail: RunDetail = body.parse()?;
    if out.json {
        return out.json_line(&serde_json::to_value(&detail.waiting)?);
    }
    match &detail.waiting {
        Some(waiting) => {
            out.text(&format!("{} ({})", waiting.message, serde_json::to_value(waiting.code)?.as_str().unwrap_or("?")))
        }
        None => out.text(&format!("Run {id} is not waiting: it is {}.", detail.run.state)),
    }
}

/// `resume`, `restart`, `rerun` or `rerun-failed` run `id`: a new run that continues it; a rerun's `changes` go
/// over the earlier run's arguments.
async fn continue_run(
    client: &Client,
    out: Out,
    id: Uuid,
    how: &str,
    changes: Option<ExplicitArgs>,
) -> anyhow::Result<()> {
    // No flags, no body: exactly the rerun the API made before it took one.
    let changes = changes.filter(|c| !c.is_empty());
    let path = ["runs", &id.to_string(), how];
    let body = client.post(&path, changes.as_ref()).await.with_context(|| format!("{how} run {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let run: Run = body.parse()?;
    let from = match how {
        "resume" => "from its last checkpoint",
        "rerun" => "with today's configuration",
        "rerun-failed" => "with only the items it reported failed",
        _ => "from nothing",
    };
    let with = if changes.is_some() { ", and the arguments given here over its own" } else { "" };
    out.text(&format!(
        "Run {} of worker {} is queued: it continues run {id} {from}{with} (see: scrinalia run show {}).",
        run.id, run.worker, run.id
    ))
}

/// Prints the log as it arrives, so that a log of any size goes through in small blocks.
async fn logs(client: &Client, out: Out, id: Uuid, tail: Option<u64>) -> anyhow::Result<()> {
    let query: Vec<(&str, String)> = tail.map(|n| ("tail", n.to_string())).into_iter().collect();
    let mut response = client
        .stream(&["runs", &id.to_string(), "log"], &query)
        .await
        .with_context(|| format!("reading the log of run {id}"))?;
    while let Some(chunk) = response.chunk().await.with_context(|| format!("reading the log of run {id}"))? {
        out.bytes(&chunk)?;
    }
    Ok(())
}

/// Copies the export's JSON lines to stdout as they come; a response cut short is an error, never a short file
/// that looks whole.
async fn export(client: &Client, out: Out, before: String, worker: Option<String>) -> anyhow::Result<()> {
    let mut query = vec![("before", before)];
    if let Some(w) = worker {
        query.push(("worker", w));
    }
    let mut response = client.stream(&["runs", "export"], &query).await.context("exporting the prunable runs")?;
    while let Some(chunk) = response.chunk().await.context("reading the export of the prunable runs")? {
        out.bytes(&chunk)?;
    }
    Ok(())
}

async fn daemons(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["daemons"], &[]).await.context("listing the daemons")?;
    if out.json {
        return out.body(&body);
    }
    let view: DaemonsView = body.parse()?;
    if view.daemons.is_empty() {
        note("No daemon has run in the last day: requested runs wait until one starts.");
        return Ok(());
    }
    out.text(&view::daemons_table(&view).render(out.colour))
}

async fn drain(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let body = client
        .post::<()>(&["daemons", &id.to_string(), "drain"], None)
        .await
        .with_context(|| format!("draining daemon {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let d: Daemon = body.parse()?;
    out.text(&format!(
        "Daemon {id} on {} (pid {}) is draining: it claims nothing new, finishes its {} run(s), then stops.",
        d.host, d.pid, d.runs_in_flight
    ))
}

async fn health(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["health"], &[]).await.context("checking health")?;
    let view: HealthView = body.parse()?;
    if out.json {
        out.body(&body)?;
    } else {
        out.text(&view::health_text(&view, out.colour))?;
    }
    if view.status == Status::Ok {
        return Ok(());
    }
    let failing: Vec<&str> = view.checks.iter().filter(|c| c.status != Status::Ok).map(|c| c.name.as_str()).collect();
    let message = format!("health is {}: {}", view.status, failing.join(", "));
    Err(Verdict { exit: Exit::Error, message }.into())
}
