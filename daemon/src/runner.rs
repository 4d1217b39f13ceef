//! One claimed run on the daemon's side: start its supervisor, follow its frames (progress to the database,
//! text to the logs), pass on cancellation, shutdown and requests to yield, and write the ledger entry once,
//! fenced by ownership.

use std::{sync::Arc, time::Duration};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use scrinalia_shared::{
    DbError, EndReason, MAX_CHECKPOINT_BYTES, Run, items,
    runs::Finish,
    telemetry,
    usage::{self, ReportedUsage},
};
use serde_json::Value;
use tokio::{
    sync::mpsc,
    time::{Instant, sleep_until},
};
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    Context,
    frame::{Control, ExitReport, Frame, StopCause},
    invocation::{self, Invocation},
    item_files,
    items::ItemWriter,
    lease::Lease,
    outcome::{Ending, Outcome, StderrTail, write_ledger},
    progress::{Progress, StdoutLine},
    run_limits::{self, Measured},
    runlog::RunLog,
    slots,
    stall::Watchdog,
    yielding::{self, YieldAnswer},
};

mod launch;

use launch::{FrameReader, Spawned, reap, spawn_supervisor};

/// What the daemon's main loop can ask of a run.
#[derive(Debug)]
pub enum RunCommand {
    /// A person asked to cancel it.
    Cancel,
    /// The daemon is shutting down.
    Terminate,
    /// A more urgent run wants what it holds: its worker is to stop at its next checkpoint, and be stopped as a
    /// cancel stops it if it still runs `grace` after the request. `answer` says whether the worker was asked;
    /// it is refused ([`yielding::YieldRefused`]) for a worker that does not declare `yield`, a run already
    /// being stopped, or one asked before. Whether the run yielded is its [`Outcome`]'s `yielded`.
    Yield {
        /// From the request to the gentle stop.
        grace: Duration,
        /// Whether the request was passed on to the worker.
        answer: YieldAnswer,
    },
}

/// Runs `run` to its end; how it ended, as written to the ledger (unless another daemon had recovered it). `deadline_ns` is the lease deadline given by the claim.
///
/// Everything happens in the run's span (`run`, with `run_id` and `worker`), so every log line about the run
/// carries both; when traces are exported it continues the trace stored on the run (the API's request), and the
/// worker's `TRACEPARENT` is this span, so the worker's own spans are its children.
pub async fn execute(
    ctx: Arc<Context>,
    run: Run,
    deadline_ns: u64,
    commands: mpsc::UnboundedReceiver<RunCommand>,
) -> Outcome {
    let span = tracing::info_span!("run", run_id = %run.id, worker = %run.worker);
    telemetry::continue_trace(&span, run.trace_context.as_deref(), None);
    ctx.metrics.run_began();
    let outcome = execute_in_span(ctx.clone(), run, deadline_ns, commands).instrument(span).await;
    ctx.metrics.run_ended();
    outcome
}

async fn execute_in_span(
    ctx: Arc<Context>,
    run: Run,
    deadline_ns: u64,
    mut commands: mpsc::UnboundedReceiver<RunCommand>,
) -> Outcome {
    let Some(spec) = ctx.settings.catalogue.worker(&run.worker) else {
        let error = format!("worker {:?} is not in the catalogue of daemon {}", run.worker, ctx.daemon_id);
        return failed(&ctx, &run, EndReason::UnknownWorker, error).await;
    };
    // Without exported spans the stored context is passed on as it is, so the worker still joins the trace.
    let traceparent = telemetry::traceparent_of(&tracing::Span::current())
        .unwrap_or_else(|| invocation::traceparent(run.trace_context.as_deref()));
    let slots = match slots::of(&ctx, &run, spec).await {
        Ok(slots) => slots,
        Err(error) => return failed(&ctx, &run, EndReason::SpawnFailed, error).await,
    };
    let mut invocation = Invocation::run(spec, &ctx.exe_dir, &ctx.worker_env, run.id, &run.config, &traceparent)
        .continuing(&run)
        .in_shard(&run)
        .holding(&slots);
    let _item_files = match item_files::prepare(&ctx, &run, spec).await {
        Ok(files) => {
            invocation.env.extend(files.env.iter().cloned());
            files
        }
        Err(error) => return failed(&ctx, &run, EndReason::SpawnFailed, error).await,
    };
    let limits = run_limits::prepare(&ctx, &run);
    let spawned = spawn_supervisor(&ctx, &run, &invocation, deadline_ns, &limits.procs()).await;
    let Spawned { child, mut frames, controls, writer } = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            let error = format!("could not start the run's supervisor: {e}");
            limits.remove().await;
            return failed(&ctx, &run, EndReason::SpawnFailed, error).await;
        }
    };
    tracing::info!(program = %invocation.program.display(), %traceparent, "starting the worker");
    let mut lease = Lease::spawn(ctx.clone(), &run, controls.clone(), deadline_ns);
    let mut session = Session::new(&ctx, &run, controls);
    for sentence in &limits.said {
        session.text("stderr", &format!("scrinalia: {sentence}")).await;
    }
    let report = session.follow(&mut frames, &mut commands, &mut lease).await;
    reap(child).await;
    // The cgroup's counters are read, and the cgroup removed, before the run's end is written: whoever sees the
    // run ended sees no cgroup of it left.
    let measured = limits.measured();
    limits.remove().await;
    let outcome = session.conclude(&run, report, measured).await;
    lease.stop().await;
    // Every sender of controls is gone now, so the writer ends (at once, if the supervisor already exited).
    if tokio::time::timeout(Duration::from_secs(5), writer).await.is_err() {
        tracing::warn!("the writer of the supervisor's controls did not stop");
    }
    outcome
}

/// Writes the end of a run that never got to start its worker.
async fn failed(ctx: &Context, run: &Run, reason: EndReason, error: String) -> Outcome {
    let finish = Finish { reason, exit_code: None, error: Some(error), result: None, usage: None };
    write_ledger(ctx, run, &finish).await;
    Outcome { finish, yielded: false }
}

/// What a run accumulates while it goes on.
struct Session {
    ctx: Arc<Context>,
    run: Uuid,
    worker: String,
    controls: mpsc::Sender<Control>,
    progress: Progress,
    log: RunLog,
    tail: StderrTail,
    result: Option<Value>,
    lease_lost: Option<String>,
    pid: Option<i32>,
    supervisor_lost: bool,
    items: ItemWriter,
    /// Where the item writer says the lease was lost.
    items_lost: mpsc::Receiver<String>,
    refused_items: u64,
    /// The worker's last accepted `usage` line.
    reported_usage: Option<ReportedUsage>,
    refused_usage: u32,
    /// The stall watchdog, and its sentence once it stopped the worker.
    stall: Watchdog,
    stalled: Option<String>,
    /// Whether the run was asked to yield, or is being stopped.
    yields: yielding::Requests,
}

impl Session {
    fn new(ctx: &Arc<Context>, run: &Run, controls: mpsc::Sender<Control>) -> Self {
        let (lost, items_lost) = mpsc::channel(1);
        let keep = ctx.settings.items.keep_succeeded;
        Self {
            ctx: ctx.clone(),
            run: run.id,
            worker: run.worker.clone(),
            controls,
            progress: Progress::new(run.id, ctx.daemon_id),
            log: RunLog::new(ctx.logs.clone(), &run.worker, run.id, ctx.settings.logs.max_bytes_per_run),
            tail: StderrTail::default(),
            result: None,
            lease_lost: None,
            pid: None,
            supervisor_lost: false,
            items: ItemWriter::start(ctx.db.clone(), (run.id, &run.worker), ctx.daemon_id, keep, lost),
            items_lost,
            refused_items: 0,
            reported_usage: None,
            refused_usage: 0,
            stall: Watchdog::new(run.config.stall_seconds.as_ref().map(|s| s.value)),
            stalled: None,
            yields: yielding::Requests::default(),
        }
    }

    /// Follows the run until the supervisor's exit report.
    async fn follow(
        &mut self,
        frames: &mut FrameReader,
        commands: &mut mpsc::UnboundedReceiver<RunCommand>,
        lease: &mut Lease,
    ) -> ExitReport {
        let mut lease_open = true;
        loop {
            tokio::select! {
                frame = frames.next() => match frame {
                    Some(Frame::Started(pid)) => self.started(pid).await,
                    Some(Frame::Stdout(line)) => self.stdout(line).await,
                    Some(Frame::Stderr(line)) => self.text("stderr", &line).await,
                    Some(Frame::Exit(report)) => return report,
                    None => return self.supervisor_lost(),
                },
                Some(command) = commands.recv() => match command {
                    RunCommand::Yield { grace, answer } => self.ask_yield(grace, answer).await,
                    stop => {
                        tracing::info!(command = ?stop, "stopping the worker");
                        self.stall.disarm();
                        self.yields.stopping = true;
                        let cancel = matches!(stop, RunCommand::Cancel);
                        self.control(if cancel { Control::Cancel } else { Control::Terminate }).await;
                    }
                },
                lost = &mut lease.lost, if lease_open => {
                    lease_open = false;
                    if let Ok(reason) = lost {
                        tracing::error!(%reason, "lease lost; the worker is killed");
                        self.lease_lost = Some(reason);
                    }
                }
                Some(reason) = self.items_lost.recv() => self.lose(&reason).await,
                () = sleep_until(self.progress.next_write) => self.write_progress().await,
                () = sleep_until(self.stall.due()) => self.stalled().await,
                () = sleep_until(self.log.next_flush) => self.log.flush().await,
            }
        }
    }

    async fn control(&self, control: Control) {
        let _ = self.controls.send(control).await;
    }

    /// Asks the supervisor to make the worker yield, unless the run may not be asked (see [`RunCommand::Yield`]);
    /// says so on `answer` and in the run's log.
    async fn ask_yield(&mut self, grace: Duration, answer: YieldAnswer) {
        let asked = match self.yields.may_ask() {
            Ok(()) => yielding::declared(&self.ctx, &self.worker).await,
            refused => refused,
        };
        match &asked {
            Ok(()) => {
                let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
                tracing::info!(grace_ms, "asking the worker to yield");
                let said = format!(
                    "scrinalia: the worker is asked to yield (SIGUSR1): to stop at its next checkpoint, within {} s",
                    grace.as_secs()
                );
                self.text("stderr", &said).await;
                self.yields.asked = true;
                self.control(Control::Yield { grace_ms }).await;
            }
            Err(refused) => tracing::info!(reason = %refused, "a request to yield was refused"),
        }
        let _ = answer.send(asked);
    }

    async fn started(&mut self, pid: i32) {
        self.pid = Some(pid);
        self.stall.started(Instant::now());
        tracing::info!(pid, "worker started");
        // The next run's spare, now that this one's worker no longer waits for anything of the daemon's; on a
        // blocking thread, since starting a process blocks until it is executed.
        let ctx = self.ctx.clone();
        drop(tokio::task::spawn_blocking(move || ctx.spares.refill()));
        let log_key = self.log.prefix();
        // On the claim connection: the pool's ping before each use would delay `started_at` by a round trip.
        let marked = self.ctx.claims.mark_started(self.run, self.ctx.daemon_id, &log_key);
        match tokio::time::timeout(Duration::from_secs(5), marked).await {
            Ok(Ok(run)) => {
                let queued = run.started_at.and_then(|s| (s - run.requested_at).to_std().ok());
                self.ctx.metrics.worker_started(&self.worker, queued.map(|q| q.as_secs_f64()));
            }
            Ok(Err(DbError::LeaseLost { .. })) => {
                self.lose("the run was no longer this daemon's when its worker started").await
            }
            Ok(Err(e)) => {
                self.ctx.metrics.worker_started(&self.worker, None);
                tracing::warn!(error = %e, "could not record the worker's start");
            }
            Err(_) => {
                self.ctx.metrics.worker_started(&self.worker, None);
                tracing::warn!("recording the worker's start timed out");
            }
        }
    }

    async fn lose(&mut self, reason: &str) {
        tracing::error!(%reason, "lease lost; the worker is killed");
        self.lease_lost.get_or_insert_with(|| reason.to_owned());
        self.stall.disarm();
        self.yields.stopping = true;
        self.control(Control::Kill).await;
    }

    /// The stall watchdog fired: the worker is stopped as a cancel stops it (SIGTERM, the grace, SIGKILL), and
    /// the run ends `interrupted`, `stalled`, with the watchdog's sentence.
    async fn stalled(&mut self) {
        let sentence = self.stall.fire();
        tracing::warn!(%sentence, "the stall watchdog stops the worker");
        self.text("stderr", &format!("scrinalia: {sentence}; the worker is stopped")).await;
        self.stalled = Some(sentence);
        self.yields.stopping = true;
        self.control(Control::Cancel).await;
    }

    async fn stdout(&mut self, line: String) {
        let parsed = StdoutLine::parse(&line);
        self.stall.saw(Instant::now(), &parsed);
        match parsed {
            StdoutLine::Progress(value) => self.progress.offer(value),
            StdoutLine::Result(value) => self.result = Some(value),
            StdoutLine::Checkpoint(value) => self.checkpoint(value).await,
            StdoutLine::Item(value) => self.item(&value).await,
            StdoutLine::Usage(value) => self.usage(&value).await,
            StdoutLine::Config(value) => {
                self.text("stdout", &line).await;
                self.report_config(&value).await;
            }
            StdoutLine::Text => self.text("stdout", &line).await,
        }
    }

    /// Stores the configuration the worker reported (fenced: a run that is no longer ours is killed).
    async fn report_config(&mut self, config: &serde_json::Value) {
        let report = self.ctx.db.report_config(self.run, self.ctx.daemon_id, config);
        match tokio::time::timeout(Duration::from_secs(5), report).await {
            Ok(Ok(())) => tracing::info!(config = %config, "the worker reported its configuration"),
            Ok(Err(DbError::LeaseLost { .. })) => {
                self.lose("the run was no longer this daemon's when its worker reported its configuration").await
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "could not store the worker's reported configuration"),
            Err(_) => tracing::warn!("storing the worker's reported configuration timed out"),
        }
    }

    /// Hands the worker's checkpoint to the item writer, which stores it with every item reported before it
    /// (fenced: a run that is no longer ours is killed), unless it is over [`MAX_CHECKPOINT_BYTES`]: then the run
    /// log says so and the last checkpoint stays.
    async fn checkpoint(&mut self, value: Value) {
        let size = value.to_string().len();
        if size > MAX_CHECKPOINT_BYTES {
            let refusal = format!(
                "scrinalia: a checkpoint of {size} bytes was refused: a checkpoint may take at most {MAX_CHECKPOINT_BYTES} bytes of JSON; the last one accepted stays"
            );
            tracing::warn!(size, "a checkpoint over the size limit was refused");
            self.text("stderr", &refusal).await;
            return;
        }
        self.items.checkpoint(value);
    }

    /// Hands an item line to the item writer; the run's first refused ones are said in its log.
    async fn item(&mut self, value: &Value) {
        let item = items::parse(value);
        if let Err(refusal) = item {
            self.refused_items += 1;
            if self.refused_items <= items::LOGGED_REFUSALS {
                let said =
                    format!("scrinalia: an item line was refused ({}): {}", refusal.reason(), refusal.sentence());
                self.text("stderr", &said).await;
                if self.refused_items == items::LOGGED_REFUSALS {
                    self.text("stderr", "scrinalia: further refused item lines are only counted").await;
                }
            }
        }
        self.items.item(item);
    }

    /// Keeps the worker's latest usage (cumulative: the last accepted line wins); a refused line is said in the
    /// run's log, the first few times, and the last accepted one stays.
    async fn usage(&mut self, value: &Value) {
        match usage::parse(value) {
            Ok(reported) => self.reported_usage = Some(reported),
            Err(sentence) => {
                self.refused_usage += 1;
                if self.refused_usage <= 3 {
                    self.text("stderr", &format!("scrinalia: {sentence}; the last accepted usage stays")).await;
                }
            }
        }
    }

    /// A line of the worker's output: kept in the run log, and logged in the run's span (so with `run_id` and
    /// `worker`) while the run log is in its head: past it, the daemon's own log would take the output uncapped.
    async fn text(&mut self, stream: &'static str, line: &str) {
        if self.log.in_head() {
            tracing::info!(stream, "{line}");
        }
        if stream == "stderr" {
            self.tail.push(line);
        }
        self.log.push(stream, line).await;
    }

    async fn write_progress(&mut self) {
        if self.progress.write(&self.ctx.db).await.is_err() {
            self.lose("the database refused a progress report: another daemon recovered the run").await;
        }
    }

    /// The supervisor ended without a report (it was killed): its worker must not run on unsupervised.
    fn supervisor_lost(&mut self) -> ExitReport {
        if let Some(pid) = self.pid.filter(|&p| p > 1) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        tracing::error!("the run's supervisor ended without a report; its worker was killed");
        self.supervisor_lost = true;
        ExitReport::default()
    }

    /// Flushes the log and the last progress, then writes the ledger entry; how the run ended.
    async fn conclude(mut self, run: &Run, report: ExitReport, measured: Option<Measured>) -> Outcome {
        if !self.items.finish(self.ctx.settings.daemon.lease()).await {
            let said = "scrinalia: the run's last items and checkpoint could not be stored before its end (the \
                        database did not answer in time); its item counts miss them";
            self.text("stderr", said).await;
        }
        self.log.finish().await;
        self.write_progress().await;
        let cancelled_by = match report.stopped_by {
            Some(StopCause::Cancel) if self.stalled.is_none() => {
                self.ctx.db.get_run(self.run).await.ok().flatten().and_then(|r| r.cancel_requested_by)
            }
            _ => None,
        };
        let outcome = Ending {
            report: &report,
            lease_lost: self.lease_lost.as_deref(),
            timeout_seconds: run.config.timeout_seconds,
            cancelled_by: cancelled_by.as_deref(),
            tail: &self.tail,
            result: self.result.take(),
            supervisor_lost: self.supervisor_lost,
            stalled: self.stalled.as_deref(),
            out_of_memory: measured.and_then(|m| m.out_of_memory()),
            usage: self.pid.map(|_| {
                let tree = measured.map(|m| m.tree());
                usage::of_run(report.elapsed_ms, report.rusage, tree, self.reported_usage.take())
            }),
            yield_asked: self.yields.asked,
        }
        .outcome();
        if outcome.yielded {
            tracing::info!(exit_code = report.code, "the worker yielded when asked");
        }
        write_ledger(&self.ctx, run, &outcome.finish).await;
        outcome
    }
}
