//! Starting the real binaries for multi-process tests, and signalling them as an operator (or a crash) would.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

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
    /// Starts `bin` (a workspace binary) with `args` and extra `env`, its output to `<dir>/<name>.log`.
    pub fn start(bin: &str, name: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("create the log file");
        let err = out.try_clone().expect("clone the log file");
        let mut cmd = Command::new(crate::bin_path(bin));
        cmd.args(args).envs(env.iter().copied()).stdin(Stdio::null()).stdout(out).stderr(err).kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("start {bin}: {e}"));
        Self { child, log, name: name.to_owned() }
    }

    /// Its process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().expect("the process is running") as i32)
    }

    /// Sends a signal.
    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap_or_else(|e| panic!("signal {signal} to {}: {e}", self.name));
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for it to exit; returns its exit code (None if killed by a signal).
    pub async fn wait(&mut self, timeout: Duration) -> Option<i32> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("wait for the process").code(),
            Err(_) => panic!("{} did not exit within {timeout:?}; output:\n{}", self.name, self.output()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A frozen process cannot die of SIGKILL until it is thawed in some kernels' bookkeeping; thaw it first.
        if let Some(id) = self.child.id() {
            let _ = kill(Pid::from_raw(id as i32), Signal::SIGCONT);
        }
        let _ = self.child.start_kill();
    }
}
