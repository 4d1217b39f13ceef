//! Standard output is the worker protocol: one JSON object per line (the answer of `describe`, `count-pending`
//! or `check`; for `run` the `config` line first, then `progress`, `checkpoint` and `result`). This writer is
//! the only place that writes to it, flushing every line so the daemon sees progress and checkpoints as they
//! happen. Tests give it a buffer instead of standard output.

use std::io::{Stdout, Write};

use anyhow::Context;
use serde_json::{Value, json};

use crate::config::EngineConfig;

/// The largest checkpoint the daemon accepts: the JSON text of its value, in bytes (a larger one is refused and
/// the last one accepted stays).
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;

/// Writes protocol lines (and the odd free-text line) to `W`, standard output unless a test says otherwise.
#[derive(Debug)]
pub struct Protocol<W: Write = Stdout> {
    out: W,
}

impl Protocol {
    /// The protocol on standard output.
    pub fn stdout() -> Self {
        Self { out: std::io::stdout() }
    }
}

/// The text of an item line: `{"item": {"id": …, "outcome": …, "class": …, "error": …}}`.
pub fn item_line(id: &str, outcome: &str, class: Option<&str>, error: Option<&str>) -> String {
    let mut item = json!({ "id": id, "outcome": outcome });
    if let Some(class) = class {
        item["class"] = json!(class);
    }
    if let Some(error) = error {
        item["error"] = json!(error);
    }
    json!({ "item": item }).to_string()
}

impl<W: Write> Protocol<W> {
    /// The protocol written to `out`.
    #[cfg(test)]
    pub fn to(out: W) -> Self {
        Self { out }
    }

    /// What was written, for a test.
    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }

    /// Writes one JSON object as a line.
    pub fn object(&mut self, value: &Value) -> anyhow::Result<()> {
        self.text(&value.to_string())
    }

    /// Writes a free-text line (the daemon forwards it to the run's log).
    pub fn text(&mut self, line: &str) -> anyhow::Result<()> {
        writeln!(self.out, "{line}").and_then(|()| self.out.flush()).context("write to standard output")
    }

    /// `{"progress": {"done": d, "total": t, "message": m}}`.
    pub fn progress(&mut self, done: usize, total: usize, message: Option<&str>) -> anyhow::Result<()> {
        let mut progress = json!({ "done": done, "total": total });
        if let Some(message) = message {
            progress["message"] = json!(message);
        }
        self.object(&json!({ "progress": progress }))
    }

    /// `{"checkpoint": value}`: where a resumed run would continue (the daemon keeps the latest).
    pub fn checkpoint(&mut self, value: &Value) -> anyhow::Result<()> {
        self.object(&json!({ "checkpoint": value }))
    }

    /// `{"item": {"id": …, "outcome": …, "class": …, "error": …}}`: what happened to one document (class and
    /// error only when given).
    pub fn item(&mut self, id: &str, outcome: &str, class: Option<&str>, error: Option<&str>) -> anyhow::Result<()> {
        self.text(&item_line(id, outcome, class, error))
    }

    /// `{"result": {...}}`.
    pub fn result(&mut self, result: Value) -> anyhow::Result<()> {
        self.object(&json!({ "result": result }))
    }

    /// `run`'s first line, `{"config": {...}}`: the configuration the run really uses.
    pub fn config(&mut self, config: &EngineConfig) -> anyhow::Result<()> {
        self.object(&json!({ "config": config.json() }))
    }

    /// The answer of `describe`: the configuration the worker would use, and what its code declares.
    pub fn describe(&mut self, config: &EngineConfig, declared: Value, capabilities: Value) -> anyhow::Result<()> {
        let mut described = config.described(declared);
        described["capabilities"] = capabilities;
        self.object(&described)
    }

    /// The answer of `check`: `{"ready": true}`, or `{"ready": false, "reason": "…"}`.
    pub fn check(&mut self, readiness: &Result<(), String>) -> anyhow::Result<()> {
        match readiness {
            Ok(()) => self.object(&json!({ "ready": true })),
            Err(reason) => self.object(&json!({ "ready": false, "reason": reason })),
        }
    }
}
