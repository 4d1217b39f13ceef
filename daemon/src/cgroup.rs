//! Cgroups for the runs of workers with limits (`memory_max`, `cpu_max`): which hierarchy this host has and what
//! it lets the daemon enforce, found once at start and said per limit; a cgroup of its own for each such run,
//! under the cgroup the daemon was given, which the run's supervisor makes its worker join between fork and exec;
//! and the run's counters read back at its end (the tree's CPU and peak memory, and whether the kernel's OOM
//! killer acted there). cgroup v2 is the production path (the shipped unit's `Delegate=yes`): the daemon moves
//! itself into the leaf `<own>/daemon` and makes `<own>/runs/<id>`. cgroup v1, which some hosts still have, keeps
//! one directory per controller (`memory`, `cpu`, `cpuacct`), each with `runs/<id>` under the daemon's own.

mod run;

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

pub use self::run::{Counters, RunCgroup};

/// The limits of one run, as resolved onto its configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Memory and swap together, in bytes.
    pub memory_max_bytes: Option<u64>,
    /// A fraction of cores.
    pub cpu_max: Option<f64>,
}

impl Limits {
    /// Whether there is any limit (a run without one gets no cgroup, and its usage comes from `rusage`).
    pub fn any(&self) -> bool {
        self.memory_max_bytes.is_some() || self.cpu_max.is_some()
    }
}

/// Where this daemon's cgroups are, by hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2: the daemon's own cgroup, and the controllers it offers.
    V2 { own: PathBuf, controllers: BTreeSet<String> },
    /// cgroup v1: the daemon's own cgroup directory in each controller's hierarchy that is mounted.
    V1 { memory: Option<PathBuf>, cpu: Option<PathBuf>, cpuacct: Option<PathBuf> },
}

impl Hierarchy {
    /// The hierarchy a process sees, from its `/proc/self/mountinfo` and `/proc/self/cgroup`: v2 when the unified
    /// hierarchy is mounted and no v1 controller this module uses is, else v1; `None` without either.
    pub fn detect(mountinfo: &str, own: &str) -> Option<Self> {
        let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
        let path_in = |controller: Option<&str>| -> Option<PathBuf> {
            let mount = mounts.iter().find(|m| match controller {
                Some(c) => m.v1_controllers.iter().any(|x| x == c),
                None => m.v2,
            })?;
            let line = own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                let matches = match controller {
                    Some(c) => list.split(',').any(|x| x == c),
                    None => list.is_empty(),
                };
                matches.then_some(path)
            })?;
            // A path inside the mount's own root (a container's view) is relative to where it is mounted.
            let relative = line.strip_prefix(mount.root.as_str()).unwrap_or(line);
            Some(mount.point.join(relative.trim_start_matches('/')))
        };
        let v1 =
            Self::V1 { memory: path_in(Some("memory")), cpu: path_in(Some("cpu")), cpuacct: path_in(Some("cpuacct")) };
        match (&v1, path_in(None)) {
            (Self::V1 { memory: None, cpu: None, .. }, Some(own)) => {
                let controllers = fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
                Some(Self::V2 { own, controllers: controllers.split_whitespace().map(str::to_owned).collect() })
            }
            (Self::V1 { memory: None, cpu: None, .. }, None) => None,
            _ => Some(v1),
        }
    }

    /// The hierarchy of this process.
    pub fn of_this_process() -> Option<Self> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        Self::detect(&mountinfo, &own)
    }
}

/// One line of `/proc/self/mountinfo` that mounts a cgroup hierarchy.
struct Mount {
    root: String,
    point: PathBuf,
    v2: bool,
    v1_controllers: Vec<String>,
}

impl Mount {
    fn parse(line: &str) -> Option<Self> {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        let (root, point) = (fields.get(3)?, fields.get(4)?);
        let mut right = right.split(' ');
        let (kind, _source, options) = (right.next()?, right.next()?, right.next().unwrap_or(""));
        let v1_controllers: Vec<String> = match kind {
            "cgroup" => {
                options.split(',').filter(|o| ["memory", "cpu", "cpuacct"].contains(o)).map(str::to_owned).collect()
            }
            _ => Vec::new(),
        };
        (kind == "cgroup2" || !v1_controllers.is_empty()).then(|| Self {
            root: (*root).to_owned(),
            point: PathBuf::from(*point),
            v2: kind == "cgroup2",
            v1_controllers,
        })
    }
}

/// What the daemon can enforce on this host, each limit with the reason when it cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    /// `memory_max`.
    pub memory: Result<(), String>,
    /// `cpu_max`.
    pub cpu: Result<(), String>,
}

/// The daemon's cgroups: where runs' cgroups go, and what it can enforce.
#[derive(Debug, Clone)]
pub struct Cgroups {
    hierarchy: Option<Hierarchy>,
    /// What it can enforce.
    pub enforcement: Enforcement,
    /// The cores this host has, which a `cpu_max` cannot exceed.
    pub cores: f64,
}

impl Cgroups {
    /// Prepares `hierarchy` for runs: on v2 the daemon moves itself into `<own>/daemon` and delegates the memory
    /// and cpu controllers to `<own>/runs`; on v1 it makes `runs` in each controller's directory. Removes the run
    /// cgroups a killed daemon left behind (an empty one only: a sibling's live run keeps its own). Whatever fails
    /// makes the limits it concerns unenforced, with the reason.
    pub fn prepare(hierarchy: Option<Hierarchy>) -> Self {
        let Some(found) = hierarchy else { return Self::off("this host has no cgroup hierarchy the daemon can see") };
        let enforcement = match &found {
            Hierarchy::V2 { own, controllers } => prepare_v2(own, controllers),
            Hierarchy::V1 { memory, cpu, cpuacct } => {
                let ready = |dir: &Option<PathBuf>, name: &str| match dir {
                    None => Err(format!("no {name} controller (cgroup v1)")),
                    Some(dir) => runs_dir(dir).map(drop),
                };
                let _ = ready(cpuacct, "cpuacct");
                Enforcement { memory: ready(memory, "memory"), cpu: ready(cpu, "cpu") }
            }
        };
        for dir in run_parents(&found) {
            remove_leftovers(&dir);
        }
        Self { hierarchy: Some(found), enforcement, cores: cores() }
    }

    /// No cgroups, for the reason `why`: no limit is enforced.
    pub fn off(why: &str) -> Self {
        let enforcement = Enforcement { memory: Err(why.to_owned()), cpu: Err(why.to_owned()) };
        Self { hierarchy: None, enforcement, cores: cores() }
    }

    /// At the daemon's stop: removes the `runs` directories it made, when no sibling daemon's run is in them.
    pub fn release(&self) {
        for dir in self.hierarchy.iter().flat_map(run_parents) {
            let _ = fs::remove_dir(dir);
        }
    }

    /// Says at start, per limit, whether this host enforces it.
    pub fn log(&self) {
        for (limit, result) in [("memory_max", &self.enforcement.memory), ("cpu_max", &self.enforcement.cpu)] {
            match result {
                Ok(()) => tracing::info!(limit, hierarchy = ?self.hierarchy, "limit enforced with a cgroup per run"),
                Err(why) => tracing::warn!(limit, %why, "limit not enforced on this host; runs with it go on without"),
            }
        }
    }

    /// What the daemon registers: its cores and each limit it cannot enforce, with the reason.
    pub fn limits(&self) -> scrinalia_shared::DaemonLimits {
        let mut unenforced = std::collections::BTreeMap::new();
        for (limit, result) in [("memory_max", &self.enforcement.memory), ("cpu_max", &self.enforcement.cpu)] {
            if let Err(why) = result {
                unenforced.insert(limit.to_owned(), why.clone());
            }
        }
        scrinalia_shared::DaemonLimits { cores: self.cores, unenforced }
    }

    /// A sentence per limit this host cannot enforce, e.g. "cpu_max not enforced: no cpu controller".
    pub fn unenforced(&self) -> Vec<String> {
        let mut said = Vec::new();
        for (limit, result) in [("memory_max", &self.enforcement.memory), ("cpu_max", &self.enforcement.cpu)] {
            if let Err(why) = result {
                said.push(format!("{limit} not enforced: {why}"));
            }
        }
        said
    }

    /// What of `wanted` this host keeps, and a sentence for each limit it does not keep as asked: one it cannot
    /// enforce is dropped (the run goes on, and says so), a `cpu_max` above this host's cores is clamped to them.
    pub fn keepable(&self, wanted: Limits) -> (Limits, Vec<String>) {
        let mut kept = wanted;
        let mut said = Vec::new();
        if wanted.memory_max_bytes.is_some()
            && let Err(why) = &self.enforcement.memory
        {
            kept.memory_max_bytes = None;
            said.push(format!("memory_max not enforced on this host: {why}"));
        }
        match (wanted.cpu_max, &self.enforcement.cpu) {
            (Some(_), Err(why)) => {
                kept.cpu_max = None;
                said.push(format!("cpu_max not enforced on this host: {why}"));
            }
            (Some(cores), Ok(())) if cores > self.cores => {
                kept.cpu_max = Some(self.cores);
                said.push(format!("cpu_max {cores} clamped to this host's {} cores", self.cores));
            }
            _ => {}
        }
        (kept, said)
    }

    /// Makes run `run`'s cgroup with `limits`, which [`Cgroups::keepable`] kept (`None` without a limit).
    pub fn create(&self, run: uuid::Uuid, limits: &Limits) -> Result<Option<RunCgroup>, String> {
        if !limits.any() {
            return Ok(None);
        }
        let hierarchy = self.hierarchy.as_ref().ok_or("no cgroup hierarchy")?;
        RunCgroup::create(hierarchy, &run.to_string(), limits).map(Some)
    }
}

/// The cores this process may use.
fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// `<dir>/runs`, made if missing.
fn runs_dir(dir: &Path) -> Result<PathBuf, String> {
    let runs = dir.join("runs");
    match fs::create_dir(&runs) {
        Ok(()) => Ok(runs),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(runs),
        Err(e) => Err(format!("cannot make {}: {e}", runs.display())),
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("cannot write {value:?} to {}: {e}", path.display()))
}

fn prepare_v2(own: &Path, controllers: &BTreeSet<String>) -> Enforcement {
    let missing = |c: &str| (!controllers.contains(c)).then(|| format!("no {c} controller delegated (cgroup v2)"));
    let setup = || -> Result<(), String> {
        let leaf = own.join("daemon");
        if !leaf.is_dir() {
            fs::create_dir(&leaf).map_err(|e| format!("cannot make {}: {e}", leaf.display()))?;
        }
        write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
        write(&own.join("cgroup.subtree_control"), &enabled(controllers))?;
        let runs = runs_dir(own)?;
        write(&runs.join("cgroup.subtree_control"), &enabled(controllers))
    };
    match setup() {
        Err(why) => Enforcement { memory: Err(why.clone()), cpu: Err(why) },
        Ok(()) => {
            Enforcement { memory: missing("memory").map_or(Ok(()), Err), cpu: missing("cpu").map_or(Ok(()), Err) }
        }
    }
}

/// What a v2 `cgroup.subtree_control` is given: the controllers limits use, of those offered.
fn enabled(controllers: &BTreeSet<String>) -> String {
    let enable: Vec<String> =
        ["memory", "cpu"].iter().filter(|c| controllers.contains(**c)).map(|c| format!("+{c}")).collect();
    enable.join(" ")
}

/// The `runs` directories that hold run cgroups.
fn run_parents(hierarchy: &Hierarchy) -> Vec<PathBuf> {
    match hierarchy {
        Hierarchy::V2 { own, .. } => vec![own.join("runs")],
        Hierarchy::V1 { memory, cpu, cpuacct } => {
            [memory, cpu, cpuacct].into_iter().flatten().map(|d| d.join("runs")).collect()
        }
    }
}

/// Removes every empty run cgroup under `runs` made more than a minute ago (a non-empty one belongs to a live run
/// and refuses; a newer one may be a sibling daemon's whose worker is about to join it).
fn remove_leftovers(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else { return };
    let old = |e: &fs::DirEntry| {
        e.metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age.as_secs() >= 60)
    };
    for entry in entries.flatten().filter(|e| e.path().is_dir() && old(e)) {
        if fs::remove_dir(entry.path()).is_ok() {
            tracing::info!(cgroup = %entry.path().display(), "removed a run cgroup left behind");
        }
    }
}

#[cfg(test)]
mod tests;
