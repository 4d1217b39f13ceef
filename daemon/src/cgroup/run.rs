//! One run's cgroup: made with its limits before its supervisor starts the worker, joined by the worker between
//! fork and exec (the supervisor is given the `cgroup.procs` files to join), read at the end and removed.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{Hierarchy, Limits, runs_dir, write};

/// The CFS period the cpu limit is written against, in microseconds.
const PERIOD_US: u64 = 100_000;

/// A run's cgroup: one directory on v2, one per controller on v1.
#[derive(Debug, Clone)]
pub struct RunCgroup {
    v2: bool,
    memory: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    /// The memory limit written, in bytes.
    pub memory_max_bytes: Option<u64>,
    /// The `cgroup.procs` files of where the supervisor lives (the daemon's own cgroup; on v2 its `daemon` leaf),
    /// to which the supervisor returns once it has started the worker.
    homes: Vec<PathBuf>,
}

/// What a run's cgroup counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Processes the kernel's OOM killer killed there.
    pub oom_kills: u64,
    /// The tree's peak memory, in bytes (on v1 page cache included).
    pub peak_bytes: Option<u64>,
    /// The tree's CPU, in microseconds.
    pub cpu_us: Option<u64>,
}

impl RunCgroup {
    /// Makes the cgroup `name` under each `runs` directory and writes `limits`; every controller the host has is
    /// used for counting, limited or not
    /// (v1's `cpu` only for a cpu limit). Nothing is left behind when a write fails.
    pub(super) fn create(hierarchy: &Hierarchy, name: &str, limits: &Limits) -> Result<Self, String> {
        // `runs` again if a sibling daemon sharing this cgroup removed it as it stopped.
        let make = |base: &Path| -> Result<PathBuf, String> {
            let dir = runs_dir(base)?.join(name);
            fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            Ok(dir)
        };
        let mut cgroup = match hierarchy {
            Hierarchy::V2 { own, controllers } => {
                if !own.join("runs").is_dir() {
                    write(&runs_dir(own)?.join("cgroup.subtree_control"), &super::enabled(controllers))?;
                }
                let dir = make(own)?;
                let homes = vec![own.join("daemon").join("cgroup.procs")];
                Self {
                    v2: true,
                    memory: Some(dir.clone()),
                    cpu: Some(dir),
                    cpuacct: None,
                    memory_max_bytes: None,
                    homes,
                }
            }
            Hierarchy::V1 { memory, cpu, cpuacct } => {
                // v1's `cpu` hierarchy counts nothing that `cpuacct` does not: joined only to limit, as each move
                // into a hierarchy and back costs the run's start time.
                let cpu = if limits.cpu_max.is_some() { cpu } else { &None };
                let homes = [memory, cpu, cpuacct].into_iter().flatten().map(|b| b.join("cgroup.procs")).collect();
                let mut made =
                    Self { v2: false, memory: None, cpu: None, cpuacct: None, memory_max_bytes: None, homes };
                let bases = [(memory, 0), (cpu, 1), (cpuacct, 2)];
                for (base, slot) in bases.into_iter().filter_map(|(b, s)| b.as_ref().map(|b| (b, s))) {
                    let dir = match make(base) {
                        Ok(dir) => dir,
                        Err(e) => {
                            made.remove_now();
                            return Err(e);
                        }
                    };
                    *[&mut made.memory, &mut made.cpu, &mut made.cpuacct][slot] = Some(dir);
                }
                made
            }
        };
        if let Err(e) = cgroup.write_limits(limits) {
            cgroup.remove_now();
            return Err(e);
        }
        Ok(cgroup)
    }

    fn write_limits(&mut self, limits: &Limits) -> Result<(), String> {
        if let (Some(bytes), Some(dir)) = (limits.memory_max_bytes, &self.memory) {
            if self.v2 {
                write(&dir.join("memory.max"), &bytes.to_string())?;
                // Swap included: the limit is the whole of what the run may hold.
                if dir.join("memory.swap.max").exists() {
                    write(&dir.join("memory.swap.max"), "0")?;
                }
            } else {
                write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                if dir.join("memory.memsw.limit_in_bytes").exists() {
                    write(&dir.join("memory.memsw.limit_in_bytes"), &bytes.to_string())?;
                }
            }
            self.memory_max_bytes = Some(bytes);
        }
        if let (Some(cores), Some(dir)) = (limits.cpu_max, &self.cpu) {
            let quota = ((cores * PERIOD_US as f64).round() as u64).max(1_000);
            if self.v2 {
                write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
            } else {
                write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        Ok(())
    }

    /// Where the supervisor returns once it has started the worker (see [`RunCgroup::procs`]).
    pub fn homes(&self) -> Vec<PathBuf> {
        self.homes.clone()
    }

    /// The `cgroup.procs` files of the run's cgroup (writing `0` to each moves the writing process). The
    /// supervisor joins them, starts the worker, which is born there, and returns to its [`RunCgroup::homes`].
    pub fn procs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<&PathBuf> = [&self.memory, &self.cpu, &self.cpuacct].into_iter().flatten().collect();
        dirs.dedup();
        dirs.into_iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// What the cgroup counted.
    pub fn counters(&self) -> Counters {
        let read = |dir: &Option<PathBuf>, file: &str| dir.as_ref().and_then(|d| fs::read_to_string(d.join(file)).ok());
        let number = |text: Option<String>| text.and_then(|t| t.trim().parse::<u64>().ok());
        let keyed = |text: Option<String>, key: &str| {
            text.and_then(|t| t.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok())))
        };
        if self.v2 {
            Counters {
                oom_kills: keyed(read(&self.memory, "memory.events"), "oom_kill ").unwrap_or(0),
                peak_bytes: number(read(&self.memory, "memory.peak")),
                cpu_us: keyed(read(&self.cpu, "cpu.stat"), "usage_usec "),
            }
        } else {
            Counters {
                oom_kills: keyed(read(&self.memory, "memory.oom_control"), "oom_kill ").unwrap_or(0),
                peak_bytes: number(read(&self.memory, "memory.max_usage_in_bytes")),
                cpu_us: number(read(&self.cpuacct, "cpuacct.usage")).map(|ns| ns / 1000),
            }
        }
    }

    /// Whether the counters are the v1 controller's (whose peak includes page cache).
    pub fn is_v1(&self) -> bool {
        !self.v2
    }

    /// Removes the cgroup once its processes are gone: the group was killed, but the kernel may take a moment to
    /// let the last of them go. One still busy after a few tries is left for the next daemon start.
    pub async fn remove(self) {
        for _ in 0..100 {
            if self.remove_now() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(cgroup = ?self.procs(), "a run cgroup could not be removed yet; the next start removes it");
    }

    /// Removes every directory of the cgroup that is empty now; whether none is left.
    fn remove_now(&self) -> bool {
        let mut gone = true;
        for dir in [&self.memory, &self.cpu, &self.cpuacct].into_iter().flatten() {
            match fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => gone = false,
            }
        }
        gone
    }
}
