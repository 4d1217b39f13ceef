//! Logging set-up shared by the binaries: one readable line per event for journald (no colour unless stdout is
//! a terminal), or JSON lines when configured. `RUST_LOG` overrides the configured filter.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::{LogFormat, TelemetrySettings};

/// Installs the global subscriber. Call once, at the top of `main`.
pub fn init(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.log_filter));
    let registry = tracing_subscriber::registry().with(filter);
    match settings.log_format {
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true).with_current_span(true)).init(),
        LogFormat::Text => {
            registry.with(fmt::layer().with_ansi(std::io::stdout().is_terminal()).with_target(false)).init()
        }
    }
}
