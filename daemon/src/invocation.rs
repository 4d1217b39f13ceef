//! How a worker is invoked, exactly as `docs/worker-protocol.md` says: the catalogue's command, a verb, the
//! resolved configuration as `--name=value` flags and as environment, never through a shell; the environment
//! built from nothing (see [`WorkerEnv`]), never a copy of the daemon's.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
};

use scrinalia_shared::{FollowKind, ResolvedConfig, Run, WorkerSpec};
use serde_json::Value;
use uuid::Uuid;

use crate::worker_env::WorkerEnv;

/// A program, its arguments and its whole environment.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The executable (resolved beside the daemon when the catalogue names a bare program found there).
    pub program: PathBuf,
    /// Fixed arguments, the verb and the configuration flags.
    pub args: Vec<String>,
    /// The daemon's variables the allow-list lets through.
    pub inherited: Vec<(OsString, OsString)>,
    /// Variables to set over them, in order (later ones win): `daemon.worker_env`, the worker's `env`, then the
    /// protocol's own, so that nothing configured can hide a protocol variable.
    pub env: Vec<(String, String)>,
}

impl Invocation {
    /// `<command> run --run-id=<id> <flags>` with the run's environment, including `TRACEPARENT`.
    pub fn run(
        spec: &WorkerSpec,
        exe_dir: &Path,
        worker_env: &WorkerEnv,
        run: Uuid,
        config: &ResolvedConfig,
        traceparent: &str,
    ) -> Self {
        let mut invocation = Self::base(spec, exe_dir, worker_env, &["run", &format!("--run-id={run}")], config);
        invocation.env.push(("SCRINALIA_RUN_ID".to_owned(), run.to_string()));
        invocation.env.push(("TRACEPARENT".to_owned(), traceparent.to_owned()));
        invocation
    }

    /// Tells the worker of `run` what it continues: a resume gets its predecessor's last checkpoint in
    /// `SCRINALIA_CHECKPOINT` (the JSON text), a restart the predecessor's id in `SCRINALIA_RESTART_OF`.
    pub fn continuing(mut self, run: &Run) -> Self {
        match (run.follows_as, run.follows, &run.checkpoint) {
            (Some(FollowKind::Resume), _, Some(checkpoint)) => {
                self.env.push(("SCRINALIA_CHECKPOINT".to_owned(), checkpoint.to_string()));
            }
            (Some(FollowKind::Restart), Some(earlier), _) => {
                self.env.push(("SCRINALIA_RESTART_OF".to_owned(), earlier.to_string()));
            }
            _ => {}
        }
        self
    }

    /// Tells the worker which slot of each daemon-scoped resource its run holds on this daemon (`slots`:
    /// (resource, slot)): `SCRINALIA_RESOURCE_<NAME>=<slot>`, the name uppercased and `-` made `_`
    /// (`SCRINALIA_RESOURCE_GPU=0`). Two runs on one daemon never hold the same slot.
    pub fn holding(mut self, slots: &[(String, u32)]) -> Self {
        self.env.extend(slots.iter().map(|(resource, slot)| (resource_env(resource), slot.to_string())));
        self
    }

    /// Tells the worker of a shard of a sharded run which one it is: `SCRINALIA_SHARD=i/N` (0-based).
    pub fn in_shard(mut self, run: &Run) -> Self {
        if let (Some(shard), Some(shards), Some(_)) = (run.shard, run.shards, run.parent_id) {
            self.env.push(("SCRINALIA_SHARD".to_owned(), format!("{shard}/{shards}")));
        }
        self
    }

    /// `<command> <verb> <flags>` for a chore (`count-pending`, `check`); `describe` gets no flags at all, so the
    /// worker answers with its code's own defaults.
    pub fn chore(
        spec: &WorkerSpec,
        exe_dir: &Path,
        worker_env: &WorkerEnv,
        verb: &str,
        config: Option<&ResolvedConfig>,
    ) -> Self {
        match config {
            Some(config) => Self::base(spec, exe_dir, worker_env, &[verb], config),
            None => {
                let mut invocation = Self::base(spec, exe_dir, worker_env, &[verb], &ResolvedConfig::empty());
                invocation.env.retain(|(k, _)| k != "SCRINALIA_OPTIONS");
                invocation
            }
        }
    }

    fn base(spec: &WorkerSpec, exe_dir: &Path, worker_env: &WorkerEnv, verb: &[&str], config: &ResolvedConfig) -> Self {
        let (program, fixed) = spec.command.split_first().map_or(("", &[][..]), |(p, rest)| (p.as_str(), rest));
        let mut args: Vec<String> = fixed.to_vec();
        args.extend(verb.iter().map(|s| (*s).to_owned()));
        args.extend(config_flags(config));
        let mut env: Vec<(String, String)> =
            worker_env.set.iter().chain(&spec.env).map(|(k, v)| (k.clone(), v.clone())).collect();
        env.extend(config_env(&spec.name, config));
        Self { program: locate(program, exe_dir), args, inherited: worker_env.inherited.clone(), env }
    }

    /// Gives a command this environment and nothing of the daemon's beyond it.
    pub fn apply_env(&self, cmd: &mut tokio::process::Command) {
        cmd.env_clear();
        cmd.envs(self.inherited.iter().map(|(k, v)| (k, v)));
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
    }
}

/// A bare program name is looked up beside the daemon's executable first, then in `PATH` (by the OS).
/// The variable that gives a worker its slot of the daemon-scoped `resource`: `SCRINALIA_RESOURCE_` and the name,
/// uppercased, each `-` made `_`.
pub fn resource_env(resource: &str) -> String {
    format!("SCRINALIA_RESOURCE_{}", resource.to_ascii_uppercase().replace('-', "_"))
}

fn locate(program: &str, exe_dir: &Path) -> PathBuf {
    if !program.contains('/') {
        let beside = exe_dir.join(program);
        if beside.is_file() {
            return beside;
        }
    }
    PathBuf::from(program)
}

/// `--engine=E --preset=P --model=M --endpoint=URL --<option>=<value>...`, for the values that are resolved. One
/// argument per flag, so that a value starting with `-` (`--threshold=-1`) cannot be taken for a flag by an
/// argparse or clap worker. A worker whose engine comes from elsewhere gets no engine flags: it reads its engine
/// where it lives.
pub fn config_flags(config: &ResolvedConfig) -> Vec<String> {
    let engine = engine_values(config).into_iter().map(|(name, value)| format!("--{name}={value}"));
    let options = config.options.iter().map(|(name, resolved)| format!("--{name}={}", render(&resolved.value)));
    engine.chain(options).collect()
}

/// The engine, preset, model and endpoint passed to the worker, by flag name: none when they come from elsewhere.
fn engine_values(config: &ResolvedConfig) -> Vec<(&'static str, String)> {
    if !config.engine_configurable {
        return Vec::new();
    }
    let named = [
        ("engine", config.engine.as_ref().map(|r| r.value.clone())),
        ("preset", config.preset.as_ref().map(|r| r.value.clone())),
        ("model", config.model.clone()),
        ("endpoint", config.endpoint.clone()),
    ];
    named.into_iter().filter_map(|(name, value)| Some((name, value?))).collect()
}

fn config_env(worker: &str, config: &ResolvedConfig) -> Vec<(String, String)> {
    let mut env = vec![("SCRINALIA_WORKER".to_owned(), worker.to_owned())];
    env.extend(
        engine_values(config).into_iter().map(|(name, value)| (format!("SCRINALIA_{}", name.to_uppercase()), value)),
    );
    let options: serde_json::Map<String, Value> =
        config.options.iter().map(|(k, r)| (k.clone(), r.value.clone())).collect();
    env.push(("SCRINALIA_OPTIONS".to_owned(), Value::Object(options).to_string()));
    env
}

/// Strings as they are, numbers in decimal, booleans as `true` / `false`.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The run's W3C trace context when it is a valid `traceparent`; otherwise a fresh one, so the worker's spans
/// always have a trace to join.
pub fn traceparent(stored: Option<&str>) -> String {
    match stored.map(str::trim) {
        Some(tp) if is_traceparent(tp) => tp.to_owned(),
        _ => {
            let trace = Uuid::new_v4().simple().to_string();
            let span = &Uuid::new_v4().simple().to_string()[..16];
            format!("00-{trace}-{span}-01")
        }
    }
}

fn is_traceparent(tp: &str) -> bool {
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [v, t, p, f]
        if hex(v, 2) && *v != "ff" && hex(t, 32) && nonzero(t) && hex(p, 16) && nonzero(p) && hex(f, 2))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use scrinalia_shared::{Resolved, Source};

    use super::*;

    #[test]
    fn flags_render_values_as_text() {
        let mut options = BTreeMap::new();
        options.insert("batch".to_owned(), Resolved { value: Value::from(20), source: Source::Default });
        options.insert("dry_run".to_owned(), Resolved { value: Value::from(true), source: Source::Explicit });
        options.insert("label".to_owned(), Resolved { value: Value::from("a b"), source: Source::Override });
        options.insert("threshold".to_owned(), Resolved { value: Value::from(-1), source: Source::Explicit });
        let config = ResolvedConfig {
            engine: Some(Resolved { value: "ollama".into(), source: Source::Default }),
            preset: None,
            model: Some("m:7b".into()),
            endpoint: None,
            engine_configurable: true,
            engine_source: None,
            options,
            timeout_seconds: 60,
            ..ResolvedConfig::empty()
        };
        assert_eq!(
            config_flags(&config),
            ["--engine=ollama", "--model=m:7b", "--batch=20", "--dry_run=true", "--label=a b", "--threshold=-1"]
        );
        let elsewhere = ResolvedConfig { engine_configurable: false, ..config };
        assert_eq!(
            config_flags(&elsewhere),
            ["--batch=20", "--dry_run=true", "--label=a b", "--threshold=-1"],
            "no engine flags"
        );
        assert!(!config_env("w", &elsewhere).iter().any(|(k, _)| k == "SCRINALIA_ENGINE" || k == "SCRINALIA_MODEL"));
    }

    #[test]
    fn the_environment_is_the_allow_list_then_the_configured_then_the_protocols() {
        let daemon: Vec<(OsString, OsString)> =
            [("PATH", "/usr/bin"), ("DATABASE_URL", "postgres://u:pw@db/x"), ("VIRTUAL_ENV", "/opt/venv")]
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
        let settings = scrinalia_shared::config::DaemonSettings {
            worker_env: [("SCRINALIA_PROBE_LOG".to_owned(), "/tmp/p".to_owned())].into(),
            worker_env_pass: vec!["VIRTUAL_ENV".to_owned()],
            ..Default::default()
        };
        let base = WorkerEnv::new(daemon, &settings);
        let mut spec: WorkerSpec =
            serde_json::from_value(serde_json::json!({"name": "w", "command": ["/bin/w"]})).expect("a worker");
        spec.env.insert("SCRINALIA_RUN_ID".to_owned(), "not the run".to_owned());
        let run = Uuid::new_v4();
        let invocation = Invocation::run(&spec, Path::new("/nowhere"), &base, run, &ResolvedConfig::empty(), "tp");
        assert_eq!(invocation.args, ["run".to_owned(), format!("--run-id={run}")]);
        let inherited: Vec<&OsString> = invocation.inherited.iter().map(|(k, _)| k).collect();
        assert_eq!(inherited, ["PATH", "VIRTUAL_ENV"]);
        let last = |name: &str| invocation.env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        assert_eq!(last("SCRINALIA_PROBE_LOG"), Some("/tmp/p"));
        assert_eq!(last("SCRINALIA_RUN_ID"), Some(run.to_string().as_str()), "the protocol's variable wins");
        assert_eq!(last("SCRINALIA_WORKER"), Some("w"));
    }

    #[test]
    fn a_shard_is_told_which_one_it_is_and_a_plain_run_is_told_nothing() {
        let spec: WorkerSpec =
            serde_json::from_value(serde_json::json!({"name": "w", "command": ["/bin/w"]})).expect("a worker");
        let shard_of = |run: &Run| {
            let invocation =
                Invocation::run(&spec, Path::new("/nowhere"), &WorkerEnv::default(), run.id, &run.config, "tp")
                    .in_shard(run);
            invocation.env.iter().find(|(k, _)| k == "SCRINALIA_SHARD").map(|(_, v)| v.clone())
        };
        let mut run: Run = serde_json::from_value(serde_json::json!({
            "id": Uuid::now_v7(), "worker": "w", "state": "running", "requested_by": "ada",
            "requested_at": "2026-12-07T00:00:00Z", "arguments": {}, "config": ResolvedConfig::empty(), "attempt": 1
        }))
        .expect("a run");
        assert_eq!(shard_of(&run), None);
        run.shards = Some(4);
        assert_eq!(shard_of(&run), None, "a parent is never started");
        (run.parent_id, run.shard) = (Some(Uuid::now_v7()), Some(2));
        assert_eq!(shard_of(&run).as_deref(), Some("2/4"));
    }

    #[test]
    fn each_slot_of_a_daemon_scoped_resource_is_given_by_its_name() {
        let spec: WorkerSpec =
            serde_json::from_value(serde_json::json!({"name": "w", "command": ["/bin/w"]})).expect("a worker");
        let env = WorkerEnv::default();
        let invocation =
            Invocation::run(&spec, Path::new("/nowhere"), &env, Uuid::now_v7(), &ResolvedConfig::empty(), "tp")
                .holding(&[("gpu".to_owned(), 0), ("fpga-card".to_owned(), 3)]);
        let given: Vec<(&str, &str)> = invocation
            .env
            .iter()
            .filter(|(k, _)| k.starts_with("SCRINALIA_RESOURCE_"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(given, [("SCRINALIA_RESOURCE_GPU", "0"), ("SCRINALIA_RESOURCE_FPGA_CARD", "3")]);
    }

    #[test]
    fn traceparents_are_kept_or_made() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(traceparent(Some(tp)), tp);
        for bad in [None, Some("garbage"), Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01")] {
            assert!(is_traceparent(&traceparent(bad)));
            assert_ne!(traceparent(bad), tp);
        }
    }
}
