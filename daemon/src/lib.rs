//! The Scrinalia scheduler daemon: claims run requests from the database, runs each worker under a per-run
//! supervisor that fences it by its lease, writes the ledger, recovers expired runs, and takes its turn at the
//! workers' chores (describing them, counting their queues, checking their readiness), and fires schedules.
//! `main.rs` only parses the command line and wires the signals; everything else starts from [`run`] (which
//! takes its shutdown as an argument, so that a test or another program can run a daemon in-process) and
//! [`supervisor::supervise`].

pub mod backlog;
pub mod bulk;
pub mod cgroup;
pub mod chores;
pub mod clock;
pub mod frame;
pub mod invocation;
pub mod item_files;
pub mod items;
pub mod lease;
pub mod main_loop;
pub mod metrics;
pub mod notifier;
pub mod outcome;
pub mod progress;
pub mod pruner;
pub mod registry;
pub mod rescuer;
pub mod run_limits;
pub mod runlog;
pub mod runner;
pub mod scheduler;
pub mod shutdown;
pub mod slots;
pub mod spare;
pub mod stall;
pub mod supervisor;
pub mod systemd;
pub mod verb;
pub mod worker_env;
pub mod yielding;

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use scrinalia_shared::{
    DaemonStore, Settings, changes::Topic, logstore::LogStore, runs::Placement, telemetry::Telemetry,
};
use tokio::{sync::Notify, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

pub use crate::shutdown::Shutdown;
use crate::{main_loop::MainLoop, systemd::Notifier};

/// What every part of a running daemon shares.
#[derive(Debug)]
pub struct Context {
    /// The database.
    pub db: DaemonStore,
    /// A connection of its own for claims and the worker-started write that follows one, so that each costs one
    /// round trip, never behind a ping (PostgreSQL; on SQLite, `db`).
    pub claims: DaemonStore,
    /// The configuration.
    pub settings: Settings,
    /// This instance's id, fresh at every start.
    pub daemon_id: Uuid,
    /// Where run logs go.
    pub logs: LogStore,
    /// The program started as each run's supervisor: the daemon's own executable, unless configured.
    pub supervisor: PathBuf,
    /// The daemon's folder, where bare worker commands are looked up first.
    pub exe_dir: PathBuf,
    /// What its runs did, for `/metrics` and OTLP.
    pub metrics: metrics::DaemonMetrics,
    /// Which runs it may take: its labels (with its host name) against the workers' required labels, and the
    /// workers that hold shared resources.
    pub placement: Placement,
    /// What every worker's environment starts from (the allow-list of the daemon's own, `daemon.worker_env`).
    pub worker_env: worker_env::WorkerEnv,
    /// The supervisor started ahead of the next run.
    pub spares: spare::Spares,
    /// Where the cgroups of runs with limits go, and which limits this host can enforce.
    pub cgroups: cgroup::Cgroups,
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): another process of the same user, such as a worker,
/// can then neither read its `/proc/<pid>/environ` (the database URL with its password) or its memory nor trace
/// it; only root can. An exec resets the flag, so the daemon and each supervisor call this first thing. The
/// price: no core dump of the daemon.
pub fn not_dumpable() -> anyhow::Result<()> {
    nix::sys::prctl::set_dumpable(false).context("make the process non-dumpable (prctl PR_SET_DUMPABLE)")
}

/// This host's name, as the daemon registers it and advertises it as a label.
pub fn host_name() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "unknown".to_owned())
}

/// The placement of a daemon with `settings` on this host.
pub fn placement_of(settings: &Settings) -> Placement {
    let labels = settings.daemon.labels.iter().cloned().chain([host_name()]);
    Placement::of_daemon(&settings.catalogue, labels, &settings.daemon.resources)
}

/// Runs the daemon until `shutdown` asks it to stop or it is drained through the database. `telemetry` says
/// whether metrics are exported over OTLP too.
pub async fn run(settings: Settings, telemetry: &Telemetry, shutdown: Shutdown) -> anyhow::Result<()> {
    // Again here for a program that embeds the daemon (main.rs does it before anything else).
    not_dumpable()?;
    let systemd = Notifier::from_env();
    let Some(db) = connect(&settings, &shutdown, &systemd).await? else { return Ok(()) };
    db.migrate().await.context("apply the database migrations")?;
    let claims = db.dedicated().await.context("open the claim connection")?;
    let logs = LogStore::open(&settings.object_store).context("open the run-log store")?;
    let own_exe = std::env::current_exe().context("find the daemon's own executable")?;
    let exe_dir = own_exe.parent().map(PathBuf::from).unwrap_or_default();
    let supervisor = settings.daemon.supervisor_program.clone().unwrap_or(own_exe);
    let daemon_id = Uuid::now_v7();
    let metrics = metrics::DaemonMetrics::new(telemetry.meter("scrinalia-daemon"), daemon_id, settings.daemon.capacity);
    let placement = placement_of(&settings);
    tracing::info!(labels = ?placement.labels(), "the labels this daemon advertises");
    let worker_env = worker_env::WorkerEnv::new(std::env::vars_os(), &settings.daemon);
    worker_env.log();
    // Before any child process exists: on cgroup v2 the daemon moves itself into a leaf of its own cgroup, and
    // a process started earlier would stay behind in the inner node.
    let cgroups = match settings.daemon.cgroups {
        true => cgroup::Cgroups::prepare(cgroup::Hierarchy::of_this_process()),
        false => cgroup::Cgroups::off("cgroups are turned off for this daemon (daemon.cgroups = false)"),
    };
    cgroups.log();
    let spares = spare::Spares::new(supervisor.clone(), worker_env.inherited.clone());
    spares.refill();
    let ctx = Arc::new(Context {
        db,
        claims,
        settings,
        daemon_id,
        logs,
        supervisor,
        exe_dir,
        metrics,
        placement,
        worker_env,
        spares,
        cgroups,
    });
    let span = tracing::info_span!(scrinalia_shared::telemetry::PROCESS_SPAN, daemon_id = %ctx.daemon_id);
    // The main loop runs as a task on a runtime worker, not on the thread blocked in `block_on`: a notification
    // or a claim's answer then wakes it on the worker that read it instead of waking a second, idle thread
    // (seen with strace: one futex wake-up per hand-off; too small to show in the latency bench on this VM).
    tokio::spawn(serve(ctx, shutdown, systemd).instrument(span)).await.context("the daemon's main task failed")?
}

/// Connects, retrying while the database is unreachable (a daemon started before its database waits for it).
async fn connect(settings: &Settings, shutdown: &Shutdown, systemd: &Notifier) -> anyhow::Result<Option<DaemonStore>> {
    let mut wait = Duration::from_millis(500);
    loop {
        match DaemonStore::connect(&settings.database, "scrinalia-daemon").await {
            Ok(db) => return Ok(Some(db)),
            Err(e) if e.is_unavailable() => {
                tracing::warn!(url = %settings.database.redacted_url(), error = %e, "the database is unreachable; retrying");
                systemd.status(&format!("waiting for the database: {e}"));
            }
            Err(e) => return Err(e).context(format!("connect to {}", settings.database.redacted_url())),
        }
        tokio::select! {
            () = shutdown.graceful.cancelled() => return Ok(None),
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

async fn serve(ctx: Arc<Context>, shutdown: Shutdown, systemd: Notifier) -> anyhow::Result<()> {
    let background = CancellationToken::new();
    let mut tasks = JoinSet::new();
    if let Some(listen) = ctx.settings.daemon.metrics_listen {
        tasks.spawn(metrics::serve(listen, ctx.clone(), background.clone()).await?.in_current_span());
    }
    // A connection cut at this moment (a failover, an operator terminating backends) fails one attempt, not the
    // start: registering is an upsert of this instance's own row, safe to repeat.
    let mut attempt = 1;
    let registered = loop {
        match registry::register(&ctx).await {
            Err(e) if e.is_unavailable() && attempt < 10 => {
                tracing::warn!(error = %e, attempt, "could not register the daemon; trying again");
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            other => break other.context("register the daemon")?,
        }
    };
    let daemon = &ctx.settings.daemon;
    tracing::info!(host = %registered.host, pid = registered.pid, version = %registered.version, capacity = daemon.capacity,
        workers = ?daemon.workers, lease_s = daemon.lease_seconds, backend = ?ctx.db.backend(), "daemon started");
    let (drain, heartbeat_now) = (CancellationToken::new(), Arc::new(Notify::new()));
    tasks.spawn(
        registry::heartbeats(ctx.clone(), background.clone(), drain.clone(), heartbeat_now.clone()).in_current_span(),
    );
    tasks.spawn(rescuer::run(ctx.clone(), background.clone()).in_current_span());
    tasks.spawn(pruner::run(ctx.clone(), background.clone()).in_current_span());
    tasks.spawn(notifier::run(ctx.clone(), background.clone()).in_current_span());
    let chores_now = Arc::new(Notify::new());
    tasks.spawn(chores::run(ctx.clone(), chores_now.clone(), background.clone()).in_current_span());
    let bulk_now = Arc::new(Notify::new());
    tasks.spawn(bulk::run(ctx.clone(), bulk_now.clone(), background.clone()).in_current_span());
    let backlog_now = Arc::new(Notify::new());
    tasks.spawn(backlog::run(ctx.clone(), backlog_now.clone(), background.clone()).in_current_span());
    let wakes = scheduler::Wakes::default();
    tasks.spawn(scheduler::run(ctx.clone(), wakes.clone(), background.clone()).in_current_span());
    let changes = ctx.db.changes(Topic::Queue).context("start the change feed")?;
    systemd.ready("started");
    let inputs = main_loop::Inputs {
        changes,
        shutdown,
        drain,
        heartbeat_now,
        chores_now,
        bulk_now,
        scheduler: wakes,
        backlog_now,
    };
    MainLoop::new(ctx.clone(), systemd).run(inputs).await;
    background.cancel();
    if tokio::time::timeout(Duration::from_secs(10), async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!("some background tasks did not stop in time");
    }
    if let Err(e) = ctx.db.mark_daemon_stopped(ctx.daemon_id).await {
        tracing::warn!(error = %e, "could not mark the daemon stopped; it will be marked gone when its heartbeat ages");
    }
    ctx.cgroups.release();
    ctx.claims.close().await;
    ctx.db.close().await;
    tracing::info!("daemon stopped");
    Ok(())
}
