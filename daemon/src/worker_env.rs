//! The environment every worker starts from, fixed when the daemon starts: the few variables of the daemon's own
//! environment that the allow-list lets through (see [`scrinalia_shared::config::worker_env`]) and
//! `daemon.worker_env`. Each invocation then adds the worker's catalogue `env` and the protocol's variables.

use std::{collections::BTreeMap, ffi::OsString};

use scrinalia_shared::config::{DaemonSettings, worker_env};

/// What every worker's environment starts from.
#[derive(Debug, Clone, Default)]
pub struct WorkerEnv {
    /// The daemon's variables a worker inherits, in the daemon's order.
    pub inherited: Vec<(OsString, OsString)>,
    /// `daemon.worker_env`.
    pub set: BTreeMap<String, String>,
}

impl WorkerEnv {
    /// From the daemon's environment `daemon_env` (`std::env::vars_os()` in the daemon) and its settings.
    pub fn new(daemon_env: impl IntoIterator<Item = (OsString, OsString)>, settings: &DaemonSettings) -> Self {
        Self { inherited: inherited(daemon_env, &settings.worker_env_pass), set: settings.worker_env.clone() }
    }

    /// Logs which variables workers inherit (names only), and warns about those that look like secrets, so that
    /// passing one is a decision someone can see.
    pub fn log(&self) {
        let names: Vec<String> = self.inherited.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        tracing::info!(inherited = ?names, "what workers inherit of the daemon's environment");
        let secret: Vec<&String> = names.iter().filter(|n| worker_env::looks_secret(n)).collect();
        if !secret.is_empty() {
            tracing::warn!(
                variables = ?secret,
                "daemon.worker_env_pass gives every worker variables that look like secrets"
            );
        }
    }
}

/// The variables of `daemon_env` a worker inherits under `daemon.worker_env_pass = pass`; a name that is not
/// valid Unicode cannot match the allow-list and is left out.
pub fn inherited(
    daemon_env: impl IntoIterator<Item = (OsString, OsString)>,
    pass: &[String],
) -> Vec<(OsString, OsString)> {
    daemon_env.into_iter().filter(|(name, _)| name.to_str().is_some_and(|n| worker_env::inherits(n, pass))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    #[test]
    fn a_worker_inherits_the_allow_list_only() {
        let daemon = env(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/var/lib/scrinalia"),
            ("LANG", "C.UTF-8"),
            ("TZ", "UTC"),
            ("DATABASE_URL", "postgres://u:secret@db/x"),
            ("SCRINALIA__DATABASE__URL", "postgres://u:secret@db/x"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer x"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("INVOCATION_ID", "abc"),
        ]);
        let names = |pass: &[&str]| -> Vec<String> {
            let pass: Vec<String> = pass.iter().map(|s| (*s).to_owned()).collect();
            inherited(daemon.clone(), &pass).into_iter().map(|(k, _)| k.into_string().expect("utf-8")).collect()
        };
        assert_eq!(names(&[]), ["PATH", "HOME", "LANG", "TZ"]);
        assert_eq!(
            names(&["CUDA_*", "OTEL_EXPORTER_OTLP_ENDPOINT", "NOTIFY_SOCKET"]),
            ["PATH", "HOME", "LANG", "TZ", "OTEL_EXPORTER_OTLP_ENDPOINT", "CUDA_VISIBLE_DEVICES"]
        );
    }
}
