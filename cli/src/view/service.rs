//! The service itself as people read it, rather than its work: the daemons that run the workers, and the
//! health checks of the API and what it depends on.

use scrinalia_wire::{DaemonsView, HealthView};

use super::{ago, when};
use crate::table::{Cell, Style, Table, clip};

/// The colour of a health or daemon status word.
pub fn status_style(status: &str) -> Style {
    match status {
        "ok" | "active" => Style::Good,
        "degraded" | "draining" => Style::Warn,
        "down" => Style::Bad,
        _ => Style::Dim,
    }
}

/// The table of `scrinalia daemons`.
pub fn daemons_table(view: &DaemonsView) -> Table {
    let mut table = Table::new(&["ID", "HOST", "PID", "STATE", "RUNS", "HEARTBEAT", "STARTED", "VERSION", "WORKERS"]);
    for d in &view.daemons {
        let workers = if d.workers.is_empty() { "all".to_owned() } else { d.workers.join(",") };
        table.row(vec![
            d.id.to_string().into(),
            d.host.as_str().into(),
            d.pid.to_string().into(),
            Cell::styled(d.state.to_string(), status_style(&d.state.to_string())),
            format!("{}/{}", d.runs_in_flight, d.capacity).into(),
            ago(d.heartbeat_age_seconds).into(),
            when(d.started_at).into(),
            d.version.as_str().into(),
            clip(&workers, 40).into(),
        ]);
    }
    table
}

/// The table of `scrinalia health`, after a line with the overall status.
pub fn health_text(view: &HealthView, colour: bool) -> String {
    let mut table = Table::new(&["CHECK", "STATUS", "LATENCY", "ERROR"]);
    for c in &view.checks {
        table.row(vec![
            c.name.as_str().into(),
            Cell::styled(c.status.as_str(), status_style(c.status.as_str())),
            format!("{:.1}ms", c.latency_ms).into(),
            c.error.as_deref().unwrap_or_default().into(),
        ]);
    }
    let status = view.status.as_str();
    format!("status: {} (API {})\n{}", status_style(status).paint(status, colour), view.version, table.render(colour))
}
