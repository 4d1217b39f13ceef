//! A supervisor started ahead of its run, so that a claimed run's worker starts without waiting for a supervisor
//! to be executed and to start up: that took most of the time between a claim and the worker's start
//! (docs/benchmarks.md, `latency`). The daemon keeps one spare; a run takes it, and the next one is started
//! once that run's worker has started, off the path of the run that took it. A burst of claims takes the spare
//! and starts supervisors of their own for the rest, as every run did before.
//!
//! A spare knows nothing of any run until its `start` line ([`Start`]): it is started with only the variables the
//! allow-list passes to every worker, is non-dumpable like every supervisor (the run's environment, which it is
//! sent, cannot be read by another process of the user), and exits quietly at end of file on its stdin: when the
//! daemon stops or drops it.

use std::{
    ffi::OsString,
    path::PathBuf,
    process::Stdio,
    sync::{Mutex, PoisonError},
};

use tokio::{
    io::AsyncWriteExt,
    process::{Child, ChildStdin, ChildStdout, Command},
};

use crate::frame::{MAX_START_LINE, Start};

/// A started spare: the process and its two pipes.
#[derive(Debug)]
pub struct Spare {
    /// The supervisor's process.
    pub child: Child,
    /// Its stdin: the `start` line, then controls.
    pub stdin: ChildStdin,
    /// Its stdout: frames.
    pub stdout: ChildStdout,
}

/// The daemon's spare supervisor, if one is ready.
#[derive(Debug)]
pub struct Spares {
    program: PathBuf,
    inherited: Vec<(OsString, OsString)>,
    slot: Mutex<Option<Spare>>,
}

impl Spares {
    /// No spare yet; [`Spares::refill`] starts `program supervise --spare` with the `inherited` variables.
    pub fn new(program: PathBuf, inherited: Vec<(OsString, OsString)>) -> Self {
        Self { program, inherited, slot: Mutex::new(None) }
    }

    /// Starts a spare unless one is ready. A spare that cannot be started is only logged: runs then start
    /// supervisors of their own. The process is started without the lock held, so a run taking the spare meanwhile
    /// never waits for it; should two refills race, the later spare is dropped and exits (its stdin closes).
    pub fn refill(&self) {
        if self.lock().as_mut().is_some_and(|spare| matches!(spare.child.try_wait(), Ok(None))) {
            return;
        }
        match self.spawn() {
            Ok(spare) => {
                let mut slot = self.lock();
                if !slot.as_mut().is_some_and(|ready| matches!(ready.child.try_wait(), Ok(None))) {
                    *slot = Some(spare);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, program = %self.program.display(), "could not start a spare supervisor")
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Spare>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn spawn(&self) -> std::io::Result<Spare> {
        let mut cmd = Command::new(&self.program);
        cmd.args(["supervise", "--spare"])
            .env_clear()
            .envs(self.inherited.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            // Once it holds a run, it must outlive a dropped handle (its worker would be left unfenced); idle, it
            // exits by itself when its stdin closes.
            .kill_on_drop(false);
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the spare supervisor's pipes are missing"));
        };
        Ok(Spare { child, stdin, stdout })
    }

    /// Hands `start` to the spare, if one is ready and alive and `start` fits on its line; `None` otherwise, and
    /// the caller starts a supervisor of its own.
    pub async fn start(&self, start: &Start) -> Option<Spare> {
        let mut line = start.encode();
        if line.len() >= MAX_START_LINE {
            return None;
        }
        line.push('\n');
        let mut spare = self.lock().take()?;
        if !matches!(spare.child.try_wait(), Ok(None)) {
            return None;
        }
        match spare.stdin.write_all(line.as_bytes()).await {
            Ok(()) => Some(spare),
            Err(e) => {
                tracing::warn!(error = %e, "the spare supervisor did not take its run; starting one for it");
                None
            }
        }
    }
}
