//! Which of the daemon's own environment variables a worker inherits: an allow-list (`PATH`, `HOME`, `LANG`,
//! `TZ` and the names of `daemon.worker_env_pass`), so that a secret the daemon holds in its environment (the
//! database URL, object-store keys, OTLP headers) never reaches a worker by default.

/// What every worker inherits from the daemon, whatever `daemon.worker_env_pass` says.
pub const ALWAYS_PASSED: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// What no worker inherits, even when a `daemon.worker_env_pass` pattern matches: systemd's notification and
/// socket-activation hand-over (a worker could speak for the daemon) and where the daemon's configuration is.
/// The daemon's configuration variables (`SCRINALIA__…`) are never passed either.
pub const NEVER_PASSED: [&str; 7] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "SCRINALIA_CONFIG",
];

/// The prefix of the daemon's configuration variables (`SCRINALIA__DATABASE__URL`, …), which may hold the database
/// password; not to be confused with the protocol's variables (`SCRINALIA_RUN_ID`, one underscore), which the
/// daemon sets for each worker itself.
pub const CONFIGURATION_PREFIX: &str = "SCRINALIA__";

/// Whether a worker inherits the daemon's variable `name` under `daemon.worker_env_pass = pass`.
pub fn inherits(name: &str, pass: &[String]) -> bool {
    if name.starts_with(CONFIGURATION_PREFIX) || NEVER_PASSED.contains(&name) {
        return false;
    }
    ALWAYS_PASSED.contains(&name) || pass.iter().any(|pattern| matches(pattern, name))
}

/// `NAME` matches itself only; `PREFIX*` every name starting with `PREFIX`.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether a variable's name suggests it holds a secret. Such a name may still be passed on purpose (a worker
/// may need its own cloud credentials); the daemon then says so in its log when it starts.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words = ["PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "PRIVATE", "_KEY", "APIKEY", "HEADERS"];
    upper == "DATABASE_URL" || upper.starts_with("AWS_") || words.iter().any(|w| upper.contains(w))
}

/// What is wrong with a `daemon.worker_env_pass` list, as (key, sentence) pairs.
pub fn pass_problems(pass: &[String]) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (i, pattern) in pass.iter().enumerate() {
        let key = format!("daemon.worker_env_pass[{i}]");
        let name = pattern.strip_suffix('*').unwrap_or(pattern);
        let problem = if name.is_empty() {
            Some("must name a variable or a prefix such as \"CUDA_*\"; \"*\" alone would pass every secret".to_owned())
        } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            Some(format!("{pattern:?} is not a variable name (letters, digits and `_`, with an optional final `*`)"))
        } else if name.starts_with(CONFIGURATION_PREFIX) || NEVER_PASSED.contains(&name) {
            Some(format!(
                "{pattern:?} is the daemon's own (its configuration or systemd's hand-over) and never reaches a worker"
            ))
        } else {
            None
        };
        problems.extend(problem.map(|p| (key, p)));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_the_basics_pass_by_default() {
        for name in ALWAYS_PASSED {
            assert!(inherits(name, &[]), "{name}");
        }
        for name in ["DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "OTEL_EXPORTER_OTLP_HEADERS", "LD_LIBRARY_PATH", "USER"] {
            assert!(!inherits(name, &[]), "{name}");
        }
        assert!(!inherits("SCRINALIA_RUN_ID", &[]), "protocol variables are set by the daemon, not inherited");
    }

    #[test]
    fn listed_names_and_prefixes_pass() {
        let list = pass(&["VIRTUAL_ENV", "CUDA_*", "OTEL_EXPORTER_OTLP_ENDPOINT"]);
        for name in ["VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES", "CUDA_", "OTEL_EXPORTER_OTLP_ENDPOINT", "PATH"] {
            assert!(inherits(name, &list), "{name}");
        }
        for name in ["VIRTUAL_ENVX", "CUDA", "OTEL_EXPORTER_OTLP_HEADERS", "XCUDA_HOME"] {
            assert!(!inherits(name, &list), "{name}");
        }
    }

    #[test]
    fn the_daemons_own_never_pass_whatever_the_list() {
        let list = pass(&["S*", "NOTIFY_*", "LISTEN_*", "WATCHDOG_*"]);
        for name in ["SCRINALIA__DATABASE__URL", "SCRINALIA_CONFIG", "NOTIFY_SOCKET", "LISTEN_FDS", "WATCHDOG_USEC"] {
            assert!(!inherits(name, &list), "{name}");
        }
        assert!(inherits("SCRINALIA_PROBE_LOG", &list), "a protocol-looking name may be passed on purpose");
    }

    #[test]
    fn explicit_secrets_pass_but_look_secret() {
        let list = pass(&["AWS_*", "DATABASE_URL"]);
        assert!(inherits("AWS_ACCESS_KEY_ID", &list) && inherits("DATABASE_URL", &list));
        for name in ["AWS_ACCESS_KEY_ID", "DATABASE_URL", "OTEL_EXPORTER_OTLP_HEADERS", "HF_TOKEN", "PGPASSWORD"] {
            assert!(looks_secret(name), "{name}");
        }
        for name in ["CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn the_list_loads_from_the_environment_with_commas_and_bad_entries_stop_the_load() {
        let env = |value: &str| vec![("SCRINALIA__DAEMON__WORKER_ENV_PASS".to_owned(), value.to_owned())];
        let settings = crate::Settings::load_from(None, env("CUDA_*,VIRTUAL_ENV")).expect("loads");
        assert_eq!(settings.daemon.worker_env_pass, ["CUDA_*", "VIRTUAL_ENV"]);
        let refused = crate::Settings::load_from(None, env("*")).expect_err("refused").to_string();
        assert!(refused.contains("daemon.worker_env_pass[0]"), "{refused}");
    }

    #[test]
    fn bad_lists_are_refused_with_a_sentence() {
        assert!(pass_problems(&pass(&["CUDA_*", "VIRTUAL_ENV", "LD_LIBRARY_PATH"])).is_empty());
        let found =
            pass_problems(&pass(&["*", "A*B", "X=1", "SCRINALIA__DATABASE__URL", "SCRINALIA__*", "NOTIFY_SOCKET"]));
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, (0..6).map(|i| format!("daemon.worker_env_pass[{i}]")).collect::<Vec<_>>(), "{found:?}");
        assert!(found[0].1.contains("every secret"), "{found:?}");
    }
}
