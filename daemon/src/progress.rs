//! The worker's stdout protocol (`{"config": …}`, `{"progress": …}`, `{"checkpoint": …}`, `{"item": …}` and `{"result": …}` lines) and the throttle that keeps a
//! chatty worker from writing the database more than twice a second; the last report is always written.

use std::time::Duration;

use scrinalia_shared::{DaemonStore, DbError};
use serde_json::Value;
use tokio::time::Instant;
use uuid::Uuid;

use crate::clock::far;

/// At most one progress write per run in this interval.
const MIN_INTERVAL: Duration = Duration::from_millis(500);
/// A progress write that takes longer is abandoned (the report stays pending).
const WRITE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a stdout line of a worker is.
#[derive(Debug, PartialEq)]
pub enum StdoutLine {
    /// `{"progress": {...}}`.
    Progress(Value),
    /// `{"result": {...}}`.
    Result(Value),
    /// `{"config": {...}}`: the configuration the worker reports it really uses.
    Config(Value),
    /// `{"checkpoint": …}`: where a resumed run would continue; any JSON value.
    Checkpoint(Value),
    /// `{"item": {…}}`: what happened to one document (checked by `scrinalia_shared::items::parse`).
    Item(Value),
    /// `{"usage": {…}}`: what the run cost so far, by the worker's count (checked by
    /// `scrinalia_shared::usage::parse`).
    Usage(Value),
    /// Anything else: free text for the logs.
    Text,
}

impl StdoutLine {
    /// Classifies a line; only a JSON object whose one key is `config`, `progress`, `checkpoint` or `result` is
    /// protocol.
    pub fn parse(line: &str) -> Self {
        if !line.trim_start().starts_with('{') {
            return Self::Text;
        }
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) else { return Self::Text };
        if object.len() != 1 {
            return Self::Text;
        }
        let Some((key, value)) = object.into_iter().next() else { return Self::Text };
        match key.as_str() {
            "progress" => Self::Progress(value),
            "result" => Self::Result(value),
            "config" if value.is_object() => Self::Config(value),
            "checkpoint" => Self::Checkpoint(value),
            "item" => Self::Item(value),
            "usage" => Self::Usage(value),
            _ => Self::Text,
        }
    }
}

/// Progress reports waiting to be written.
pub struct Progress {
    run: Uuid,
    daemon: Uuid,
    pending: Option<Value>,
    last_write: Option<Instant>,
    /// When the pending report is due (far away when none is).
    pub next_write: Instant,
}

impl Progress {
    /// No report yet.
    pub fn new(run: Uuid, daemon: Uuid) -> Self {
        Self { run, daemon, pending: None, last_write: None, next_write: far() }
    }

    /// Keeps `value` as the latest report and schedules its write.
    pub fn offer(&mut self, value: Value) {
        self.pending = Some(value);
        self.next_write = self.last_write.map_or_else(Instant::now, |t| t + MIN_INTERVAL);
    }

    /// Writes the pending report, if any. Only a lost lease is an error; other failures leave the report pending
    /// for the next attempt.
    pub async fn write(&mut self, db: &DaemonStore) -> Result<(), DbError> {
        self.next_write = far();
        let Some(value) = self.pending.take() else { return Ok(()) };
        self.last_write = Some(Instant::now());
        match tokio::time::timeout(WRITE_TIMEOUT, db.record_progress(self.run, self.daemon, &value)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(lost @ DbError::LeaseLost { .. })) => Err(lost),
            failed => {
                let error = failed
                    .map_or_else(|_| "timed out".to_owned(), |r| r.err().map(|e| e.to_string()).unwrap_or_default());
                tracing::warn!(%error, "could not record the run's progress; will retry");
                self.pending.get_or_insert(value);
                self.next_write = Instant::now() + MIN_INTERVAL;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_single_key_objects_are_protocol() {
        assert_eq!(StdoutLine::parse(r#"{"progress": {"done": 1}}"#), StdoutLine::Progress(json!({"done": 1})));
        assert_eq!(StdoutLine::parse(r#"{"result": {"processed": 2}}"#), StdoutLine::Result(json!({"processed": 2})));
        assert_eq!(StdoutLine::parse(r#"{"config": {"model": "m"}}"#), StdoutLine::Config(json!({"model": "m"})));
        assert_eq!(StdoutLine::parse(r#"{"config": "m"}"#), StdoutLine::Text, "a config that is no object is text");
        assert_eq!(StdoutLine::parse(r#"{"checkpoint": {"done": 40}}"#), StdoutLine::Checkpoint(json!({"done": 40})));
        assert_eq!(StdoutLine::parse(r#"{"checkpoint": 3}"#), StdoutLine::Checkpoint(json!(3)));
        assert_eq!(StdoutLine::parse(r#"{"item": {"id": "d"}}"#), StdoutLine::Item(json!({"id": "d"})));
        for text in ["hello", "{not json", r#"{"progress": 1, "x": 2}"#, r#"{"other": 1}"#, "[1]"] {
            assert_eq!(StdoutLine::parse(text), StdoutLine::Text, "{text}");
        }
    }
}
