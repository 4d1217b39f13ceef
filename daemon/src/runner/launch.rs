//! Starting a run's supervisor and talking to it: the spare given the run on its stdin, or a supervisor started
//! for it; the task that writes the daemon's controls to its stdin, and the reader of its frames.

use std::{path::PathBuf, process::Stdio, time::Duration};

use scrinalia_shared::Run;
use tokio::{
    io::{AsyncWriteExt, BufReader},
    process::{Child, ChildStdout, Command},
    sync::mpsc,
    task::JoinHandle,
};

use crate::{
    Context,
    frame::{self, Control, Frame, Start},
    invocation::Invocation,
};

/// A started supervisor: the process, its frames, where its controls go, and the task writing them to its stdin.
pub(super) struct Spawned {
    pub(super) child: Child,
    pub(super) frames: FrameReader,
    pub(super) controls: mpsc::Sender<Control>,
    pub(super) writer: JoinHandle<()>,
}

/// Starts the run's supervisor: the spare, given the run on its stdin, when one is ready; otherwise
/// `scrinalia-daemon supervise … -- <worker command>` in its own process group, with the worker's environment.
/// Its stderr is the daemon's.
pub(super) async fn spawn_supervisor(
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
pub(super) async fn reap(mut child: Child) {
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}

/// The supervisor's frames.
pub(super) struct FrameReader {
    reader: BufReader<ChildStdout>,
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next frame; `None` when the supervisor's stdout closed. Cancel-safe.
    pub(super) async fn next(&mut self) -> Option<Frame> {
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
