//! The hierarchy found from `/proc` texts, and the file layout of both versions written into fake cgroup
//! directories (a temporary folder stands for `/sys/fs/cgroup`; no cgroup is made).

use std::fs;

use super::*;

const V1_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd";
const V1_OWN: &str = "9:name=systemd:/\n4:memory:/process_api/f2b8\n2:cpuacct:/\n1:cpu:/\n0::/\n";

#[test]
fn a_v1_host_gives_each_controllers_own_directory() {
    let found = Hierarchy::detect(V1_MOUNTS, V1_OWN);
    assert_eq!(
        found,
        Some(Hierarchy::V1 {
            memory: Some("/sys/fs/cgroup/memory/process_api/f2b8".into()),
            cpu: Some("/sys/fs/cgroup/cpu".into()),
            cpuacct: Some("/sys/fs/cgroup/cpuacct".into()),
        })
    );
    let combined = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
    let found = Hierarchy::detect(combined, "3:cpu,cpuacct:/system.slice/scrinalia.service\n");
    let dir = Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/system.slice/scrinalia.service"));
    assert_eq!(found, Some(Hierarchy::V1 { memory: None, cpu: dir.clone(), cpuacct: dir }));
}

#[test]
fn a_v2_host_gives_the_unified_directory_and_a_host_without_any_none() {
    let dir = tempfile::tempdir().expect("a folder");
    let own = dir.path().join("system.slice/scrinalia.service");
    fs::create_dir_all(&own).expect("made");
    fs::write(own.join("cgroup.controllers"), "cpuset cpu io memory pids\n").expect("written");
    let mounts = format!("25 21 0:22 / {} rw - cgroup2 cgroup2 rw\n", dir.path().display());
    let found = Hierarchy::detect(&mounts, "0::/system.slice/scrinalia.service\n");
    let controllers = ["cpuset", "cpu", "io", "memory", "pids"].map(str::to_owned).into();
    assert_eq!(found, Some(Hierarchy::V2 { own, controllers }));
    assert_eq!(Hierarchy::detect("31 23 0:28 / /tmp rw - tmpfs tmpfs rw\n", "0::/\n"), None);
}

#[test]
fn on_v2_the_daemon_moves_into_a_leaf_and_a_run_gets_its_limits() {
    let dir = tempfile::tempdir().expect("a folder");
    let own = dir.path().to_path_buf();
    let controllers = ["memory", "cpu"].map(str::to_owned).into();
    let cgroups = Cgroups::prepare(Some(Hierarchy::V2 { own: own.clone(), controllers }));
    assert_eq!(cgroups.enforcement, Enforcement { memory: Ok(()), cpu: Ok(()) });
    let read = |p: &str| fs::read_to_string(own.join(p)).expect(p);
    assert_eq!(read("daemon/cgroup.procs"), std::process::id().to_string());
    assert_eq!(
        (read("cgroup.subtree_control"), read("runs/cgroup.subtree_control")),
        ("+memory +cpu".into(), "+memory +cpu".into())
    );

    let limits = Limits { memory_max_bytes: Some(128 << 20), cpu_max: Some(0.5) };
    let run = cgroups.create(uuid::Uuid::nil(), &limits).expect("made").expect("a cgroup");
    let name = uuid::Uuid::nil().to_string();
    assert_eq!(read(&format!("runs/{name}/memory.max")), (128u64 << 20).to_string());
    assert_eq!(read(&format!("runs/{name}/cpu.max")), "50000 100000");
    assert_eq!(run.procs(), [own.join("runs").join(&name).join("cgroup.procs")]);

    fs::write(own.join(format!("runs/{name}/memory.events")), "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n").expect("w");
    fs::write(own.join(format!("runs/{name}/memory.peak")), "134217728\n").expect("w");
    fs::write(own.join(format!("runs/{name}/cpu.stat")), "usage_usec 1500000\nuser_usec 1400000\n").expect("w");
    assert_eq!(run.counters(), Counters { oom_kills: 1, peak_bytes: Some(128 << 20), cpu_us: Some(1_500_000) });
    assert!(!run.is_v1());
}

#[test]
fn on_v1_a_run_gets_a_directory_per_controller_and_its_counters() {
    let dir = tempfile::tempdir().expect("a folder");
    let base = |c: &str| {
        let d = dir.path().join(c);
        fs::create_dir_all(&d).expect("made");
        Some(d)
    };
    let hierarchy = Hierarchy::V1 { memory: base("memory"), cpu: base("cpu"), cpuacct: base("cpuacct") };
    let cgroups = Cgroups::prepare(Some(hierarchy));
    assert!(cgroups.unenforced().is_empty(), "{:?}", cgroups.unenforced());
    let limits = Limits { memory_max_bytes: Some(64 << 20), cpu_max: Some(1.5) };
    let run = cgroups.create(uuid::Uuid::nil(), &limits).expect("made").expect("a cgroup");
    let at = |c: &str, f: &str| dir.path().join(c).join("runs").join(uuid::Uuid::nil().to_string()).join(f);
    assert_eq!(fs::read_to_string(at("memory", "memory.limit_in_bytes")).expect("r"), (64u64 << 20).to_string());
    assert_eq!(fs::read_to_string(at("cpu", "cpu.cfs_quota_us")).expect("r"), "150000");
    assert_eq!(fs::read_to_string(at("cpu", "cpu.cfs_period_us")).expect("r"), "100000");
    assert_eq!(run.procs().len(), 3, "the worker joins each controller's cgroup");

    fs::write(at("memory", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").expect("w");
    fs::write(at("memory", "memory.max_usage_in_bytes"), "67108864\n").expect("w");
    fs::write(at("cpuacct", "cpuacct.usage"), "1009657083\n").expect("w");
    assert_eq!(run.counters(), Counters { oom_kills: 2, peak_bytes: Some(64 << 20), cpu_us: Some(1_009_657) });
    assert!(run.is_v1());
}

#[test]
fn on_v1_a_run_without_a_cpu_limit_stays_out_of_the_cpu_hierarchy() {
    let dir = tempfile::tempdir().expect("a folder");
    let base = |c: &str| {
        let d = dir.path().join(c);
        fs::create_dir_all(&d).expect("made");
        Some(d)
    };
    let hierarchy = Hierarchy::V1 { memory: base("memory"), cpu: base("cpu"), cpuacct: base("cpuacct") };
    let cgroups = Cgroups::prepare(Some(hierarchy));
    let limits = Limits { memory_max_bytes: Some(64 << 20), cpu_max: None };
    let run = cgroups.create(uuid::Uuid::nil(), &limits).expect("made").expect("a cgroup");
    let joined = |files: Vec<std::path::PathBuf>| {
        files
            .iter()
            .map(|f| {
                f.strip_prefix(dir.path())
                    .expect("under")
                    .components()
                    .next()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
            })
            .collect::<Vec<_>>()
    };
    let controllers = |names: &[&str]| names.iter().map(|n| Some((*n).to_owned())).collect::<Vec<_>>();
    assert_eq!(joined(run.procs()), controllers(&["memory", "cpuacct"]), "cpuacct still counts the run's CPU");
    assert_eq!(joined(run.homes()), controllers(&["memory", "cpuacct"]), "home from what it joined only");
    assert!(!dir.path().join("cpu/runs").join(uuid::Uuid::nil().to_string()).exists());
}

#[test]
fn a_limit_the_host_cannot_keep_is_refused_and_said() {
    let dir = tempfile::tempdir().expect("a folder");
    let hierarchy = Hierarchy::V1 { memory: Some(dir.path().to_path_buf()), cpu: None, cpuacct: None };
    let cgroups = Cgroups::prepare(Some(hierarchy));
    assert_eq!(cgroups.unenforced(), ["cpu_max not enforced: no cpu controller (cgroup v1)"]);
    let wanted = Limits { memory_max_bytes: Some(1 << 30), cpu_max: Some(1.0) };
    let (kept, said) = cgroups.keepable(wanted);
    assert_eq!(kept, Limits { memory_max_bytes: Some(1 << 30), cpu_max: None }, "the memory limit is still kept");
    assert_eq!(said, ["cpu_max not enforced on this host: no cpu controller (cgroup v1)"]);
    assert!(cgroups.create(uuid::Uuid::nil(), &Limits::default()).expect("no limit").is_none());
    let none = Cgroups::prepare(None);
    assert_eq!(none.unenforced().len(), 2);
}

#[test]
fn a_cpu_max_above_the_hosts_cores_is_clamped_and_said() {
    let dir = tempfile::tempdir().expect("a folder");
    let cpu = Some(dir.path().to_path_buf());
    let mut cgroups = Cgroups::prepare(Some(Hierarchy::V1 { memory: None, cpu, cpuacct: None }));
    cgroups.cores = 2.0;
    let (kept, said) = cgroups.keepable(Limits { cpu_max: Some(8.0), ..Limits::default() });
    assert_eq!((kept.cpu_max, said), (Some(2.0), vec!["cpu_max 8 clamped to this host's 2 cores".to_owned()]));
    assert_eq!(cgroups.keepable(Limits { cpu_max: Some(1.5), ..Limits::default() }).0.cpu_max, Some(1.5));
}

#[test]
fn leftovers_of_a_killed_daemon_are_removed_and_live_runs_kept() {
    let dir = tempfile::tempdir().expect("a folder");
    let runs = dir.path().join("runs");
    fs::create_dir_all(runs.join("left-behind")).expect("made");
    fs::create_dir_all(runs.join("live")).expect("made");
    fs::create_dir_all(runs.join("just-made")).expect("made");
    fs::write(runs.join("live/cgroup.procs"), "4242\n").expect("a process");
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    for dir in ["left-behind", "live"] {
        fs::File::open(runs.join(dir)).and_then(|f| f.set_modified(long_ago)).expect("aged");
    }
    Cgroups::prepare(Some(Hierarchy::V1 { memory: Some(dir.path().to_path_buf()), cpu: None, cpuacct: None }));
    assert!(!runs.join("left-behind").exists());
    assert!(runs.join("live").exists());
    assert!(runs.join("just-made").exists(), "a sibling's new cgroup, which its worker is about to join");
}
