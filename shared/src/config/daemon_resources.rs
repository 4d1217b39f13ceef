//! `daemon.resources`: a daemon's own capacity of each daemon-scoped resource of the catalogue (`{ gpu = 1 }`).

use std::collections::BTreeMap;

use crate::catalogue::{ResourceScope, ResourceSpec};

/// The most slots of one resource a daemon may give: far above the GPUs of any host, so more is a typo.
pub const MAX_DAEMON_SLOTS: u32 = 1024;

/// What is wrong with `given` (the daemon's `daemon.resources`) against the catalogue's `declared` resources:
/// each name must be a resource declared with `scope = "daemon"`, with a count of at most [`MAX_DAEMON_SLOTS`].
/// A count of 0 is allowed and means the daemon has none (as if it were not named).
pub fn problems(given: &BTreeMap<String, u32>, declared: &[ResourceSpec]) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (name, count) in given {
        let key = format!("daemon.resources.{name}");
        match declared.iter().find(|r| r.name == *name).map(|r| r.scope) {
            None => problems.push((
                key,
                format!(
                    "the catalogue declares no resource {name:?} (add it to [[resources]] with scope = \"daemon\")"
                ),
            )),
            Some(ResourceScope::Global) => problems.push((
                key,
                format!(
                    "{name:?} is a global resource: its capacity is the catalogue's, shared by every daemon; only \
                     resources declared with scope = \"daemon\" take a capacity here"
                ),
            )),
            Some(ResourceScope::Daemon) if *count > MAX_DAEMON_SLOTS => {
                problems.push((key, format!("{count} slots is more than a host has; give at most {MAX_DAEMON_SLOTS}")))
            }
            Some(ResourceScope::Daemon) => {}
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, scope: ResourceScope) -> ResourceSpec {
        let capacity = if scope == ResourceScope::Global { 1 } else { 0 };
        ResourceSpec {
            name: name.into(),
            capacity,
            description: None,
            scope,
            starts_per_minute: None,
            preempt_after_seconds: None,
            preempt_grace_seconds: None,
        }
    }

    #[test]
    fn only_daemon_scoped_resources_take_a_count_here() {
        let declared = [spec("gpu", ResourceScope::Daemon), spec("model-server", ResourceScope::Global)];
        let given: BTreeMap<String, u32> =
            [("gpu".into(), 2), ("model-server".into(), 1), ("tpu".into(), 1)].into_iter().collect();
        let found = problems(&given, &declared);
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["daemon.resources.model-server", "daemon.resources.tpu"], "{found:?}");
        assert!(found[0].1.contains("is a global resource"), "{found:?}");
        assert!(found[1].1.contains("declares no resource \"tpu\""), "{found:?}");
        let none: BTreeMap<String, u32> = [("gpu".into(), 0)].into_iter().collect();
        assert!(problems(&none, &declared).is_empty(), "0 is none");
        let many: BTreeMap<String, u32> = [("gpu".into(), MAX_DAEMON_SLOTS + 1)].into_iter().collect();
        assert!(problems(&many, &declared)[0].1.contains("at most 1024"));
    }
}
