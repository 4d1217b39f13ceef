//! One claimed run on the daemon's side: start its supervisor, follow its frames (progress to the database,
//! text to the logs), pass on cancellation and shutdown, and write the ledger entry once, fenced by ownership.

use std::{path::PathBuf, process::Stdio, sync::Arc, time::Duration};

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
    io::{AsyncWriteExt, BufReader},
    process::{Child, ChildStdout, Command},
    sync::mpsc,
    task::JoinHandle,
    time::{Instant, sleep_until},
};
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    Context,
    frame::{self, Control, ExitReport, Frame, Start, StopCause},
    invocation::{self, Invocation},
    item_files,
    items::ItemWriter,
    lease::Lease,
    outcome::{Ending, StderrTail, write_ledger},
    progress::{Progress, StdoutLine},
    run_limits::{self, Measured},
    runlog::RunLog,
    slots,
    stall::Watchdog,
};

/// What the daemon's main loop can ask of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunCommand {
    /// A person asked to cancel it.
    Cancel,
    /// The daemon is shutting down.
    Terminate,
}

/// Runs `run` to its end. `deadline_ns` is the lease deadline given by the claim.
///
/// Everything happens in the run's span (`run`, with `run_id` and `worker`), so every log line about the run
/// carries both; when traces are exported it continues the trace stored on the run (the API's request), and the
/// worker's `TRACEPARENT` is this span, so the worker's own spans are its children.
pub async fn execute(ctx: Arc<Context>, run: Run, deadline_ns: u64, commands: mpsc::UnboundedReceiver<RunCommand>) {
    let span = tracing::info_span!("run", run_id = %run.id, worker = %run.worker);
    telemetry::continue_trace(&span, run.trace_context.as_deref(), None);
    ctx.metrics.run_began();
    execute_in_span(ctx.clone(), run, deadline_ns, commands).instrument(span).await;
    ctx.metrics.run_ended();
}

async fn execute_in_span(
    ctx: Arc<Context>,
    run: Run,
    deadline_ns: u64,
    mut commands: mpsc::UnboundedReceiver<RunCommand>,
) {
    let Some(spec) = ctx.settings.catalogue.worker(&run.worker) else {
        let error = format!("worker {:?} is not in the catalogue of daemon {}", run.worker, ctx.daemon_id);
        return write_ledger(&ctx, &run, &failed(EndReason::UnknownWorker, error)).await;
    };
    // Without exported spans the stored context is passed on as it is, so the worker still joins the trace.
    let traceparent = telemetry::traceparent_of(&tracing::Span::current())
        .unwrap_or_else(|| invocation::traceparent(run.trace_context.as_deref()));
    let slots = match slots::of(&ctx, &run, spec).await {
        Ok(slots) => slots,
        Err(error) => return write_ledger(&ctx, &run, &failed(EndReason::SpawnFailed, error)).await,
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
        Err(error) => return write_ledger(&ctx, &run, &failed(EndReason::SpawnFailed, error)).await,
    };
    let limits = run_limits::prepare(&ctx, &run);
    let spawned = spawn_supervisor(&ctx, &run, &invocation, deadline_ns, &limits.procs()).await;
    let Spawned { child, mut frames, controls, writer } = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            let error = format!("could not start the run's supervisor: {e}");
            limits.remove().await;
            return write_ledger(&ctx, &run, &failed(EndReason::SpawnFailed, error)).await;
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
    session.conclude(&run, report, measured).await;
    lease.stop().await;
    // Every sender of controls is gone now, so the writer ends (at once, if the supervisor already exited).
    if tokio::time::timeout(Duration::from_secs(5), writer).await.is_err() {
        tracing::warn!("the writer of the supervisor's controls did not stop");
    }
}

fn failed(reason: EndReason, error: String) -> Finish {
    Finish { reason, exit_code: None, error: Some(error), result: None, usage: None }
}

/// A started supervisor: the process, its frames, where its controls go, and the task writing them to its stdin.
struct Spawned {
    child: Child,
    frames: FrameReader,
    controls: mpsc::Sender<Control>,
    writer: JoinHandle<()>,
}

/// Starts the run's supervisor: the spare, given the run on its stdin, when one is ready; otherwise
/// `scrinalia-daemon supervise … -- <worker command>` in its own process group, with the worker's environment.
/// Its stderr is the daemon's.
async fn spawn_supervisor(
    ctx: &Context,
    run: &Run,
    invocation: &Invocation,
    deadline_ns: u64,
    (cgroup, homes): &(Vec<PathBuf>, Vec<PathBuf>),
) -> std::io::Result<Spawned> {
    let grace_ms = ctx.settings.daemon.cancel_grace_seconds * 1000;
    let timeout_ms = run.config.timeout_seconds.saturating_mul(1000);
    let start = start_of(run, invocation, deadline_ns, grace_ms, timeout_ms);
    let start = start.and_then(|s| Some(Start { cgroup: text_paths(cgroup)?, cgroup_home: text_paths(homes)?, ..s }));
    let started = match start {
        Some(start) => ctx.spares.start(&start).await,
        None => None,
    };
    let (child, stdin, stdout) = match started {
        Some(spare) => (spare.child, spare.stdin, spare.stdout),
        None => {
            let mut cmd = Command::new(&ctx.supervisor);
            cmd.arg("supervise")
                .args(["--run-id", &run.id.to_string(), "--deadline-ns", &deadline_ns.to_string()])
                .args(["--grace-ms", &grace_ms.to_string(), "--timeout-ms", &timeout_ms.to_string()])
                .args(cgroup.iter().flat_map(|p| [std::ffi::OsStr::new("--cgroup"), p.as_os_str()]))
                .args(homes.iter().flat_map(|p| [std::ffi::OsStr::new("--cgroup-home"), p.as_os_str()]))
                .arg("--")
                .arg(&invocation.program)
                .args(&invocation.args);
            invocation.apply_env(&mut cmd);
            // The supervisor must outlive a dropped handle: killing it would leave the worker unfenced.
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0);
            let mut child = cmd.kill_on_drop(false).spawn()?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(std::io::Error::other("the supervisor's pipes are missing"));
            };
            (child, stdin, stdout)
        }
    };
    let mut stdin = stdin;
    let (controls, mut rx) = mpsc::channel::<Control>(16);
    let writer = tokio::spawn(async move {
        while let Some(control) = rx.recv().await {
            if stdin.write_all(format!("{}\n", control.encode()).as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let frames = FrameReader { reader: BufReader::new(stdout), buf: Vec::new() };
    Ok(Spawned { child, frames, controls, writer })
}

/// The `start` line a spare would need for this run; `None` when the command or environment is not text.
fn start_of(run: &Run, invocation: &Invocation, deadline_ns: u64, grace_ms: u64, timeout_ms: u64) -> Option<Start> {
    let inherited = invocation.inherited.iter().map(|(k, v)| Some((k.to_str()?.to_owned(), v.to_str()?.to_owned())));
    let mut env = inherited.collect::<Option<Vec<_>>>()?;
    env.extend(invocation.env.iter().cloned());
    Some(Start {
        run_id: run.id,
        deadline_ns,
        grace_ms,
        timeout_ms,
        program: invocation.program.to_str()?.to_owned(),
        args: invocation.args.clone(),
        env,
        cgroup: Vec::new(),
        cgroup_home: Vec::new(),
    })
}

/// The paths as text, for a spare's `start` line; `None` when one is not UTF-8.
fn text_paths(paths: &[PathBuf]) -> Option<Vec<String>> {
    paths.iter().map(|p| p.to_str().map(str::to_owned)).collect()
}

/// Waits briefly for the supervisor to exit, so that it does not linger as a zombie.
async fn reap(mut child: Child) {
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}

/// The supervisor's frames.
struct FrameReader {
    reader: BufReader<ChildStdout>,
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next frame; `None` when the supervisor's stdout closed. Cancel-safe.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if !frame::read_line(&mut self.reader, &mut self.buf, 2 * frame::MAX_WORKER_LINE).await.ok()? {
                return None;
            }
            let parsed = Frame::decode(&String::from_utf8_lossy(&self.buf));
            self.buf.clear();
            if parsed.is_some() {
                return parsed;
            }
        }
    }
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
                Some(command) = commands.recv() => {
                    tracing::info!(?command, "stopping the worker");
                    self.stall.disarm();
                    self.control(if command == RunCommand::Cancel { Control::Cancel } else { Control::Terminate }).await;
                }
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
        self.control(Control::Kill).await;
    }

    /// The stall watchdog fired: the worker is stopped as a cancel stops it (SIGTERM, the grace, SIGKILL), and
    /// the run ends `interrupted`, `stalled`, with the watchdog's sentence.
    async fn stalled(&mut self) {
        let sentence = self.stall.fire();
        tracing::warn!(%sentence, "the stall watchdog stops the worker");
        self.text("stderr", &format!("scrinalia: {sentence}; the worker is stopped")).await;
        self.stalled = Some(sentence);
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

    /// Flushes the log and the last progress, then writes the ledger entry.
    async fn conclude(mut self, run: &Run, report: ExitReport, measured: Option<Measured>) {
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
        let finish = Ending {
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
        }
        .finish();
        write_ledger(&self.ctx, run, &finish).await;
    }
}
