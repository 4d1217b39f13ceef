//! What a worker can reach of the daemon, on both backends. The tests run as root, and root reads any
//! process's environment, so the daemon runs here as an unprivileged user of its own (`scrinalia-test`, created
//! when missing), started with `setpriv`. A worker it runs (a script that reports what it sees as its result)
//! cannot read `/proc/<pid>/environ` of the daemon or of its supervisor (both are not dumpable), its
//! environment holds none of the daemon's configuration variables and secrets, only the allow-list and what
//! `daemon.worker_env_pass` names, and its options arrive as `--name=value`, a value starting with `-` intact.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use scrinalia_shared::{ExplicitArgs, OptionType, RunState, runs::RunRequest};
use scrinalia_testkit::config::{option, worker};
use scrinalia_tests::{Process, TestDb, backend_tests, bin_path, daemon_harness::wait_finished};
use serde_json::{Value, json};

backend_tests!(a_worker_reaches_none_of_the_daemons_secrets);

/// The unprivileged user the daemon runs as.
const USER: &str = "scrinalia-test";

/// The worker: answers the chores, and as a run reports its user, arguments, environment and what reading the
/// supervisor's and the daemon's `/proc/<pid>/environ` gave (never their content).
const SNOOP: &str = r#"
import json, os, sys

verb = sys.argv[1] if len(sys.argv) > 1 else ""
if verb == "describe":
    print(json.dumps({"engine": None, "preset": None, "model": None, "endpoint": None}))
elif verb == "count-pending":
    print(json.dumps({"pending": 0}))
elif verb == "check":
    print(json.dumps({"ready": True}))
elif verb == "run":
    def attempt(pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return {"pid": pid, "read_bytes": len(f.read())}
        except OSError as e:
            return {"pid": pid, "errno": e.errno, "error": e.strerror}
    supervisor = os.getppid()
    with open(f"/proc/{supervisor}/stat") as f:
        daemon = int(f.read().rsplit(")", 1)[1].split()[1])
    report = {
        "uid": os.getuid(),
        "argv": sys.argv[1:],
        "env": {k: v for k, v in os.environ.items()},
        "supervisor": attempt(supervisor),
        "daemon": attempt(daemon),
    }
    print(json.dumps({"result": report}))
else:
    sys.exit(2)
"#;

/// What the daemon's environment holds that no worker may see (besides `SCRINALIA__DATABASE__URL`, the real one).
const SECRETS: [(&str, &str); 6] = [
    ("DATABASE_URL", "postgres://leak:leaked-password@db.example/x"),
    ("AWS_ACCESS_KEY_ID", "AKIALEAKED"),
    ("AWS_SECRET_ACCESS_KEY", "leaked-secret-key"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer leaked"),
    ("SCRINALIA__TELEMETRY__LOG_FILTER", "info"),
    // Not a protocol variable: those the daemon sets for each worker, it never passes its own on.
    ("SCRINALIA_NOT_PROTOCOL", "leaked"),
];

/// What the daemon's environment holds that `daemon.worker_env_pass` lets through (a prefix and a name).
const PASSED: [(&str, &str); 2] = [("CUDA_VISIBLE_DEVICES", "3"), ("VIRTUAL_ENV", "/opt/test-venv")];

async fn a_worker_reaches_none_of_the_daemons_secrets(db: &TestDb) {
    let (uid, gid) = unprivileged_user();
    let dir = db.dir.path();
    let script = dir.join("snoop.py");
    std::fs::write(&script, SNOOP).expect("write the worker");
    let (python, script) = (python(), script.display().to_string());
    let mut snoop = worker("snoop", &[python.as_str(), script.as_str()]);
    snoop.options = vec![option("threshold", OptionType::Integer, None), option("label", OptionType::String, None)];
    snoop.env = [("FROM_CATALOGUE".to_owned(), "catalogue".to_owned())].into();
    snoop.timeout_seconds = 60;
    let config = db
        .config()
        .test_daemon(|d| {
            d.worker_env = [("FROM_WORKER_ENV".to_owned(), "worker_env".to_owned())].into();
            d.worker_env_pass = vec!["CUDA_*".to_owned(), "VIRTUAL_ENV".to_owned()];
        })
        .worker(snoop);
    let path = dir.join("config.toml");
    let settings = config.load(&path).unwrap_or_else(|e| panic!("{e:#}"));
    let daemon_bin = runnable_by(uid, gid, &bin_path("scrinalia-daemon"), dir);
    // The daemon writes its run logs (and, on SQLite, the database) in the scratch folder: it is theirs now.
    chown(dir, uid, gid);

    let mut env: Vec<(&str, &str)> = SECRETS.into_iter().chain(PASSED).collect();
    env.push(("SCRINALIA__DATABASE__URL", db.url.as_str()));
    let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={gid}"));
    let (program, config_path) = (daemon_bin.display().to_string(), path.display().to_string());
    let args = [reuid.as_str(), &regid, "--clear-groups", "--", &program, "--config", &config_path];
    let mut daemon =
        Process::start(Path::new("setpriv"), "daemon", dir, &args, &env).unwrap_or_else(|e| panic!("{e:#}"));
    daemon.wait_for("daemon started", Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{e:#}"));

    let options = [("threshold".to_owned(), json!(-1)), ("label".to_owned(), json!("-x --y"))].into();
    let request = RunRequest {
        worker: "snoop".to_owned(),
        requested_by: "test".to_owned(),
        arguments: ExplicitArgs { options, ..ExplicitArgs::default() },
        trace_context: None,
        tags: Vec::new(),
    };
    let run = db.db.api.request_run(&settings.catalogue, request).await.expect("request a run");
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(60)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    let seen = done.result.expect("the worker's report");

    // The premise: the daemon does hold the secrets (root, unlike its worker, reads its environment).
    let held = std::fs::read(format!("/proc/{}/environ", daemon.pid())).expect("root reads the daemon's environment");
    assert!(String::from_utf8_lossy(&held).contains("leaked-password"), "the daemon was given the secrets");
    assert_eq!(seen["uid"], uid, "the worker runs as the daemon's unprivileged user: {seen:#}");
    assert_eq!(seen["daemon"]["pid"], daemon.pid().as_raw(), "the worker found the daemon: {seen:#}");
    for process in ["daemon", "supervisor"] {
        assert_eq!(
            seen[process]["errno"],
            libc_eacces(),
            "the worker must not read the {process}'s environment (permission denied): {seen:#}"
        );
    }

    let env = seen["env"].as_object().expect("the worker's environment");
    for name in env.keys() {
        assert!(!name.starts_with("SCRINALIA__"), "the daemon's configuration reached the worker: {name}");
        assert!(!name.starts_with("OTEL_"), "{name} reached the worker");
        assert!(!name.starts_with("AWS_"), "{name} reached the worker");
    }
    for (name, _) in SECRETS {
        assert!(!env.contains_key(name), "{name} reached the worker: {env:?}");
    }
    let leaked: Vec<&String> = env.iter().filter(|(_, v)| v.to_string().contains("leaked")).map(|(k, _)| k).collect();
    assert!(leaked.is_empty(), "a secret's value reached the worker in {leaked:?}");
    for (name, value) in PASSED {
        assert_eq!(env.get(name), Some(&json!(value)), "{name} is in daemon.worker_env_pass");
    }
    assert_eq!(env.get("FROM_WORKER_ENV"), Some(&json!("worker_env")));
    assert_eq!(env.get("FROM_CATALOGUE"), Some(&json!("catalogue")));
    assert_eq!(env.get("SCRINALIA_RUN_ID"), Some(&json!(run.id.to_string())), "protocol variables always reach it");
    // Nothing else: the allow-list, what was configured, the protocol's own (and Python's locale coercion).
    let allowed = ["PATH", "HOME", "LANG", "TZ", "TRACEPARENT", "FROM_WORKER_ENV", "FROM_CATALOGUE", "LC_CTYPE"];
    let unexpected: Vec<&String> = env
        .keys()
        .filter(|k| {
            let k = k.as_str();
            !(allowed.contains(&k) || k.starts_with("SCRINALIA_") || PASSED.iter().any(|(p, _)| *p == k))
        })
        .collect();
    assert!(unexpected.is_empty(), "the worker inherited {unexpected:?}");

    let argv: Vec<&str> = seen["argv"].as_array().expect("argv").iter().filter_map(Value::as_str).collect();
    let run_id = format!("--run-id={}", run.id);
    assert_eq!(argv, ["run", run_id.as_str(), "--label=-x --y", "--threshold=-1"], "one argument per flag");
    daemon.stop(Duration::from_secs(20)).await;
}

/// EACCES, the errno of a permission denied.
fn libc_eacces() -> i32 {
    nix::errno::Errno::EACCES as i32
}

/// The uid and gid of [`USER`], created (a system user without a home or a shell) when missing.
fn unprivileged_user() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, USER]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok().filter(|_| out.status.success())
    };
    if id("-u").is_none() {
        // Both backends' tests may get here at once: the loser's failure is fine as long as the user exists.
        let made = Command::new("useradd")
            .args(["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", USER])
            .output();
        assert!(
            id("-u").is_some(),
            "this test runs the daemon as the unprivileged user {USER}, and could not create it with useradd \
             (it must run as root; Debian's `passwd` package has useradd): {made:?}"
        );
    }
    let (uid, gid) = (id("-u").expect("the user's uid"), id("-g").expect("the user's gid"));
    assert!(uid != 0 && gid != 0, "{USER} must not be root");
    (uid, gid)
}

/// `bin` if the user can run it where it is (target/ may sit in a folder others cannot enter), else a copy of it
/// in `dir`.
fn runnable_by(uid: u32, gid: u32, bin: &Path, dir: &Path) -> PathBuf {
    let found = Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        found,
        "setpriv is needed to run the daemon as another user; it is in util-linux (scripts/test installs it)"
    );
    let runs = Command::new("setpriv")
        .args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".to_owned(), "--".to_owned()])
        .arg(bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        return bin.to_path_buf();
    }
    let copy = dir.join("scrinalia-daemon");
    std::fs::copy(bin, &copy).expect("copy the daemon where its user can run it");
    copy
}

/// `chown -R uid:gid path`, and the folder searchable by its new owner.
fn chown(path: &Path, uid: u32, gid: u32) {
    let status = Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(path).status().expect("run chown");
    assert!(status.success(), "chown -R {}", path.display());
}

/// A Python interpreter every user can run (`python3` on root's PATH may be a shim under /root).
fn python() -> String {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or_else(|| panic!("this test's worker needs /usr/bin/python3 (Debian's python3 package)"))
        .to_owned()
}
