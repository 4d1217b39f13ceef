//! Chores: describing each worker (what its code declares), counting its queue and checking that it has what it
//! needs. Across all daemons, each chore of a worker is done by one daemon at a time and at most once per
//! interval: a daemon takes a due chore under a lease on the database clock (one statement per look), so M
//! daemons cost what one does. A chore is also done soon after it is asked for: a describe when a daemon starts
//! or an operator asks, a count when one of the worker's runs ends or an operator asks.
//!
//! The verbs run directly (no supervisor: they are read-only and short), never more than `AT_ONCE` at a time
//! per daemon, each killed with its process group at `daemon.queue_count_timeout_seconds`.

use std::{sync::Arc, time::Duration};

use scrinalia_shared::{
    Chore, ChoreKind, ExplicitArgs, WorkerSpec,
    descriptions::{NewDescription, NewReadiness},
    queue::NewQueueCount,
    resolve,
};
use tokio::{
    sync::Notify,
    task::JoinSet,
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    Context,
    invocation::Invocation,
    verb::{self, Measured},
};

/// At most this many chore processes at once on one daemon: a catalogue of thousands of workers must not start
/// thousands of processes at the same instant.
const AT_ONCE: usize = 4;
/// The longest a daemon waits before looking again when nothing is due (a safety net: requests wake it).
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// Looks woken by a change are at least this far apart (SQLite wakes on every write), and a due chore that
/// could not be taken (another daemon holds it, or its worker's describe is under way) is looked at again after
/// this.
const MIN_LOOK_GAP: Duration = Duration::from_millis(250);
/// A look for a chore that comes due comes this much after it, so that it is due on the database clock too.
const DUE_MARGIN: Duration = Duration::from_millis(5);
/// After a failed look, the next one comes this much later.
const RETRY: Duration = Duration::from_secs(1);
/// A chore's lease outlasts its timeout by this much, so a live daemon never loses a chore it is still doing.
const LEASE_MARGIN: Duration = Duration::from_secs(15);

/// The workers this daemon takes.
pub(crate) fn my_workers(ctx: &Context) -> Vec<String> {
    let taken = &ctx.settings.daemon.workers;
    let all = ctx.settings.catalogue.workers.iter().map(|w| w.name.clone());
    all.filter(|n| taken.is_empty() || taken.contains(n)).collect()
}

/// Does chores until `stop`; chores in progress are killed then. `wake` says a chore may have been asked for.
/// Between looks the daemon sleeps until the next chore of its workers comes due (asked on the database
/// clock), so an idle daemon costs no query.
pub async fn run(ctx: Arc<Context>, wake: Arc<Notify>, stop: CancellationToken) {
    let workers = my_workers(&ctx);
    if workers.is_empty() {
        return;
    }
    // The code may have changed with this start (a deploy): describe again, once across daemons starting together.
    let prepared = async {
        ctx.db.prepare_chores(&workers).await?;
        ctx.db.request_chore(&workers, ChoreKind::Describe).await
    };
    if let Err(e) = prepared.await {
        tracing::warn!(error = %e, "could not ask for the workers' descriptions; they are described when asked");
    }
    let limit = Duration::from_secs(ctx.settings.daemon.queue_count_timeout_seconds);
    let intervals = ctx.settings.daemon.chore_intervals();
    let mut doing: JoinSet<()> = JoinSet::new();
    let mut next_look = Instant::now();
    let mut last_look = Instant::now() - MIN_LOOK_GAP;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = sleep_until(next_look) => {}
            () = wake.notified() => {
                // A request is due once it has settled (see `ChoreIntervals::settle`): look then.
                let settled = (Instant::now() + intervals.settle).max(last_look + MIN_LOOK_GAP);
                next_look = next_look.min(settled);
                continue;
            }
            // A chore ended: its slot is free now, so look at once (the gap is for wake-ups and re-looks).
            Some(_) = doing.join_next() => while doing.try_join_next().is_some() {},
        }
        last_look = Instant::now();
        next_look = Instant::now() + LONGEST_WAIT;
        let free = u32::try_from(AT_ONCE.saturating_sub(doing.len())).unwrap_or(0);
        if free == 0 {
            // The next chore to end makes room, and a look then.
            continue;
        }
        match ctx.db.claim_chores(ctx.daemon_id, &workers, &intervals, limit + LEASE_MARGIN, free).await {
            Ok(chores) => {
                for chore in chores {
                    start(&ctx, &mut doing, chore, limit, &stop);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not look for due chores");
                next_look = Instant::now() + RETRY;
                continue;
            }
        }
        if doing.len() >= AT_ONCE {
            continue;
        }
        match ctx.db.next_chore_in(&workers, &intervals).await {
            // Due already (held by another daemon, or waiting for its worker's describe): look again shortly.
            Ok(Some(due_in)) if due_in.is_zero() => next_look = Instant::now() + MIN_LOOK_GAP,
            // Just after it comes due on the database clock.
            Ok(Some(due_in)) => next_look = Instant::now() + (due_in + DUE_MARGIN).min(LONGEST_WAIT),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not read when the next chore is due");
                next_look = Instant::now() + RETRY;
            }
        }
    }
    doing.shutdown().await;
}

/// Starts one chore; its lease is released when it ends, however it ends.
fn start(ctx: &Arc<Context>, doing: &mut JoinSet<()>, chore: Chore, limit: Duration, stop: &CancellationToken) {
    let Some(spec) = ctx.settings.catalogue.worker(&chore.worker).cloned() else { return };
    let (ctx, stop) = (ctx.clone(), stop.clone());
    let span = tracing::info_span!("chore", worker = %spec.name, chore = %chore.chore);
    doing.spawn(
        async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = perform(&ctx, &spec, &chore, limit) => {}
            }
            if let Err(e) = ctx.db.finish_chore(ctx.daemon_id, &chore.worker, chore.chore).await {
                tracing::warn!(error = %e, "could not release the chore; its lease expires instead");
            }
        }
        .instrument(span),
    );
}

/// Does one chore and stores what it found (or the sentence saying why it failed).
async fn perform(ctx: &Context, spec: &WorkerSpec, chore: &Chore, limit: Duration) {
    let started = Instant::now();
    let took_ms = || i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let env = &ctx.worker_env;
    let stored = match chore.chore {
        ChoreKind::Describe => {
            let invocation = Invocation::chore(spec, &ctx.exe_dir, env, "describe", None);
            let answer = verb::answer(&invocation, "describe", limit).await;
            let outcome = answer.and_then(verb::described);
            if let Err(e) = &outcome {
                tracing::warn!(error = %e, "describe failed; runs use the catalogue's declarations");
            }
            let command = spec.command.clone();
            let row = NewDescription {
                worker: spec.name.clone(),
                outcome,
                described_by: ctx.daemon_id,
                command,
                took_ms: took_ms(),
            };
            ctx.db.store_description(&row).await
        }
        ChoreKind::Count => {
            let mut threshold = None;
            let answer = match resolved(ctx, spec).await {
                Ok(config) => {
                    threshold = config.backlog.as_ref().map(|b| i64::try_from(b.value.when_pending_at_least));
                    let invocation = Invocation::chore(spec, &ctx.exe_dir, env, "count-pending", Some(&config));
                    verb::answer(&invocation, "count-pending", limit).await
                }
                Err(e) => Err(e),
            };
            let oldest_pending_at = answer.as_ref().ok().and_then(verb::oldest_pending_at);
            let mut row = NewQueueCount {
                worker: spec.name.clone(),
                pending: None,
                unmeasurable: None,
                done: None,
                error: None,
                took_ms: 0,
                measured_by: ctx.daemon_id,
                oldest_pending_at,
                threshold: threshold.and_then(Result::ok),
            };
            match answer.and_then(|a| verb::measured(&a)) {
                Ok(Measured::Pending(n)) => row.pending = Some(n),
                Ok(Measured::Unmeasurable { reason, done }) => (row.unmeasurable, row.done) = (Some(reason), done),
                Err(e) => {
                    tracing::warn!(error = %e, "count-pending failed");
                    row.error = Some(e);
                }
            }
            row.took_ms = took_ms();
            ctx.db.store_queue_count(&row).await
        }
        ChoreKind::Check => {
            let answer = match resolved(ctx, spec).await {
                Ok(config) => {
                    let invocation = Invocation::chore(spec, &ctx.exe_dir, env, "check", Some(&config));
                    verb::answer(&invocation, "check", limit).await
                }
                Err(e) => Err(e),
            };
            let mut row = NewReadiness {
                worker: spec.name.clone(),
                ready: None,
                reason: None,
                error: None,
                took_ms: 0,
                checked_by: ctx.daemon_id,
            };
            match answer.and_then(|a| verb::checked(&a)) {
                Ok(checked) => (row.ready, row.reason) = (Some(checked.ready), checked.reason),
                Err(e) => {
                    tracing::warn!(error = %e, "check failed");
                    row.error = Some(e);
                }
            }
            row.took_ms = took_ms();
            ctx.db.store_readiness(&row).await
        }
    };
    if let Err(e) = stored {
        tracing::warn!(error = %e, "could not store what the chore found");
    }
}

/// The configuration a run without arguments would use now (the code's defaults, the override), which counts
/// and checks get as flags, so they see the queue the next run would see.
async fn resolved(ctx: &Context, spec: &WorkerSpec) -> Result<scrinalia_shared::ResolvedConfig, String> {
    let catalogue = &ctx.settings.catalogue;
    let read = tokio::try_join!(ctx.db.effective_worker(catalogue, &spec.name), ctx.db.get_override(&spec.name));
    let (worker, current) = read.map_err(|e| format!("could not read the worker's configuration: {e}"))?;
    let worker = worker.ok_or_else(|| format!("worker {:?} is not in the catalogue", spec.name))?;
    resolve(&worker, &ExplicitArgs::default(), current.as_ref().map(|o| &o.values))
        .map_err(|e| format!("the worker's configuration does not resolve: {e}"))
}
