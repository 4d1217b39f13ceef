//! The real binaries as child processes: started with their output in a log file, waited for until they are
//! ready (an HTTP endpoint answers, or a line appears in their log), signalled as an operator or a crash would,
//! and killed when dropped, so that a failed test leaves nothing running.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::Context as _;
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use tokio::process::{Child, Command};

/// A running binary whose output goes to a log file.
pub struct Process {
    /// The child.
    pub child: Child,
    /// Its combined output.
    pub log: PathBuf,
    /// A name for messages.
    pub name: String,
}

impl Process {
    /// Starts `program` with `args` and extra `env`, its output to `<dir>/<name>.log`.
    pub fn start(program: &Path, name: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", program.display()))?;
        Ok(Self { child, log, name: name.to_owned() })
    }

    /// Starts `program --config <config> …args` and waits until `ready` says it is ready.
    pub async fn start_ready(
        program: &Path,
        name: &str,
        dir: &Path,
        config: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        ready: Ready<'_>,
    ) -> anyhow::Result<Self> {
        let config = config.display().to_string();
        let args: Vec<&str> = ["--config", config.as_str()].into_iter().chain(args.iter().copied()).collect();
        let mut process = Self::start(program, name, dir, &args, env)?;
        match ready {
            Ready::Http(url) => process.wait_http(url, Duration::from_secs(60)).await?,
            Ready::Line(needle) => process.wait_for(needle, Duration::from_secs(60)).await?,
            Ready::Started => {}
        }
        Ok(process)
    }

    /// Its process id (it must not have been reaped yet).
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().and_then(|id| i32::try_from(id).ok()).expect("the process is running"))
    }

    /// Sends a signal.
    pub fn try_signal(&self, signal: Signal) -> anyhow::Result<()> {
        kill(self.pid(), signal).with_context(|| format!("signal {signal} to {}", self.name))
    }

    /// Sends a signal; panics if it cannot (the process is gone: a test's mistake).
    pub fn signal(&self, signal: Signal) {
        self.try_signal(signal).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it has exited (and with what).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until its output contains `needle`; fails at once if it exits first.
    pub async fn wait_for(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.output().contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                anyhow::bail!("{} exited ({status}) before saying {needle:?}:\n{}", self.name, tail(&self.output()));
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{} did not say {needle:?} within {timeout:?}:\n{}",
                self.name,
                tail(&self.output())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `GET url` answers 200; fails at once if it exits first.
    pub async fn wait_http(&mut self, url: &str, timeout: Duration) -> anyhow::Result<()> {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if client.get(url).send().await.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                anyhow::bail!("{} exited ({status}) before {url} answered:\n{}", self.name, tail(&self.output()));
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{url} did not answer within {timeout:?}:\n{}",
                tail(&self.output())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for it to exit; returns its exit code (`None` if a signal killed it).
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<Option<i32>> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status.context("wait for the process")?.code()),
            Err(_) => anyhow::bail!("{} did not exit within {timeout:?}; output:\n{}", self.name, self.output()),
        }
    }

    /// Waits for it to exit; returns its exit code (`None` if a signal killed it). Panics after `timeout`.
    pub async fn wait(&mut self, timeout: Duration) -> Option<i32> {
        self.wait_exit(timeout).await.unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) {
        let _ = self.try_signal(Signal::SIGTERM);
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A frozen process is thawed first: some kernels' bookkeeping delays a SIGKILL to a stopped process.
        if let Some(id) = self.child.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = kill(Pid::from_raw(id), Signal::SIGCONT);
        }
        let _ = self.child.start_kill();
    }
}

/// When a started process counts as ready.
#[derive(Debug, Clone, Copy)]
pub enum Ready<'a> {
    /// When `GET <url>` answers 200 (the API's `/readyz`).
    Http(&'a str),
    /// When its log holds this text (the daemon's `daemon started`).
    Line(&'a str),
    /// As soon as it is started.
    Started,
}

/// The last lines of a log, for error messages.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
