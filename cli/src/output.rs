//! Where results go: standard output, as a table or as the API's JSON, with colour only on a terminal.

use std::io::{self, IsTerminal, Write};

use anyhow::Context;
use serde_json::Value;

use crate::{client::Body, json};

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    /// `--json`: the API's JSON instead of tables.
    pub json: bool,
    /// Colour in tables: only on a terminal, and never with `NO_COLOR` set.
    pub colour: bool,
}

impl Out {
    /// The output settings for this process.
    pub fn new(json: bool) -> Self {
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self { json, colour: !json && !no_colour && io::stdout().is_terminal() }
    }

    /// Prints text, ending it with a newline if it has none.
    pub fn text(&self, text: &str) -> anyhow::Result<()> {
        let mut stdout = io::stdout().lock();
        stdout.write_all(text.as_bytes()).context("writing to stdout")?;
        if !text.ends_with('\n') {
            stdout.write_all(b"\n").context("writing to stdout")?;
        }
        stdout.flush().context("writing to stdout")
    }

    /// Prints raw bytes (a run's output) as they come.
    pub fn bytes(&self, bytes: &[u8]) -> anyhow::Result<()> {
        let mut stdout = io::stdout().lock();
        stdout.write_all(bytes).and_then(|()| stdout.flush()).context("writing to stdout")
    }

    /// Prints an answer of the API as JSON, indented but in the API's own key order.
    pub fn body(&self, body: &Body) -> anyhow::Result<()> {
        body.value()?;
        self.text(&json::pretty(&body.text))
    }

    /// Prints one JSON value on one line (while following, one object per line).
    pub fn json_line(&self, value: &Value) -> anyhow::Result<()> {
        self.text(&value.to_string())
    }
}

/// A status line on stderr (progress of a follow, hints): never mixed into the product on stdout.
pub fn note(text: &str) {
    eprintln!("{text}");
}
