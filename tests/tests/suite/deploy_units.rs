//! The systemd units of `deploy/`: they pass `systemd-analyze verify` (with any warning counted as a failure,
//! since verify exits 0 on an unknown key), carry the properties docs/operations.md relies on, and give the
//! daemon more time to stop than `deploy/production.toml` gives its drain.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use scrinalia_shared::Settings;
use scrinalia_tests::bin_path;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(deploy(file)).unwrap_or_else(|e| panic!("read deploy/{file}: {e}"))
}

/// A unit file as `section → [(key, value)]`, in order, comments and blank lines dropped.
struct Unit(BTreeMap<String, Vec<(String, String)>>);

impl Unit {
    fn load(file: &str) -> Self {
        let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let mut current = String::new();
        for line in read(file).lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = name.to_owned();
                continue;
            }
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("deploy/{file}: not key=value: {line}"));
            sections.entry(current.clone()).or_default().push((key.trim().to_owned(), value.trim().to_owned()));
        }
        Self(sections)
    }

    /// Every value of `key` in `section`.
    fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.0.get(section).into_iter().flatten().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    /// The last value of `key` (systemd's rule for single-valued settings).
    fn get(&self, section: &str, key: &str) -> &str {
        self.all(section, key).last().copied().unwrap_or_else(|| panic!("[{section}] {key}= is missing"))
    }

    /// The words of every value of a list setting such as `After=`.
    fn words(&self, section: &str, key: &str) -> Vec<&str> {
        self.all(section, key).into_iter().flat_map(str::split_whitespace).collect()
    }
}

/// A systemd time span in seconds: `90`, `90s`, `1min 30s`, `2min`.
fn seconds(span: &str) -> u64 {
    let mut total = 0;
    for part in span.split_whitespace() {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        let n: u64 = digits.parse().unwrap_or_else(|_| panic!("not a time span: {span}"));
        total += match &part[digits.len()..] {
            "" | "s" | "sec" => n,
            "m" | "min" => n * 60,
            "h" => n * 3600,
            other => panic!("unit {other:?} of {span:?} not understood by this test"),
        };
    }
    total
}

fn systemd_analyze() -> Command {
    let found = Command::new("systemd-analyze").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        found,
        "systemd-analyze is needed to verify deploy/*.service and was not found{}. Install it with \
         `apt-get install -y systemd` (Debian/Ubuntu); this test never skips.",
        if std::env::var_os("CI").is_some() { " on this CI machine" } else { "" }
    );
    Command::new("systemd-analyze")
}

/// Copies the units into `dir` with ExecStart pointing at the freshly built binaries (verify needs them to exist)
/// and runs `systemd-analyze verify` on the daemon and on instance 8080 of the API template.
fn verify_copies(dir: &Path, edit: impl Fn(String) -> String) -> (bool, String) {
    for (file, bin) in [("scrinalia-daemon.service", "scrinalia-daemon"), ("scrinalia-api@.service", "scrinalia-api")] {
        let text = read(file).replace(&format!("/usr/local/bin/{bin} "), &format!("{} ", bin_path(bin).display()));
        std::fs::write(dir.join(file), edit(text)).expect("write a unit copy");
    }
    let output = systemd_analyze()
        .args(["verify", "--man=no"])
        .arg(dir.join("scrinalia-daemon.service"))
        .arg(dir.join("scrinalia-api@8080.service"))
        .current_dir(dir)
        .output()
        .expect("run systemd-analyze verify");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

#[test]
fn the_units_pass_systemd_analyze_verify_without_a_single_warning() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let (ok, said) = verify_copies(dir.path(), |text| text);
    assert!(ok && said.trim().is_empty(), "systemd-analyze verify found problems in deploy/*.service:\n{said}");
}

#[test]
fn verify_does_catch_a_misspelt_key_so_the_test_above_means_something() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let (_, said) = verify_copies(dir.path(), |text| text.replace("KillMode=mixed", "KilMode=mixed"));
    assert!(said.contains("KilMode"), "a misspelt key went unnoticed: {said:?}");
}

#[test]
fn the_daemon_unit_has_the_properties_operations_rely_on() {
    let unit = Unit::load("scrinalia-daemon.service");
    let expected = [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("Restart", "on-failure"),
        ("KillMode", "mixed"),
        ("KillSignal", "SIGTERM"),
        ("User", "scrinalia"),
        ("Group", "scrinalia"),
        ("ExecStart", "/usr/local/bin/scrinalia-daemon --config /etc/scrinalia/scrinalia.toml"),
    ];
    for (key, value) in expected {
        assert_eq!(unit.get("Service", key), value, "[Service] {key}=");
    }
    assert_eq!(seconds(unit.get("Service", "WatchdogSec")), 30);
    assert_hardened(&unit);
    assert_network_and_database_wanted(&unit);
    // Its cgroup is the daemon's to divide into its runs' (issue 26): delegated, and writable.
    assert_eq!(unit.get("Service", "Delegate"), "yes");
    assert!(unit.all("Service", "ProtectControlGroups").is_empty(), "it would make the runs' limits unwritable");
}

/// A fork bomb in a worker stops at the unit's task limit; memory is bounded per run (each run's own limits), so
/// a unit-wide `MemoryMax=` would only let one run starve the others and the daemon.
#[test]
fn the_daemon_unit_bounds_its_tasks_but_not_its_memory() {
    let unit = Unit::load("scrinalia-daemon.service");
    let tasks: u64 = unit.get("Service", "TasksMax").parse().expect("TasksMax= is a number");
    assert!((4096..=65536).contains(&tasks), "TasksMax={tasks}: generous for threaded runtimes, yet a bound");
    for key in ["MemoryMax", "MemoryHigh", "MemoryLimit"] {
        assert!(unit.all("Service", key).is_empty(), "no unit-wide {key}=: the limits are per run");
    }
}

/// systemd reads `EnvironmentFile=` as root before dropping privileges, so the secrets' file is root's alone:
/// documented `root:root` 0600 in the file itself and in the install steps, never group-readable.
#[test]
fn the_environment_file_is_installed_root_only() {
    for file in ["scrinalia-daemon.service", "scrinalia-api@.service"] {
        let unit = Unit::load(file);
        assert_eq!(unit.get("Service", "EnvironmentFile"), "-/etc/scrinalia/scrinalia.env", "{file}");
        assert_eq!(unit.get("Service", "User"), "scrinalia", "{file}: systemd reads the file before it drops to User=");
    }
    let env = read("scrinalia.env");
    assert!(env.contains("`root:root`, mode 0600"), "deploy/scrinalia.env says how it is installed");
    assert!(!env.contains("0640"), "deploy/scrinalia.env must not suggest a group-readable mode");
    let operations = std::fs::read_to_string(deploy("../docs/operations.md")).expect("docs/operations.md");
    let steps: Vec<&str> = operations.lines().filter(|l| l.contains("/etc/scrinalia/scrinalia.env")).collect();
    let install = steps.iter().find(|l| l.contains("install ")).expect("an install step for the env file");
    assert!(install.contains("-m 0600 -o root -g root"), "docs/operations.md installs it root-only: {install}");
}

#[test]
fn the_api_template_takes_its_port_from_the_instance_name() {
    let unit = Unit::load("scrinalia-api@.service");
    assert_eq!(unit.get("Service", "ExecStart"), "/usr/local/bin/scrinalia-api --config /etc/scrinalia/scrinalia.toml");
    assert!(unit.all("Service", "Environment").contains(&"SCRINALIA__API__LISTEN=127.0.0.1:%i"));
    assert_eq!(unit.get("Service", "User"), "scrinalia");
    assert_eq!(unit.get("Service", "Restart"), "on-failure");
    assert_hardened(&unit);
    assert_network_and_database_wanted(&unit);
}

fn assert_hardened(unit: &Unit) {
    for (key, value) in [
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", "/var/lib/scrinalia"),
        ("StateDirectory", "scrinalia"),
        ("LogsDirectory", "scrinalia"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("EnvironmentFile", "-/etc/scrinalia/scrinalia.env"),
    ] {
        assert_eq!(unit.get("Service", key), value, "[Service] {key}=");
    }
}

fn assert_network_and_database_wanted(unit: &Unit) {
    for key in ["After", "Wants"] {
        let words = unit.words("Unit", key);
        for target in ["network-online.target", "postgresql.service"] {
            assert!(words.contains(&target), "[Unit] {key}= lacks {target}");
        }
    }
    // The database may be remote, and a local PostgreSQL restart must not take the service down with it.
    assert!(unit.all("Unit", "Requires").is_empty() && unit.all("Unit", "BindsTo").is_empty());
}

#[test]
fn the_daemon_gets_longer_to_stop_than_production_gives_its_drain() {
    let settings = Settings::load_from(Some(&deploy("production.toml")), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let unit = Unit::load("scrinalia-daemon.service");
    let stop = seconds(unit.get("Service", "TimeoutStopSec"));
    let drain = settings.daemon.drain_seconds;
    let grace = settings.daemon.cancel_grace_seconds;
    assert!(stop > drain, "TimeoutStopSec={stop} must exceed daemon.drain_seconds={drain}");
    assert!(stop > drain + grace, "TimeoutStopSec={stop} must leave time for the SIGTERM grace of leftover workers");
}

#[test]
fn production_config_loads_with_the_environment_file_and_is_postgres_with_hashed_tokens() {
    let env: Vec<(String, String)> = read("scrinalia.env")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("deploy/scrinalia.env: not KEY=value: {l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    assert!(
        env.iter().all(|(k, _)| k != "SCRINALIA__API__LISTEN"),
        "scrinalia.env must not set the listen address: it would override every API instance's port"
    );
    let settings = Settings::load_from(Some(&deploy("production.toml")), env).unwrap_or_else(|e| panic!("{e}"));
    assert!(settings.database.url.starts_with("postgres://"), "production runs on PostgreSQL");
    assert!(!settings.auth.tokens.is_empty() && settings.auth.anonymous_role.is_none());
    assert!(!settings.api.cors_origins.is_empty(), "the production example shows CORS origins");
}

#[test]
fn the_time_span_reader_understands_systemd_spans() {
    assert_eq!(seconds("90"), 90);
    assert_eq!(seconds("1min 30s"), 90);
    assert_eq!(seconds("2min"), 120);
}

/// `systemd-analyze security --offline=true`'s overall exposure of a unit (0 safest, 10 most exposed).
fn exposure(unit: &Path) -> f64 {
    let output = systemd_analyze()
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit)
        .output()
        .expect("run systemd-analyze security");
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    said.lines()
        .find_map(|l| l.split("Overall exposure level for ").nth(1))
        .and_then(|rest| rest.split(": ").nth(1))
        .and_then(|figure| figure.split_whitespace().next())
        .and_then(|figure| figure.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{said}{}", String::from_utf8_lossy(&output.stderr)))
}

/// The shipped hardening keeps its figures: at most 2.0 for the API, and 3.5 for the daemon, whose workers
/// inherit its sandbox and keep what they need (the network, their data folders, devices, JIT memory).
#[test]
fn the_units_exposure_stays_within_its_bounds() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let _ = verify_copies(dir.path(), |text| text);
    let api = exposure(&dir.path().join("scrinalia-api@.service"));
    let daemon = exposure(&dir.path().join("scrinalia-daemon.service"));
    eprintln!(
        "systemd-analyze security --offline=true: scrinalia-api@.service {api}, scrinalia-daemon.service {daemon}"
    );
    assert!(api <= 2.0, "scrinalia-api@.service is exposed {api} (at most 2.0)");
    assert!(daemon <= 3.5, "scrinalia-daemon.service is exposed {daemon} (at most 3.5)");
    // What the daemon must not take from its workers.
    let unit = Unit::load("scrinalia-daemon.service");
    for key in ["PrivateDevices", "MemoryDenyWriteExecute", "PrivateNetwork", "PrivateUsers", "IPAddressDeny"] {
        assert!(unit.all("Service", key).is_empty(), "the daemon's workers need what {key}= takes");
    }
}
