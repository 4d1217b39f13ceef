//! Logs, traces and the OTLP side of metrics, set up once per binary.
//!
//! - **Logs**: one readable line per event for journald (no colour unless stdout is a terminal), or one JSON object
//!   per line with `[telemetry] log_format = "json"`. In JSON the fields of the enclosing spans are lifted to the
//!   top level, so every line inside a run's span carries `run_id` and `worker` (`jq 'select(.run_id == "…")'`).
//!   `RUST_LOG` overrides the configured filter.
//! - **Traces**: exported over OTLP/HTTP (protobuf) when the standard variables ask for it
//!   (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER=otlp`);
//!   `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`
//!   and `OTEL_BSP_*` are honoured; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off. Without
//!   them there is no exporter, no OpenTelemetry layer and no background thread.
//! - **Metrics over OTLP**: the same, with `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, `OTEL_METRICS_EXPORTER` and
//!   `OTEL_METRIC_EXPORT_INTERVAL`; see [`crate::metrics`] for what is measured.
//!
//! The exporters send through the workspace's `reqwest` client, on the process's Tokio runtime, so no second HTTP
//! stack is built and nothing blocks a runtime thread. Call [`Telemetry::shutdown`] after the runtime's main
//! future has returned, before the runtime is dropped, to flush what is buffered.
//!
//! By concern: the OTLP exporters (`otlp`), the formats of log lines (`log_format`) and the W3C trace context that
//! joins a run's trace to its request's and its worker's (`trace_context`); this module wires them into one
//! subscriber and keeps the public items where callers have always named them.

mod log_format;
mod otlp;
mod trace_context;

use std::{io::IsTerminal, time::Duration};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{metrics::SdkMeterProvider, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, Layer, filter::filter_fn, fmt::format::JsonFields, prelude::*};

pub use self::trace_context::{continue_trace, mark_failed, remote_context, traceparent_of};
use self::{
    log_format::{FlatJson, TextFields},
    otlp::OtlpPlan,
};
use crate::config::{LogFormat, TelemetrySettings};

/// The name of spans that last as long as the process (the daemon's): they stay out of exported traces, so a
/// trace is a request or a run, not a process lifetime.
pub const PROCESS_SPAN: &str = "daemon";

/// What [`init`] set up; keep it until the end of `main`, then call [`Telemetry::shutdown`].
#[derive(Debug, Default)]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn traces_exported(&self) -> bool {
        self.traces.is_some()
    }

    /// A meter whose measurements are exported over OTLP, when metrics export is configured.
    pub fn meter(&self, scope: &'static str) -> Option<opentelemetry::metrics::Meter> {
        use opentelemetry::metrics::MeterProvider as _;
        self.metrics.as_ref().map(|p| p.meter(scope))
    }

    /// Flushes and stops the exporters. Call it from outside the runtime (after `block_on` returned) while the
    /// runtime still exists: the last exports are sent by its worker threads.
    pub fn shutdown(self) {
        if let Some(traces) = self.traces
            && let Err(e) = traces.shutdown_with_timeout(Duration::from_secs(5))
        {
            tracing::warn!(error = %e, "could not flush the last spans");
        }
        if let Some(metrics) = self.metrics
            && let Err(e) = metrics.shutdown_with_timeout(Duration::from_secs(5))
        {
            tracing::warn!(error = %e, "could not flush the last metrics");
        }
    }
}

/// Installs the global subscriber and, when the `OTEL_*` variables ask for it, the OTLP exporters. Call once, at
/// the top of `main`, with the runtime the exporters may use.
pub fn init(settings: &TelemetrySettings, service: &'static str, runtime: &tokio::runtime::Handle) -> Telemetry {
    init_from(settings, service, runtime, |name| std::env::var(name).ok())
}

fn init_from(
    settings: &TelemetrySettings,
    service: &'static str,
    runtime: &tokio::runtime::Handle,
    env: impl Fn(&str) -> Option<String>,
) -> Telemetry {
    let plan = OtlpPlan::from_env(&env);
    let mut notes = plan.notes.clone();
    let telemetry = otlp::start(&plan, service, runtime, &env, &mut notes);

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.log_filter));
    let otel = telemetry.traces.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(service))
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(|meta| !(meta.is_span() && meta.name() == PROCESS_SPAN)))
    });
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    match settings.log_format {
        LogFormat::Json => {
            registry.with(tracing_subscriber::fmt::layer().event_format(FlatJson).fmt_fields(JsonFields::new())).init();
        }
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stdout().is_terminal())
                    .with_target(false)
                    .fmt_fields(TextFields),
            )
            .init(),
    }
    for note in notes {
        tracing::warn!("OpenTelemetry: {note}");
    }
    if telemetry.traces.is_some() || telemetry.metrics.is_some() {
        tracing::info!(
            traces = telemetry.traces.is_some(),
            metrics = telemetry.metrics.is_some(),
            "OpenTelemetry export over OTLP/HTTP"
        );
    }
    telemetry
}
