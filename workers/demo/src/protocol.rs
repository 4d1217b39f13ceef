//! Standard output is the worker protocol: one JSON object per line (`progress`, `result`, or the answer of
//! `describe` / `count-pending`). This writer is the only place that writes to it, flushing every line so the
//! daemon sees progress as it happens.

use std::io::Write;

use anyhow::Context;
use serde_json::{Value, json};

use crate::invocation::EngineChoice;

/// Writes protocol lines (and the odd free-text line) to standard output.
#[derive(Debug, Default)]
pub struct Protocol;

impl Protocol {
    /// Writes one JSON object as a line.
    pub fn object(&mut self, value: &Value) -> anyhow::Result<()> {
        self.text(&value.to_string())
    }

    /// Writes a free-text line (the daemon forwards it to the run's log).
    pub fn text(&mut self, line: &str) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).context("write to standard output")
    }

    /// `{"progress": {"done": d, "total": t, "message": m}}`.
    pub fn progress(&mut self, done: usize, total: usize, message: Option<&str>) -> anyhow::Result<()> {
        let mut progress = json!({ "done": done, "total": total });
        if let Some(message) = message {
            progress["message"] = json!(message);
        }
        self.object(&json!({ "progress": progress }))
    }

    /// `{"result": {...}}`.
    pub fn result(&mut self, result: Value) -> anyhow::Result<()> {
        self.object(&json!({ "result": result }))
    }

    /// The answer of `describe`: the engine configuration the worker would use.
    pub fn describe(&mut self, engine: &EngineChoice) -> anyhow::Result<()> {
        self.object(&json!({
            "engine": engine.engine,
            "preset": engine.preset,
            "model": engine.model,
            "endpoint": engine.endpoint,
        }))
    }
}
