//! `scrinalia-bench`: the scheduler's benchmarks against real PostgreSQL, real SQLite files and the real release
//! binaries. Each subcommand prints Markdown table rows (or JSON with `--json`); `all` runs them one after the
//! other. Build the binaries first: `cargo build --release --workspace && target/release/scrinalia-bench all`.
//! docs/benchmarks.md explains every figure.

mod claim_history;
mod counts;
mod drain;
mod env;
mod http;
mod idle;
mod items;
mod latency;
mod ledger;
mod machine;
mod prune;
mod recovery;
mod report;
mod resources;
mod schedules;
mod seed;
mod shards;
mod streams;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::{env::Env, report::Report};

/// Benchmarks of Scrinalia Scheduler (see docs/benchmarks.md).
#[derive(Debug, Parser)]
#[command(name = "scrinalia-bench", version)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct Common {
    /// A PostgreSQL server the bench may create (and drop) databases `scrinalia_bench_<uuid>` on.
    #[arg(
        long,
        global = true,
        env = "SCRINALIA_BENCH_PG",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pg: String,
    /// The folder of the release binaries (default: the folder of this executable, i.e. target/release).
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,
    /// Print one JSON document instead of Markdown rows.
    #[arg(long, global = true)]
    json: bool,
    /// Keep the scratch folder (configurations, daemon and API logs, SQLite files).
    #[arg(long, global = true)]
    keep: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Request → claimed and request → worker started, one request every 20 ms to an idle daemon.
    Latency(latency::Opts),
    /// Draining a backlog over a generated catalogue: the claim path alone, then the full path.
    Drain(drain::Opts),
    /// `GET /api/workers` and `GET /api/runs` over a large ledger, at a fixed rate and at full speed.
    Http(http::Opts),
    /// A daemon's death (SIGKILL) → its run `interrupted` by a sibling.
    Recovery(recovery::Opts),
    /// Item lines against text lines of the same length: wall time, the worker's writes, the daemon's memory;
    /// the reads of a run of 10,000 items.
    Items(items::Opts),
    /// An idle daemon's CPU, queries per second and resident memory.
    Idle(idle::Opts),
    /// What a round of queue counts costs (processes, process-seconds, wall time) with 1 and with 3 daemons.
    Counts(counts::Opts),
    /// Schedules: fire lateness with 3 daemons, and an idle daemon's queries with 1,000 schedules against none.
    Schedules(schedules::Opts),
    /// What a shared resource adds to a claim (A/B: no resource, holding one).
    Resources(resources::Opts),
    /// The panel's reads over a ledger of 10,000,000 runs, 500 requests/s open loop each.
    Ledger(ledger::Opts),
    /// Request → claimed with an empty ledger (A), then with 10,000,000 runs of history (B).
    ClaimHistory(claim_history::Opts),
    /// Claim latency while a retention pass prunes 1,000,000 runs.
    ClaimDuringPrune(prune::Opts),
    /// Sharded runs on 2 and 4 daemons against one run over the same corpus: wall time, speed-up, pickup.
    Shards(shards::Opts),
    /// 1,000 live-event streams on one API: its memory, and an event's delivery to all of them.
    Streams(streams::Opts),
    /// Everything above but the ten-million-row benches (ledger, claim-history), with the default options.
    All(AllOpts),
}

#[derive(Debug, Args)]
struct AllOpts {
    /// Each bench at its smallest size, in well under two minutes: a check that every bench still runs (the test
    /// suite runs it), not a measure.
    #[arg(long)]
    quick: bool,
}

/// Each bench's options for `all`.
fn all_options(quick: bool) -> AllBenches {
    if quick {
        AllBenches {
            latency: latency::Opts::quick(),
            drain: drain::Opts::quick(),
            http: http::Opts::quick(),
            recovery: recovery::Opts::quick(),
            idle: idle::Opts::quick(),
            items: items::Opts::quick(),
            counts: counts::Opts::quick(),
            schedules: schedules::Opts::quick(),
            resources: resources::Opts::quick(),
            prune: prune::Opts::quick(),
            streams: streams::Opts::quick(),
            shards: shards::Opts::quick(),
        }
    } else {
        AllBenches {
            latency: latency::Opts::default(),
            drain: drain::Opts::default(),
            http: http::Opts::default(),
            recovery: recovery::Opts::default(),
            idle: idle::Opts::default(),
            items: items::Opts::default(),
            counts: counts::Opts::default(),
            schedules: schedules::Opts::default(),
            resources: resources::Opts::default(),
            prune: prune::Opts::default(),
            streams: streams::Opts::default(),
            shards: shards::Opts::default(),
        }
    }
}

struct AllBenches {
    latency: latency::Opts,
    drain: drain::Opts,
    http: http::Opts,
    recovery: recovery::Opts,
    idle: idle::Opts,
    items: items::Opts,
    counts: counts::Opts,
    schedules: schedules::Opts,
    resources: resources::Opts,
    prune: prune::Opts,
    streams: streams::Opts,
    shards: shards::Opts,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let bin_dir = match cli.common.bin_dir {
        Some(dir) => dir,
        None => std::env::current_exe()?.parent().map(PathBuf::from).unwrap_or_default(),
    };
    let env = match cli.command {
        // Only the daemon: a folder built with `cargo build --release -p scrinalia-daemon` will do.
        Command::Counts(_) => Env::needing(bin_dir, cli.common.pg, cli.common.keep, &["scrinalia-daemon"])?,
        // The daemon and its probes (the demo worker); no API.
        Command::Schedules(_) => {
            Env::needing(bin_dir, cli.common.pg, cli.common.keep, &["scrinalia-daemon", "scrinalia-demo-worker"])?
        }
        // No process starts: the probes' program is only named in the catalogue.
        Command::Resources(_) => Env::needing(bin_dir, cli.common.pg, cli.common.keep, &["scrinalia-demo-worker"])?,
        _ => Env::new(bin_dir, cli.common.pg, cli.common.keep)?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let machine = machine::describe(&env).await;
        let mut figures = Vec::new();
        match cli.command {
            Command::Latency(o) => figures.extend(latency::run(&env, &o).await?),
            Command::Drain(o) => figures.extend(drain::run(&env, &o).await?),
            Command::Http(o) => figures.extend(http::run(&env, &o).await?),
            Command::Recovery(o) => figures.extend(recovery::run(&env, &o).await?),
            Command::Idle(o) => figures.extend(idle::run(&env, &o).await?),
            Command::Items(o) => figures.extend(items::run(&env, &o).await?),
            Command::Counts(o) => figures.extend(counts::run(&env, &o).await?),
            Command::Schedules(o) => figures.extend(schedules::run(&env, &o).await?),
            Command::Resources(o) => figures.extend(resources::run(&env, &o).await?),
            Command::Ledger(o) => figures.extend(ledger::run(&env, &o).await?),
            Command::ClaimHistory(o) => figures.extend(claim_history::run(&env, &o).await?),
            Command::ClaimDuringPrune(o) => figures.extend(prune::run(&env, &o).await?),
            Command::Streams(o) => figures.extend(streams::run(&env, &o).await?),
            Command::Shards(o) => figures.extend(shards::run(&env, &o).await?),
            Command::All(o) => {
                let started = std::time::Instant::now();
                let all = all_options(o.quick);
                figures.extend(latency::run(&env, &all.latency).await?);
                figures.extend(drain::run(&env, &all.drain).await?);
                figures.extend(http::run(&env, &all.http).await?);
                figures.extend(recovery::run(&env, &all.recovery).await?);
                figures.extend(idle::run(&env, &all.idle).await?);
                figures.extend(items::run(&env, &all.items).await?);
                figures.extend(counts::run(&env, &all.counts).await?);
                figures.extend(schedules::run(&env, &all.schedules).await?);
                figures.extend(resources::run(&env, &all.resources).await?);
                figures.extend(prune::run(&env, &all.prune).await?);
                figures.extend(streams::run(&env, &all.streams).await?);
                figures.extend(shards::run(&env, &all.shards).await?);
                eprintln!("all benches took {:.0} s", started.elapsed().as_secs_f64());
            }
        }
        let mut machine = machine;
        machine::finish(&mut machine);
        Report { machine, figures }.print(cli.common.json);
        anyhow::Ok(())
    })
}
