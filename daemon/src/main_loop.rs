//! The daemon's main loop: claims requests when the change feed (or the slow poll) says there may be some, never
//! more than its free slots; starts a run task per claim; passes cancellations on; and drives shutdown and
//! draining until the last run has ended, telling systemd where it is.

use std::{collections::HashMap, sync::Arc, time::Duration};

use scrinalia_shared::{
    Backend, Change, DaemonStore, DbError, Run, changes::ChangeFeed, config::DaemonSettings, runs::Placement,
};
use tokio::{
    sync::{Notify, mpsc, oneshot},
    task::{self, JoinSet},
    time::{Instant, Interval, MissedTickBehavior, interval, sleep_until},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    Context,
    clock::{self, far},
    runner::{self, RunCommand},
    shutdown::Shutdown,
    systemd::Notifier,
    yielding::YieldRefused,
};

/// How often a SQLite daemon with runs in flight looks for cancellation requests.
const SQLITE_CANCEL_POLL: Duration = Duration::from_secs(2);
/// The first retry after a failed claim (doubling up to the poll interval).
const CLAIM_RETRY: Duration = Duration::from_millis(250);

/// Where the daemon is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Claiming requests.
    Claiming,
    /// Claiming nothing; runs finish. With a deadline, the runs still going then are stopped.
    Draining { stop_at: Option<Instant> },
    /// Runs were told to stop.
    Stopping,
}

/// A run in flight.
struct InFlight {
    worker: String,
    commands: mpsc::UnboundedSender<RunCommand>,
    cancel_sent: bool,
    /// Whether its worker was asked to yield (a preemption); it is asked once.
    yield_sent: bool,
}

/// What the main loop waits on besides its own timers.
pub struct Inputs {
    /// The database's changes (topic `Queue`).
    pub changes: ChangeFeed,
    /// Operator signals.
    pub shutdown: Shutdown,
    /// Cancelled when the registry row asks for a drain.
    pub drain: CancellationToken,
    /// Asks the heartbeat task for an immediate heartbeat.
    pub heartbeat_now: Arc<Notify>,
    /// Tells the chores task that a chore may have been asked for.
    pub chores_now: Arc<Notify>,
    /// Tells the bulk task that a bulk action may have been stored.
    pub bulk_now: Arc<Notify>,
    /// Wakes the scheduler task, and is told by it when a queued run's backoff ended.
    pub scheduler: crate::scheduler::Wakes,
    /// Wakes the backlog task: a run ended (its worker's count comes next), or anything was written.
    pub backlog_now: Arc<Notify>,
}

/// The main loop's state.
pub struct MainLoop {
    ctx: Arc<Context>,
    systemd: Notifier,
    mode: Mode,
    tasks: JoinSet<Uuid>,
    task_runs: HashMap<task::Id, Uuid>,
    runs: HashMap<Uuid, InFlight>,
    status: String,
    /// When to claim again after a failed claim.
    retry_at: Instant,
    claim_failures: u32,
    /// False after a claim got fewer requests than it asked for, until something says there may be more (a
    /// change, the slow poll): a run that ends then does not cost a claim that finds nothing.
    maybe_queued: bool,
    graceful_seen: bool,
}

/// How many requests a claim asks for: every free slot.
pub fn free_slots(capacity: u32, in_flight: usize) -> u32 {
    capacity.saturating_sub(u32::try_from(in_flight).unwrap_or(u32::MAX))
}

/// One claim as the daemon makes it: as many of the oldest queued requests this daemon takes and may place as it
/// has free slots, on its claim connection (`Context::claims`), under its lease: one statement for workers that
/// hold no shared resource, one short transaction per worker that does. Public so that the benchmark drives the
/// daemon's own claim code.
pub async fn claim_batch(
    claims: &DaemonStore,
    daemon_id: Uuid,
    settings: &DaemonSettings,
    placement: &Placement,
    in_flight: usize,
) -> Result<Vec<Run>, DbError> {
    let workers = (!settings.workers.is_empty()).then_some(settings.workers.as_slice());
    let free = free_slots(settings.capacity, in_flight);
    claims.claim_placed(daemon_id, settings.lease(), free, workers, placement).await
}

impl MainLoop {
    /// A loop that has claimed nothing yet.
    pub fn new(ctx: Arc<Context>, systemd: Notifier) -> Self {
        Self {
            ctx,
            systemd,
            mode: Mode::Claiming,
            tasks: JoinSet::new(),
            task_runs: HashMap::new(),
            runs: HashMap::new(),
            status: String::new(),
            retry_at: far(),
            claim_failures: 0,
            maybe_queued: true,
            graceful_seen: false,
        }
    }

    /// Runs until shutdown or drain is complete: no claim is possible any more and no run is in flight.
    pub async fn run(mut self, mut inputs: Inputs) {
        let daemon = &self.ctx.settings.daemon;
        let sqlite = self.ctx.db.backend() == Backend::Sqlite;
        let mut poll = ticker(Duration::from_secs(daemon.poll_seconds));
        let mut cancel_poll =
            ticker(if sqlite { SQLITE_CANCEL_POLL } else { Duration::from_secs(daemon.poll_seconds) });
        let mut watchdog = self.systemd.watchdog_every().map(ticker);
        let preempts = self.ctx.settings.catalogue.resources.iter().any(|r| r.preempt_after_seconds.is_some());
        let mut preempt_poll = ticker(PREEMPT_POLL);
        let (shutdown, drain) = (inputs.shutdown.clone(), inputs.drain.clone());
        loop {
            self.report_status(&inputs.changes);
            if self.mode != Mode::Claiming && self.runs.is_empty() {
                // A drain asked through the database said only STATUS so far: systemd hears STOPPING=1 now,
                // when the daemon really leaves.
                self.systemd.stopping("stopped: no runs in flight");
                return;
            }
            let stop_at = match self.mode {
                Mode::Draining { stop_at: Some(at) } => at,
                _ => far(),
            };
            tokio::select! {
                () = shutdown.graceful.cancelled(), if !self.graceful_seen => self.begin_graceful(),
                () = shutdown.immediate.cancelled(), if self.mode != Mode::Stopping => self.stop_all("second signal"),
                () = drain.cancelled(), if self.mode == Mode::Claiming => self.begin_drain(None),
                () = sleep_until(stop_at) => self.stop_all("the drain time is over"),
                Some(change) = inputs.changes.next() => self.on_changes(change, &mut inputs).await,
                Some(done) = self.tasks.join_next_with_id() => {
                    self.ended(done);
                    // Runs that ended together free their slots together: one claim fills them all.
                    while let Some(more) = self.tasks.try_join_next_with_id() {
                        self.ended(more);
                    }
                    if self.maybe_queued {
                        self.claim().await;
                    }
                }
                () = inputs.scheduler.claim.notified() => {
                    self.maybe_queued = true;
                    self.claim().await;
                }
                _ = poll.tick() => {
                    self.maybe_queued = true;
                    self.claim().await;
                    if !sqlite {
                        self.check_cancels().await;
                    }
                }
                _ = cancel_poll.tick(), if sqlite && !self.runs.is_empty() => self.check_cancels().await,
                () = sleep_until(self.retry_at) => {
                    self.retry_at = far();
                    self.claim().await;
                }
                _ = tick(&mut watchdog), if watchdog.is_some() => self.systemd.watchdog(),
                _ = preempt_poll.tick(), if preempts && self.mode == Mode::Claiming => self.preempt().await,
            }
        }
    }

    fn begin_graceful(&mut self) {
        self.graceful_seen = true;
        let drain = Duration::from_secs(self.ctx.settings.daemon.drain_seconds);
        tracing::info!(
            runs_in_flight = self.runs.len(),
            drain_s = drain.as_secs(),
            "shutting down: claiming stopped, runs in flight may finish"
        );
        if self.mode != Mode::Stopping {
            self.begin_drain(Some(Instant::now() + drain));
        }
    }

    /// Stops claiming. `stop_at` is the end of the drain time after a signal; a drain asked through the database
    /// (`stop_at: None`) lets runs take as long as they need, so it must not say STOPPING=1 to systemd, which
    /// would start the unit's stop timeout and kill the runs when it expires.
    fn begin_drain(&mut self, stop_at: Option<Instant>) {
        tracing::info!(runs_in_flight = self.runs.len(), "claiming stopped; draining");
        self.mode = Mode::Draining { stop_at };
        let status = format!("draining: {} runs in flight", self.runs.len());
        if stop_at.is_some() {
            self.systemd.stopping(&status);
        } else {
            self.systemd.status(&status);
        }
    }

    /// Tells every run to stop (SIGTERM, grace, SIGKILL); they end `interrupted` with "daemon shutdown".
    fn stop_all(&mut self, why: &str) {
        tracing::info!(runs_in_flight = self.runs.len(), reason = why, "stopping the runs in flight");
        if self.mode == Mode::Claiming {
            self.systemd.stopping("stopping");
        }
        self.mode = Mode::Stopping;
        for run in self.runs.values() {
            // A run whose task already ended has nothing left to stop.
            let _ = run.commands.send(RunCommand::Terminate);
        }
    }

    /// Acts on a change and on every other change already waiting, claiming at most once for all of them.
    async fn on_changes(&mut self, first: Change, inputs: &mut Inputs) {
        let mut changes = vec![first];
        while let Some(more) = inputs.changes.try_next() {
            changes.push(more);
        }
        let (mut claim, mut cancels, mut due) = (false, false, false);
        for change in changes {
            match change {
                // It may also be a retry whose backoff ends later: the scheduler then sleeps until then. It is
                // told after the claim, so that its read does not compete with the claim for the database.
                Change::Requested { .. } => (claim, due) = (true, true),
                // SQLite: something was written, a request or a cancellation; a resync: anything may have been
                // missed.
                Change::Written | Change::Resync { .. } => {
                    (claim, cancels) = (true, true);
                    inputs.chores_now.notify_one();
                    inputs.bulk_now.notify_one();
                    inputs.scheduler.due.notify_one();
                    inputs.scheduler.ended.notify_one();
                    inputs.backlog_now.notify_one();
                }
                Change::Schedule { .. } => inputs.scheduler.due.notify_one(),
                Change::Ended { .. } => {
                    inputs.scheduler.ended.notify_one();
                    inputs.backlog_now.notify_one();
                }
                Change::Chore { .. } => inputs.chores_now.notify_one(),
                Change::Bulk { .. } => inputs.bulk_now.notify_one(),
                Change::Cancel { run, .. } => self.cancel(run),
                Change::Daemon { daemon, .. } if daemon == self.ctx.daemon_id => inputs.heartbeat_now.notify_one(),
                _ => {}
            }
        }
        if claim {
            self.maybe_queued = true;
            self.claim().await;
        }
        if due {
            inputs.scheduler.due.notify_one();
        }
        if cancels {
            self.check_cancels().await;
        }
    }

    /// Claims up to the number of free slots.
    async fn claim(&mut self) {
        let daemon = &self.ctx.settings.daemon;
        let free = free_slots(daemon.capacity, self.runs.len());
        if self.mode != Mode::Claiming || free == 0 {
            return;
        }
        let sent = clock::monotonic_ns();
        match claim_batch(&self.ctx.claims, self.ctx.daemon_id, daemon, &self.ctx.placement, self.runs.len()).await {
            Ok(claimed) => {
                self.claim_failures = 0;
                self.maybe_queued = claimed.len() >= free as usize;
                let claim_us = (clock::monotonic_ns() - sent) / 1000;
                let deadline = clock::lease_deadline(sent, daemon.lease());
                for run in claimed {
                    self.start(run, deadline, claim_us);
                }
            }
            Err(e) => {
                // A dropped connection fails one claim; look again soon (backing off while the database is down).
                let retry =
                    (CLAIM_RETRY * 2u32.pow(self.claim_failures.min(5))).min(Duration::from_secs(daemon.poll_seconds));
                self.claim_failures += 1;
                self.retry_at = self.retry_at.min(Instant::now() + retry);
                tracing::warn!(error = %e, retry_ms = retry.as_millis(), "could not claim; trying again");
            }
        }
    }

    fn start(&mut self, run: Run, deadline_ns: u64, claim_us: u64) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (id, worker) = (run.id, run.worker.clone());
        let queued_us = run.claimed_at.and_then(|c| (c - run.requested_at).num_microseconds());
        tracing::info!(run_id = %id, worker = %worker, queued_us, claim_us, "claimed");
        let task = runner::execute(self.ctx.clone(), run, deadline_ns, rx);
        let handle = self.tasks.spawn(
            async move {
                task.await;
                id
            }
            .in_current_span(),
        );
        self.task_runs.insert(handle.id(), id);
        self.runs.insert(id, InFlight { worker, commands: tx, cancel_sent: false, yield_sent: false });
    }

    fn ended(&mut self, done: Result<(task::Id, Uuid), task::JoinError>) {
        let (task_id, outcome) = match done {
            Ok((task_id, _)) => (task_id, None),
            Err(e) => (e.id(), Some(e)),
        };
        let Some(run) = self.task_runs.remove(&task_id) else { return };
        let worker = self.runs.remove(&run).map(|r| r.worker).unwrap_or_default();
        if let Some(e) = outcome {
            tracing::error!(run_id = %run, worker = %worker, error = %e, "a run task failed; recovery will settle the run when its lease expires");
        }
    }

    fn cancel(&mut self, run: Uuid) {
        if let Some(in_flight) = self.runs.get_mut(&run).filter(|r| !r.cancel_sent) {
            in_flight.cancel_sent = true;
            tracing::info!(run_id = %run, worker = %in_flight.worker, "cancellation requested");
            let _ = in_flight.commands.send(RunCommand::Cancel);
        }
    }

    /// Asks run `run` of this daemon to yield within `grace` (docs/worker-protocol.md, "Yielding"); the answer
    /// comes on the receiver, refused for a worker that does not declare `yield` or a run being stopped. `None`
    /// when the run is not in flight here.
    pub fn ask_yield(&self, run: Uuid, grace: Duration) -> Option<oneshot::Receiver<Result<(), YieldRefused>>> {
        let in_flight = self.runs.get(&run)?;
        let (answer, answered) = oneshot::channel();
        tracing::info!(run_id = %run, worker = %in_flight.worker, grace_ms = grace.as_millis(), "yield requested");
        in_flight.commands.send(RunCommand::Yield { grace, answer }).ok()?;
        Some(answered)
    }

    /// Flags the runs a more urgent run has waited long enough for (any daemon may: the flag is set once), then
    /// asks this daemon's flagged runs to yield, each once, within its resource's `preempt_grace_seconds`.
    async fn preempt(&mut self) {
        let gone_after = Duration::from_secs(self.ctx.settings.daemon.gone_after_seconds);
        match self.ctx.db.request_preemptions(&self.ctx.settings.catalogue, gone_after).await {
            Ok(flagged) => {
                for (victim, urgent) in flagged {
                    tracing::info!(run_id = %victim, preempted_for = %urgent, "preemption requested");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not weigh preemptions"),
        }
        if self.runs.values().all(|r| r.yield_sent || r.cancel_sent) {
            return;
        }
        let flagged = match self.ctx.db.preemption_requests(self.ctx.daemon_id).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for preemption requests");
                return;
            }
        };
        for id in flagged {
            let Some(in_flight) = self.runs.get_mut(&id).filter(|r| !r.yield_sent && !r.cancel_sent) else { continue };
            in_flight.yield_sent = true;
            let grace = preempt_grace(&self.ctx.settings.catalogue, &in_flight.worker);
            let worker = in_flight.worker.clone();
            if let Some(answer) = self.ask_yield(id, grace) {
                tokio::spawn(async move {
                    if let Ok(Err(refused)) = answer.await {
                        tracing::warn!(run_id = %id, worker = %worker, reason = %refused, "a preempted run refused to yield");
                    }
                });
            }
        }
    }

    /// Looks up cancellation requests of this daemon's runs (a cheap indexed query, only with runs in flight).
    async fn check_cancels(&mut self) {
        if self.runs.values().all(|r| r.cancel_sent) {
            return;
        }
        match self.ctx.db.cancel_requests(self.ctx.daemon_id).await {
            Ok(ids) => ids.into_iter().for_each(|id| self.cancel(id)),
            Err(e) => tracing::warn!(error = %e, "could not look for cancellation requests"),
        }
    }

    fn report_status(&mut self, changes: &ChangeFeed) {
        let (n, capacity) = (self.runs.len(), self.ctx.settings.daemon.capacity);
        let status = match self.mode {
            Mode::Claiming if changes.is_live() => match self.ctx.db.backend() {
                Backend::Postgres if self.ctx.db.feed_polled().is_some() => {
                    format!("{n}/{capacity} runs in flight, polling (behind a pooler without database.listen_url)")
                }
                Backend::Postgres => format!("{n}/{capacity} runs in flight, listening"),
                Backend::Sqlite => format!("{n}/{capacity} runs in flight, watching the database files"),
            },
            Mode::Claiming => format!("{n}/{capacity} runs in flight, polling (notifications are reconnecting)"),
            Mode::Draining { .. } => format!("draining: {n} runs in flight"),
            Mode::Stopping => format!("stopping: {n} runs in flight"),
        };
        if status != self.status {
            self.systemd.status(&status);
            self.status = status;
        }
    }
}

/// How often a daemon weighs preemptions, when its catalogue has a resource that may be preempted.
const PREEMPT_POLL: Duration = Duration::from_secs(1);

/// The time a preempted run of `worker` has to yield: the shortest `preempt_grace_seconds` of the preemptible
/// resources it holds (60 s when none says).
fn preempt_grace(catalogue: &scrinalia_shared::Catalogue, worker: &str) -> Duration {
    let held = catalogue.worker(worker).map(|w| w.resources.as_slice()).unwrap_or_default();
    let seconds = held
        .iter()
        .filter_map(|r| catalogue.resource(r))
        .filter(|r| r.preempt_after_seconds.is_some())
        .map(|r| r.preempt_grace_seconds.and_then(|s| u64::try_from(s).ok()).unwrap_or(DEFAULT_PREEMPT_GRACE))
        .min()
        .unwrap_or(DEFAULT_PREEMPT_GRACE);
    Duration::from_secs(seconds)
}

/// A preempted run's time to yield when its resource does not say.
pub const DEFAULT_PREEMPT_GRACE: u64 = 60;

fn ticker(period: Duration) -> Interval {
    let mut ticker = interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

async fn tick(ticker: &mut Option<Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}
