//! Running one read-only verb of a worker (`describe`, `count-pending`, `check`) directly, without a supervisor:
//! in its own process group, with a timeout after which the whole group is killed, its output capped, and its
//! answer (the last JSON object it printed) read into what the verb promises.

use std::{process::Stdio, time::Duration};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use scrinalia_shared::{Description, catalogue::bound_problems, catalogue::is_identifier};
use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    process::Command,
};

use crate::invocation::Invocation;

/// Output beyond this is not read.
const MAX_OUTPUT: u64 = 1024 * 1024;

/// What `count-pending` answered.
#[derive(Debug, PartialEq)]
pub enum Measured {
    /// Units waiting.
    Pending(i64),
    /// Why it cannot be counted, and how many are done.
    Unmeasurable {
        /// The worker's sentence.
        reason: String,
        /// Units done, when reported.
        done: Option<i64>,
    },
}

/// What `check` answered.
#[derive(Debug, PartialEq)]
pub struct Checked {
    /// Whether the worker has what it needs.
    pub ready: bool,
    /// When not: what is missing.
    pub reason: Option<String>,
}

/// Runs `invocation` (whose verb is `verb`, for sentences) and returns its last JSON object; a failure is a
/// sentence saying what happened, the timeout included.
pub async fn answer(invocation: &Invocation, verb: &str, limit: Duration) -> Result<Value, String> {
    let mut cmd = Command::new(&invocation.program);
    cmd.args(&invocation.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.process_group(0).kill_on_drop(true);
    invocation.apply_env(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("could not start {}: {e}", invocation.program.display()))?;
    let group = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = tokio::time::timeout(limit, async {
        let (out, err) = tokio::join!(read_capped(stdout), read_capped(stderr));
        (child.wait().await, out, err)
    })
    .await;
    drop(group);
    let (status, out, err) = finished
        .map_err(|_| format!("{verb} did not answer within {} s; its processes were killed", limit.as_secs()))?;
    let status = status.map_err(|e| format!("could not wait for {verb}: {e}"))?;
    if !status.success() {
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(format!(
            "{verb} failed ({status}){}",
            if last.is_empty() { String::new() } else { format!(": {last}") }
        ));
    }
    last_object(&out).ok_or_else(|| format!("{verb} printed no JSON object"))
}

/// Kills the process group when the verb ends, however it ends (its children do not linger).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.filter(|&p| p > 1) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

async fn read_capped(reader: Option<impl AsyncRead + Unpin>) -> String {
    let mut buf = Vec::new();
    if let Some(reader) = reader {
        let _ = reader.take(MAX_OUTPUT).read_to_end(&mut buf).await;
    }
    String::from_utf8_lossy(&buf).into_owned()
}

fn last_object(out: &str) -> Option<Value> {
    out.lines().rev().find_map(|l| serde_json::from_str::<Value>(l.trim()).ok().filter(Value::is_object))
}

/// `{"pending": N}` or `{"unmeasurable": "…", "done": N}`.
pub fn measured(answer: &Value) -> Result<Measured, String> {
    if let Some(pending) = answer.get("pending").and_then(Value::as_i64) {
        return Ok(Measured::Pending(pending));
    }
    if let Some(reason) = answer.get("unmeasurable").and_then(Value::as_str) {
        return Ok(Measured::Unmeasurable {
            reason: reason.to_owned(),
            done: answer.get("done").and_then(Value::as_i64),
        });
    }
    Err(format!("count-pending answered {answer}, which has neither \"pending\" nor \"unmeasurable\""))
}

/// When the oldest pending document arrived, if `count-pending` said (`"oldest_pending_at"`, RFC 3339); a
/// value that is not a time is ignored (the count itself still holds).
pub fn oldest_pending_at(answer: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = answer.get("oldest_pending_at")?.as_str()?;
    chrono::DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&chrono::Utc))
}

/// `{"ready": true}` or `{"ready": false, "reason": "…"}`.
pub fn checked(answer: &Value) -> Result<Checked, String> {
    let Some(ready) = answer.get("ready").and_then(Value::as_bool) else {
        return Err(format!("check answered {answer}, which has no \"ready\": true or false"));
    };
    let reason = answer.get("reason").and_then(Value::as_str).map(str::to_owned);
    Ok(Checked { ready, reason: if ready { None } else { reason } })
}

/// A description, with what the code declares checked as the catalogue's own options are: a worker whose
/// declarations do not hold is not believed.
pub fn described(answer: Value) -> Result<Description, String> {
    let description: Description =
        serde_json::from_value(answer).map_err(|e| format!("describe answered something unreadable: {e}"))?;
    let mut problems = Vec::new();
    for option in description.declared.iter().flat_map(|d| &d.options) {
        if !is_identifier(&option.name) {
            problems.push(format!("the option name {:?} is not lowercase letters, digits, '-' or '_'", option.name));
        }
        if let Some(default) = option.default.as_ref().filter(|d| !option.kind.admits(d)) {
            problems.push(format!("the default {default} of option {:?} is not {}", option.name, option.kind.noun()));
        }
        problems.extend(bound_problems(option).into_iter().map(|(_, sentence)| sentence));
    }
    if problems.is_empty() {
        Ok(description)
    } else {
        Err(format!("describe declared options that do not hold: {}", problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_are_read_from_the_last_object() {
        assert_eq!(last_object("noise\n{\"pending\": 12}\n"), Some(json!({"pending": 12})));
        assert_eq!(last_object("nothing"), None);
        assert_eq!(measured(&json!({"pending": 12})), Ok(Measured::Pending(12)));
        assert_eq!(
            measured(&json!({"unmeasurable": "no index", "done": 4})),
            Ok(Measured::Unmeasurable { reason: "no index".into(), done: Some(4) })
        );
        assert!(measured(&json!({"other": 1})).is_err());
        assert_eq!(checked(&json!({"ready": true})), Ok(Checked { ready: true, reason: None }));
        assert_eq!(
            checked(&json!({"ready": false, "reason": "no rule"})),
            Ok(Checked { ready: false, reason: Some("no rule".into()) })
        );
        assert!(checked(&json!({"ready": "yes"})).is_err());
    }

    #[test]
    fn a_description_whose_declarations_do_not_hold_is_refused() {
        let good = json!({"engine": null, "declared": {"options": [
            {"name": "batch_size", "type": "integer", "default": 20, "minimum": 1}
        ]}});
        assert!(described(good).is_ok());
        let bad =
            json!({"declared": {"options": [{"name": "batch_size", "type": "integer", "default": 0, "minimum": 1}]}});
        let refused = described(bad).expect_err("out of bounds");
        assert!(refused.contains("the default 0 of option \"batch_size\" is out of its bounds"), "{refused}");
        assert!(described(json!({"declared": {"options": [{"name": "x", "type": "tuple"}]}})).is_err());
    }
}
