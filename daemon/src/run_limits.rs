//! A run's limits as the daemon keeps them: the cgroup made for a run whose configuration has `memory_max` or
//! `cpu_max` (what this host cannot keep is said in the run's log, and the run goes on), and at its end the
//! tree's counters, which give its usage and tell an end by the memory limit from any other SIGKILL.

use std::path::PathBuf;

use scrinalia_shared::{Run, usage::TreeCounters};

use crate::{
    Context,
    cgroup::{Counters, Limits, RunCgroup},
};

/// What the daemon made of a run's limits.
#[derive(Debug, Default)]
pub struct RunLimits {
    /// The run's cgroup, when it has a limit this host keeps.
    pub cgroup: Option<RunCgroup>,
    /// Sentences for the run's log: limits not kept as asked.
    pub said: Vec<String>,
}

/// What a run's cgroup counted at its end.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// The counters.
    pub counters: Counters,
    /// The memory limit written, in bytes.
    pub memory_max_bytes: Option<u64>,
    /// Whether they are cgroup v1's.
    pub v1: bool,
}

impl Measured {
    /// The tree's figures, for the run's usage.
    pub fn tree(&self) -> TreeCounters {
        TreeCounters {
            measured_by: if self.v1 { "cgroup v1" } else { "cgroup v2" },
            cpu_us: self.counters.cpu_us,
            peak_bytes: self.counters.peak_bytes,
        }
    }

    /// The limit and the peak, when the kernel's OOM killer acted in the run's cgroup.
    pub fn out_of_memory(&self) -> Option<(u64, Option<u64>)> {
        let limit = self.memory_max_bytes?;
        (self.counters.oom_kills > 0).then_some((limit, self.counters.peak_bytes))
    }
}

/// The limits resolved onto `run`'s configuration.
pub fn limits_of(run: &Run) -> Limits {
    Limits {
        memory_max_bytes: run.config.memory_max_bytes.as_ref().map(|r| r.value),
        cpu_max: run.config.cpu_max.as_ref().map(|r| r.value),
    }
}

/// Makes `run`'s cgroup for the limits this host keeps. A cgroup that cannot be made is said too: the run goes
/// on without it, never as if its limits were kept silently.
pub fn prepare(ctx: &Context, run: &Run) -> RunLimits {
    let (kept, mut said) = ctx.cgroups.keepable(limits_of(run));
    let cgroup = match ctx.cgroups.create(run.id, &kept) {
        Ok(cgroup) => cgroup,
        Err(why) => {
            said.push(format!("the run's limits are not enforced: {why}"));
            None
        }
    };
    for sentence in &said {
        tracing::warn!(limit = %sentence, "a limit of the run is not kept as asked");
    }
    RunLimits { cgroup, said }
}

impl RunLimits {
    /// The `cgroup.procs` files the worker is born in, and those the supervisor returns to.
    pub fn procs(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        self.cgroup.as_ref().map(|c| (c.procs(), c.homes())).unwrap_or_default()
    }

    /// What the cgroup counted, once the worker's group is gone.
    pub fn measured(&self) -> Option<Measured> {
        self.cgroup.as_ref().map(|c| Measured {
            counters: c.counters(),
            memory_max_bytes: c.memory_max_bytes,
            v1: c.is_v1(),
        })
    }

    /// Removes the run's cgroup.
    pub async fn remove(self) {
        if let Some(cgroup) = self.cgroup {
            cgroup.remove().await;
        }
    }
}
