//! The per-run supervisor (`scrinalia-daemon supervise`, the pattern of containerd's shim): a small process
//! between the daemon and one worker that does not stall or die with the daemon, so that a worker never
//! outlives its lease. It starts the worker in its own process group, relays its output to the daemon as
//! [`Frame`]s, and kills the group when the lease deadline passes without a renewal, when the daemon asks, or
//! (after SIGTERM and a grace period) when the daemon's pipe closes. Asked to make the worker yield, it sends
//! SIGUSR1 to the worker process alone, and stops the group gently if the worker is still running when the
//! request's grace ends (docs/worker-protocol.md, "Yielding").

use std::{
    ffi::OsString,
    os::{fd::AsFd, unix::process::ExitStatusExt},
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use anyhow::Context as _;
use nix::{
    sys::{
        resource::{UsageWho, getrusage},
        signal::{Signal, kill, killpg},
        time::TimeVal,
    },
    unistd::Pid,
};
use scrinalia_shared::usage::Rusage;
use tokio::{
    io::{AsyncWriteExt, BufReader},
    net::unix::pipe,
    process::{Child, Command},
    signal::unix::{SignalKind, signal},
    sync::{mpsc, oneshot},
    time::{Instant, sleep_until},
};

use crate::{
    clock,
    frame::{self, Control, ExitReport, Frame, MAX_START_LINE, Start, StopCause},
};

mod relays;

use relays::Relays;

/// The arguments the daemon passes: either the whole run (the worker's environment is then the supervisor's
/// own), or `--spare`, for a supervisor started ahead of any run that waits for its [`Start`] on stdin.
#[derive(Debug, Clone, clap::Args)]
pub struct SuperviseArgs {
    /// Wait for the run on stdin (a [`Start`] line) instead of taking it from the arguments.
    #[arg(long, conflicts_with_all = ["run_id", "deadline_ns", "grace_ms", "timeout_ms", "command"])]
    pub spare: bool,
    /// The run, for messages.
    #[arg(long, required_unless_present = "spare")]
    pub run_id: Option<uuid::Uuid>,
    /// The first lease deadline (`CLOCK_MONOTONIC` ns).
    #[arg(long, required_unless_present = "spare")]
    pub deadline_ns: Option<u64>,
    /// Between SIGTERM and SIGKILL.
    #[arg(long, required_unless_present = "spare")]
    pub grace_ms: Option<u64>,
    /// The run's timeout.
    #[arg(long, required_unless_present = "spare")]
    pub timeout_ms: Option<u64>,
    /// A `cgroup.procs` file of the run's cgroup, which the worker is born in (one per controller on cgroup v1).
    #[arg(long = "cgroup", conflicts_with = "spare")]
    pub cgroup: Vec<PathBuf>,
    /// A `cgroup.procs` file the supervisor returns to once the worker started.
    #[arg(long = "cgroup-home", conflicts_with = "spare")]
    pub cgroup_home: Vec<PathBuf>,
    /// The worker's program and arguments.
    #[arg(last = true, required_unless_present = "spare")]
    pub command: Vec<OsString>,
}

/// One run as a supervisor takes it: from its arguments, or from a [`Start`] line.
#[derive(Debug, Clone)]
struct Job {
    deadline_ns: u64,
    grace_ms: u64,
    timeout_ms: u64,
    command: Vec<OsString>,
    /// The worker's whole environment; `None`: the supervisor's own.
    env: Option<Vec<(OsString, OsString)>>,
    /// The `cgroup.procs` files the worker is born in, and those the supervisor returns to.
    cgroup: (Vec<PathBuf>, Vec<PathBuf>),
}

impl Job {
    fn of(args: SuperviseArgs) -> Option<Self> {
        Some(Self {
            deadline_ns: args.deadline_ns?,
            grace_ms: args.grace_ms?,
            timeout_ms: args.timeout_ms?,
            command: args.command,
            env: None,
            cgroup: (args.cgroup, args.cgroup_home),
        })
    }

    fn started(start: Start) -> Self {
        let command = std::iter::once(start.program).chain(start.args).map(OsString::from).collect();
        let env = start.env.into_iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        Self {
            deadline_ns: start.deadline_ns,
            grace_ms: start.grace_ms,
            timeout_ms: start.timeout_ms,
            command,
            env: Some(env),
            cgroup: (
                start.cgroup.into_iter().map(PathBuf::from).collect(),
                start.cgroup_home.into_iter().map(PathBuf::from).collect(),
            ),
        }
    }
}

/// Runs one worker to its end. Errors only when the supervisor's own pipes are unusable.
pub async fn supervise(args: SuperviseArgs) -> anyhow::Result<()> {
    // Again here for a program that embeds the daemon: the worker must not read the supervisor's environment (nor,
    // for a spare, the one it is sent).
    crate::not_dumpable()?;
    let (out, writer) = spawn_writer().context("the supervisor's stdout must be a pipe from the daemon")?;
    let mut controls = control_pipe().context("the supervisor's stdin must be a pipe from the daemon")?;
    let job = if args.spare {
        match read_start(&mut controls).await {
            Some(start) => Job::started(start),
            // The daemon went away (or sent nothing usable) before it had a run for this spare.
            None => return Ok(()),
        }
    } else {
        Job::of(args).context("a supervisor needs a run's arguments or --spare")?
    };
    let mut inputs = spawn_control_reader(controls);
    let started = Instant::now();
    let mut child = match spawn_worker(&job.command, job.env.as_deref(), &job.cgroup.0) {
        Ok(spawned) => spawned,
        Err(e) => {
            // Out of whatever part of the run's cgroup it joined, so that the cgroup can go once the run has.
            let _ = return_home(&job.cgroup).await;
            let program = job.command.first().cloned().unwrap_or_default();
            let report = ExitReport { spawn_error: Some(format!("{program:?}: {e}")), ..ExitReport::default() };
            return finish(out, writer, report).await;
        }
    };
    let group = Pid::from_raw(child.id().and_then(|id| i32::try_from(id).ok()).unwrap_or(0));
    send(&out, Frame::Started(group.as_raw())).await;
    if let Some(line) = return_home(&job.cgroup).await {
        send(&out, Frame::Stderr(line)).await;
    }
    let (relays, spoke) = Relays::start(child.stdout.take(), child.stderr.take(), &out);
    let mut watch = Watch::new(group, &job);
    let status = watch.until_exit(&mut child, &mut inputs, spoke).await;
    // Nothing of the run may outlive its leader: children left in the group are killed too.
    signal_group(group, Signal::SIGKILL);
    relays.finish(Duration::from_secs(2)).await;
    let mut report = exit_report(status);
    report.rusage = children_usage();
    report.stopped_by = watch.cause;
    report.yield_signalled = watch.yielding.is_some_and(|y| y.signalled);
    report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    finish(out, writer, report).await
}

/// A spare's first line: its run. `None` at end of file, or for a line that is not a [`Start`].
async fn read_start(controls: &mut BufReader<pipe::Receiver>) -> Option<Start> {
    let mut line = Vec::new();
    if !frame::read_line(controls, &mut line, MAX_START_LINE).await.ok()? {
        return None;
    }
    Start::decode(&line)
}

async fn finish(
    out: mpsc::Sender<String>,
    writer: tokio::task::JoinHandle<()>,
    report: ExitReport,
) -> anyhow::Result<()> {
    send(&out, Frame::Exit(report)).await;
    drop(out);
    let _ = writer.await;
    Ok(())
}

async fn send(out: &mpsc::Sender<String>, frame: Frame) {
    let _ = out.send(frame.encode()).await;
}

fn spawn_worker(
    command: &[OsString],
    env: Option<&[(OsString, OsString)]>,
    cgroup: &[PathBuf],
) -> std::io::Result<Child> {
    let (program, args) = command.split_first().ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut cmd = Command::new(program);
    if let Some(env) = env {
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    // The worker is born in the run's cgroup, so nothing of it ever runs outside: the supervisor joins it for the
    // moment of the spawn and returns home afterwards ([`return_home`]). (Joining in the child between fork and
    // exec would need a `pre_exec` hook, which costs a full fork where the spawn otherwise uses a vfork-like
    // clone: about 2 ms a run here.)
    move_to(cgroup, "the run's cgroup")?;
    cmd.spawn()
}

/// Takes the supervisor out of the run's cgroup, once the worker's start has been said: a move can wait for the
/// kernel (a move into the root of a v1 `cpu` hierarchy took 1.7 ms at the median and 4 ms at p90 on the test
/// host), and nothing of the run needs it done first. Staying would only count the supervisor's few pages against
/// the run's limit: the run goes on, and the line returned, for its log, says so.
async fn return_home((cgroup, homes): &(Vec<PathBuf>, Vec<PathBuf>)) -> Option<String> {
    if cgroup.is_empty() {
        return None;
    }
    let homes = homes.clone();
    let moved = tokio::task::spawn_blocking(move || move_to(&homes, "the supervisor's own cgroup")).await;
    match moved {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("scrinalia: {e}")),
        Err(e) => Some(format!("scrinalia: cannot move into the supervisor's own cgroup: {e}")),
    }
}

/// Moves this process (every thread of it) into the cgroups whose `cgroup.procs` files are `procs`.
fn move_to(procs: &[PathBuf], what: &str) -> std::io::Result<()> {
    for path in procs {
        std::fs::write(path, b"0")
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot move into {what} ({}): {e}", path.display())))?;
    }
    Ok(())
}

fn exit_report(status: std::io::Result<ExitStatus>) -> ExitReport {
    match status {
        Ok(status) => ExitReport {
            code: status.code(),
            signal: status
                .signal()
                .map(|n| Signal::try_from(n).map_or_else(|_| format!("signal {n}"), |s| s.as_str().to_owned())),
            ..ExitReport::default()
        },
        Err(e) => {
            ExitReport { spawn_error: Some(format!("could not wait for the worker: {e}")), ..ExitReport::default() }
        }
    }
}

/// The CPU and peak memory of the worker and the descendants it waited for: this supervisor's only child is the
/// worker, so its `RUSAGE_CHILDREN` is the run's (a descendant left to the group's SIGKILL is not counted).
fn children_usage() -> Option<Rusage> {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).ok()?;
    let micros = |t: TimeVal| Some(u64::try_from(t.tv_sec()).ok()? * 1_000_000 + u64::try_from(t.tv_usec()).ok()?);
    Some(Rusage {
        user_us: micros(usage.user_time())?,
        system_us: micros(usage.system_time())?,
        max_rss_kib: u64::try_from(usage.max_rss()).ok()?,
    })
}

fn signal_group(group: Pid, signal: Signal) {
    if group.as_raw() > 1 {
        let _ = killpg(group, signal);
    }
}

/// Writes frames to the daemon. The pipe is non-blocking, so a frozen daemon only stalls this task, never the
/// deadline watch; once the daemon is gone, frames are dropped.
fn spawn_writer() -> std::io::Result<(mpsc::Sender<String>, tokio::task::JoinHandle<()>)> {
    let mut pipe = pipe::Sender::from_owned_fd(std::io::stdout().as_fd().try_clone_to_owned()?)?;
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    let task = tokio::spawn(async move {
        let mut broken = false;
        let mut batch = String::new();
        while let Some(line) = rx.recv().await {
            batch.clear();
            batch.push_str(&line);
            batch.push('\n');
            while batch.len() < 64 * 1024 {
                let Ok(more) = rx.try_recv() else { break };
                batch.push_str(&more);
                batch.push('\n');
            }
            if !broken && pipe.write_all(batch.as_bytes()).await.is_err() {
                broken = true;
            }
        }
    });
    Ok((tx, task))
}

/// What reaches the fence from outside.
#[derive(Debug, Clone, Copy)]
enum Input {
    /// A message of the daemon.
    Control(Control),
    /// The daemon's pipe closed.
    DaemonGone,
}

/// The daemon's pipe, read through one buffer: a spare's [`Start`] line first, then the controls.
fn control_pipe() -> std::io::Result<BufReader<pipe::Receiver>> {
    Ok(BufReader::new(pipe::Receiver::from_owned_fd(std::io::stdin().as_fd().try_clone_to_owned()?)?))
}

/// Reads the daemon's messages, then [`Input::DaemonGone`] when its pipe closes. SIGTERM, SIGINT and SIGHUP sent
/// to the supervisor itself count as `terminate`, so the worker is still stopped gently.
fn spawn_control_reader(mut reader: BufReader<pipe::Receiver>) -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel(64);
    let signals = tx.clone();
    let mut terms = [SignalKind::terminate(), SignalKind::interrupt(), SignalKind::hangup()].map(signal);
    tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Ok(true) = frame::read_line(&mut reader, &mut buf, 4096).await {
            let control = Control::decode(&String::from_utf8_lossy(&buf));
            buf.clear();
            if let Some(control) = control
                && tx.send(Input::Control(control)).await.is_err()
            {
                return;
            }
        }
        let _ = tx.send(Input::DaemonGone).await;
    });
    tokio::spawn(async move {
        let [Ok(a), Ok(b), Ok(c)] = &mut terms else { return };
        loop {
            tokio::select! {
                _ = a.recv() => {}
                _ = b.recv() => {}
                _ = c.recv() => {}
            }
            if signals.send(Input::Control(Control::Terminate)).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// The fence: when to signal the worker's group, and why.
struct Watch {
    group: Pid,
    deadline: Instant,
    timeout_at: Instant,
    grace: Duration,
    kill_at: Option<Instant>,
    killed: bool,
    cause: Option<StopCause>,
    /// The worker printed a stdout line: from then on it handles SIGUSR1, as the protocol requires.
    spoke: bool,
    /// The yield asked for, if one was.
    yielding: Option<Yielding>,
}

/// A yield the daemon asked for.
#[derive(Debug, Clone, Copy)]
struct Yielding {
    /// When the worker, still running, is stopped gently.
    until: Instant,
    /// Whether SIGUSR1 was sent (it waits for the worker's first stdout line).
    signalled: bool,
}

impl Watch {
    fn new(group: Pid, job: &Job) -> Self {
        Self {
            group,
            deadline: clock::instant_at(job.deadline_ns),
            timeout_at: Instant::now() + Duration::from_millis(job.timeout_ms),
            grace: Duration::from_millis(job.grace_ms),
            kill_at: None,
            killed: false,
            cause: None,
            spoke: false,
            yielding: None,
        }
    }

    async fn until_exit(
        &mut self,
        child: &mut Child,
        inputs: &mut mpsc::Receiver<Input>,
        mut spoke: oneshot::Receiver<()>,
    ) -> std::io::Result<ExitStatus> {
        loop {
            let kill_at = self.kill_at.unwrap_or(self.deadline);
            let yield_until = self.yielding.map_or(self.deadline, |y| y.until);
            tokio::select! {
                status = child.wait() => return status,
                Some(input) = inputs.recv() => self.on_input(input),
                said = &mut spoke, if !self.spoke => {
                    self.spoke = true;
                    if said.is_ok() {
                        self.signal_yield();
                    }
                }
                () = sleep_until(self.deadline), if !self.killed => self.kill(StopCause::Deadline),
                () = sleep_until(self.timeout_at), if self.cause.is_none() => self.terminate(StopCause::Timeout),
                () = sleep_until(yield_until), if self.yielding.is_some() && self.cause.is_none() => {
                    self.terminate(StopCause::Yield);
                }
                () = sleep_until(kill_at), if self.kill_at.is_some() && !self.killed => {
                    signal_group(self.group, Signal::SIGKILL);
                    self.killed = true;
                }
            }
        }
    }

    fn on_input(&mut self, input: Input) {
        match input {
            Input::DaemonGone => self.terminate(StopCause::DaemonGone),
            Input::Control(Control::Deadline(ns)) => self.deadline = self.deadline.max(clock::instant_at(ns)),
            Input::Control(Control::Cancel) => self.terminate(StopCause::Cancel),
            Input::Control(Control::Terminate) => self.terminate(StopCause::Terminate),
            Input::Control(Control::Kill) => self.kill(StopCause::Kill),
            Input::Control(Control::Yield { grace_ms }) => self.ask_yield(Duration::from_millis(grace_ms)),
        }
    }

    /// A yield is asked once, and not of a worker already being stopped: a stop is already what it would come to.
    fn ask_yield(&mut self, grace: Duration) {
        if self.yielding.is_some() || self.cause.is_some() || self.killed {
            return;
        }
        self.yielding = Some(Yielding { until: Instant::now() + grace, signalled: false });
        self.signal_yield();
    }

    /// SIGUSR1 to the worker process, not its group: how to wind down is the worker's to decide, and a helper of
    /// its own that does not handle SIGUSR1 would die of it. Held until the worker printed a stdout line, before
    /// which it may not handle SIGUSR1 yet and would die of it too.
    fn signal_yield(&mut self) {
        let Some(yielding) = self.yielding.as_mut().filter(|y| !y.signalled) else { return };
        if !self.spoke || self.cause.is_some() || self.killed || self.group.as_raw() <= 1 {
            return;
        }
        // The worker is not reaped before `until_exit` returns, so its pid cannot have been reused.
        let _ = kill(self.group, Signal::SIGUSR1);
        yielding.signalled = true;
    }

    /// SIGTERM now, SIGKILL after the grace period (or at the deadline, whichever comes first). A cancel, a
    /// timeout or a shutdown after a yield's grace ended takes its place as the cause: the run ends as they say.
    fn terminate(&mut self, cause: StopCause) {
        if self.killed {
            return;
        }
        if let Some(current) = self.cause {
            if current == StopCause::Yield && cause != StopCause::Yield {
                self.cause = Some(cause);
            }
            return;
        }
        self.cause = Some(cause);
        signal_group(self.group, Signal::SIGTERM);
        self.kill_at = Some(Instant::now() + self.grace);
    }

    /// SIGKILL now: the run is no longer ours, so no grace.
    fn kill(&mut self, cause: StopCause) {
        if !self.cause.is_some_and(StopCause::fences) {
            self.cause = Some(cause);
        }
        signal_group(self.group, Signal::SIGKILL);
        self.killed = true;
    }
}
