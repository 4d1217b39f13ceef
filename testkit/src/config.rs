//! Configuration files for the real binaries, built as the real settings types ([`SettingsFile`]) and
//! serialised to TOML, so that a test cannot write a key the binaries would not read, and a renamed setting is a
//! compile error here rather than a confusing failure at start-up.

use std::path::Path;

use anyhow::Context as _;
use scrinalia_shared::{
    OptionSpec, OptionType, Role, Settings, WorkerSpec,
    auth::hash_token,
    config::{DaemonSettings, ObjectStoreKind, SettingsFile, TokenSettings},
};
use serde_json::Value;

/// A configuration file being built.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// What it will hold.
    pub file: SettingsFile,
}

impl ConfigFile {
    /// A configuration on the database at `db_url`, with run logs in `<dir>/run-logs`, logs at `info`, no
    /// token, no engine and no worker; everything else at its default.
    pub fn new(db_url: &str, dir: &Path) -> Self {
        let mut file = SettingsFile::default();
        file.database.url = db_url.to_owned();
        file.object_store.kind = ObjectStoreKind::Local;
        file.object_store.path = dir.join("run-logs");
        file.telemetry.log_filter = "info".to_owned();
        Self { file }
    }

    /// Changes anything.
    pub fn with(mut self, edit: impl FnOnce(&mut SettingsFile)) -> Self {
        edit(&mut self.file);
        self
    }

    /// Replaces the daemon's settings with the tests' short lease and quick timers ([`test_daemon`]), then
    /// applies `edit`.
    pub fn test_daemon(mut self, edit: impl FnOnce(&mut DaemonSettings)) -> Self {
        self.file.daemon = test_daemon();
        edit(&mut self.file.daemon);
        self
    }

    /// Appends a worker to the catalogue.
    pub fn worker(mut self, spec: WorkerSpec) -> Self {
        self.file.workers.push(spec);
        self
    }

    /// Appends workers to the catalogue.
    pub fn workers(mut self, specs: impl IntoIterator<Item = WorkerSpec>) -> Self {
        self.file.workers.extend(specs);
        self
    }

    /// Accepts `token` as `name` with `role` (its hash is what is written).
    pub fn token(mut self, name: &str, role: Role, token: &str) -> Self {
        self.file.auth.tokens.push(TokenSettings { name: name.to_owned(), role, hash: hash_token(token) });
        self
    }

    /// The file's text.
    pub fn toml(&self) -> String {
        toml::to_string(&self.file).expect("the settings serialise to TOML")
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.toml()).with_context(|| format!("write {}", path.display()))
    }

    /// Writes the file to `path` and loads it as the binaries will.
    pub fn load(&self, path: &Path) -> anyhow::Result<Settings> {
        self.write(path)?;
        Settings::load_from(Some(path), Vec::new()).map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// The daemon settings of the tests: a short lease, so that fencing and recovery take seconds; heartbeats every
/// second; a daemon gone after six; queue counts out of the way (hourly).
pub fn test_daemon() -> DaemonSettings {
    DaemonSettings {
        capacity: 3,
        lease_seconds: 3,
        poll_seconds: 5,
        heartbeat_seconds: 1,
        gone_after_seconds: 6,
        cancel_grace_seconds: 1,
        drain_seconds: 5,
        queue_count_interval_seconds: 3600,
        queue_count_timeout_seconds: 10,
        ..DaemonSettings::default()
    }
}

/// A worker called `name` run by `command`, with no engine, no option and the default timeout.
pub fn worker(name: &str, command: &[&str]) -> WorkerSpec {
    WorkerSpec {
        name: name.to_owned(),
        title: None,
        axis: String::new(),
        governance: String::new(),
        stamp: String::new(),
        description: None,
        command: command.iter().map(|c| (*c).to_owned()).collect(),
        engine: None,
        preset: None,
        engine_source: None,
        engine_source_url: None,
        options: Vec::new(),
        timeout_seconds: 6 * 3600,
        env: Default::default(),
        retry: None,
        resources: Vec::new(),
        labels: Vec::new(),
        quarantine_after: None,
        memory_max: None,
        cpu_max: None,
        stall_seconds: None,
        priority: None,
        expires_after_seconds: None,
        preemptible: false,
        pause_after_failures: None,
        when_pending_at_least: None,
        quiet_seconds: None,
        max_delay_seconds: None,
        fresh_within_seconds: None,
    }
}

/// An option of `kind` with `default`.
pub fn option(name: &str, kind: OptionType, default: Option<Value>) -> OptionSpec {
    OptionSpec { name: name.to_owned(), kind, default, choices: None, minimum: None, maximum: None, description: None }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use scrinalia_shared::{Engine, auth::hash_token};

    use super::*;
    use crate::probes::probe;

    #[test]
    fn a_built_configuration_loads_as_the_binaries_load_it() {
        let dir = tempfile::tempdir().expect("a folder");
        let mut config = ConfigFile::new("sqlite://x.sqlite", dir.path())
            .test_daemon(|d| d.lease_seconds = 4)
            .worker(probe(&PathBuf::from("/bin/probe"), "probe-1", 120))
            .token("ada", Role::Admin, "scr_secret");
        let engine = Engine {
            kind: "ollama".into(),
            url: Some("http://m:1".into()),
            presets: [("fast".into(), "m:1b".into())].into(),
            description: None,
        };
        config.file.engines.insert("local".into(), engine);
        let settings = config.load(&dir.path().join("config.toml")).expect("loads");
        assert_eq!(settings.daemon.lease_seconds, 4);
        assert_eq!(settings.daemon.heartbeat_seconds, 1);
        assert_eq!(settings.catalogue.workers[0].command, ["/bin/probe", "probe-1"]);
        assert_eq!(settings.auth.tokens[0].hash, hash_token("scr_secret"));
        assert_eq!(settings.catalogue.engines["local"].presets["fast"], "m:1b");
    }
}
