//! The kit the workspace's tests (`tests/`) and benchmarks (`bench/`) share, so that each thing is done one
//! way: a fresh PostgreSQL database or SQLite file ([`db`]), configuration files written by serialising the
//! real settings types ([`config`], [`probes`]), the real binaries started as processes that are waited for
//! until ready ([`process`]), the API and a daemon spoken to over HTTP ([`stack`]), HTTP replies and a free port
//! ([`http`]), and waiting for a condition ([`wait`]).
//!
//! Everything here returns `anyhow::Result`: a benchmark reports the error, a test `expect`s it.

pub mod config;
pub mod db;
pub mod http;
pub mod probes;
pub mod process;
pub mod stack;
pub mod wait;

use std::path::{Path, PathBuf};

pub use config::ConfigFile;
pub use db::{FreshDb, Kind, Stores};
pub use http::{Reply, free_port};
pub use process::Process;
pub use wait::{eventually, try_eventually};

/// Where the workspace's binaries are (`scrinalia-api`, `scrinalia-daemon`, `scrinalia-demo-worker`, …).
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The binaries in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The binaries of the profile the running test was built with: a test executable lives in
    /// `target/<profile>/deps/`, the binaries in `target/<profile>/`.
    pub fn of_this_test() -> Self {
        let exe = std::env::current_exe().expect("the test executable's path");
        let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
        Self::at(dir)
    }

    /// The path of `name`, or why it is missing (build the binaries first: `scripts/test` does).
    pub fn path(&self, name: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        anyhow::ensure!(
            path.is_file(),
            "{} is missing: build the binaries first (`cargo build --workspace`; scripts/test does)",
            path.display()
        );
        Ok(path)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
