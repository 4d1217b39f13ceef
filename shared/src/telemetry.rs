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

use std::{fmt, io::IsTerminal, time::Duration};

use opentelemetry::{
    Context,
    trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _},
};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    Resource,
    metrics::{PeriodicReader, SdkMeterProvider},
    trace::SdkTracerProvider,
};
use serde_json::Value;
use tracing::{
    Event, Subscriber,
    field::{Field, Visit},
};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::filter_fn,
    fmt::{
        FmtContext, FormatEvent, FormatFields, FormattedFields,
        format::{JsonFields, Writer},
    },
    prelude::*,
    registry::LookupSpan,
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
    let mut telemetry = Telemetry::default();
    if plan.traces || plan.metrics {
        let resource = resource(service, &env);
        let client = || RuntimeClient::new(runtime.clone(), plan.timeout);
        if plan.traces {
            match opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client())
                .with_protocol(Protocol::HttpBinary)
                .build()
            {
                Ok(exporter) => {
                    telemetry.traces = Some(
                        SdkTracerProvider::builder()
                            .with_batch_exporter(exporter)
                            .with_resource(resource.clone())
                            .build(),
                    );
                }
                Err(e) => notes.push(format!("traces are not exported: {e}")),
            }
        }
        if plan.metrics {
            match opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_http_client(client())
                .with_protocol(Protocol::HttpBinary)
                .build()
            {
                Ok(exporter) => {
                    let reader = PeriodicReader::builder(exporter).build();
                    telemetry.metrics =
                        Some(SdkMeterProvider::builder().with_reader(reader).with_resource(resource).build());
                }
                Err(e) => notes.push(format!("metrics are not exported: {e}")),
            }
        }
    }

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

/// What the `OTEL_*` variables ask for.
#[derive(Debug, Default, PartialEq)]
struct OtlpPlan {
    traces: bool,
    metrics: bool,
    timeout: Duration,
    /// Warnings to log once logging is set up.
    notes: Vec<String>,
}

impl OtlpPlan {
    fn from_env(env: &impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let timeout = Duration::from_millis(
            get("OTEL_EXPORTER_OTLP_TIMEOUT").and_then(|v| v.parse().ok()).unwrap_or(10_000).max(100),
        );
        let mut plan = Self { timeout, ..Self::default() };
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return plan;
        }
        let general = get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let mut wanted = |exporter_var: &str, endpoint_var: &str| match get(exporter_var).as_deref() {
            None => general || get(endpoint_var).is_some(),
            Some("none") => false,
            Some("otlp") => true,
            Some(other) => {
                plan.notes.push(format!("{exporter_var}={other:?} is not supported (only \"otlp\" and \"none\")"));
                false
            }
        };
        let traces = wanted("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let metrics = wanted("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
        (plan.traces, plan.metrics) = (traces, metrics);
        if traces || metrics {
            for var in [
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            ] {
                if let Some(protocol) = get(var).filter(|p| p != "http/protobuf") {
                    plan.notes.push(format!("{var}={protocol:?} is not supported; sending http/protobuf"));
                }
            }
        }
        plan
    }
}

/// The service's resource: `OTEL_SERVICE_NAME` (else `service`), `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own, and
/// the version and host.
fn resource(service: &'static str, env: &impl Fn(&str) -> Option<String>) -> Resource {
    let mut builder = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none_or(|v| v.trim().is_empty()) {
        builder = builder.with_service_name(service);
    }
    let host = hostname();
    builder
        .with_attribute(opentelemetry::KeyValue::new("service.version", crate::VERSION))
        .with_attribute(opentelemetry::KeyValue::new("host.name", host))
        .with_attribute(opentelemetry::KeyValue::new("process.pid", i64::from(std::process::id())))
        .build()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default()
}

/// The exporters' HTTP client: the workspace's async `reqwest`, driven on the process's runtime. The SDK's batch
/// processor and periodic reader run on threads of their own and wait for the answer there.
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl RuntimeClient {
    fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .unwrap_or_default();
        Self { client, runtime }
    }
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request.try_into()?).await?;
            let (status, headers) = (response.status(), response.headers().clone());
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = Response::builder().status(status).body(body)?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// Parses a W3C `traceparent` into a remote span context (`None` when it is not a valid one). A `tracestate` may
/// come with it.
pub fn remote_context(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version.eq_ignore_ascii_case("ff") || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = tracestate.and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
    let context = SpanContext::new(trace, span, TraceFlags::new(flags & 1), true, state);
    context.is_valid().then_some(context)
}

/// Makes `span` a child of the remote `traceparent` (for the OpenTelemetry export; a no-op when spans are not
/// exported or the text is not a valid trace context). Call it before the span is first entered.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    if let Some(remote) = traceparent.and_then(|tp| remote_context(tp, tracestate)) {
        let _ = span.set_parent(Context::new().with_remote_span_context(remote));
    }
}

/// The W3C `traceparent` of `span` as exported, or `None` when spans are not exported.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_ref = context.span();
    let sc = span_ref.span_context();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Marks `span` as failed in the exported trace.
pub fn mark_failed(span: &tracing::Span, description: impl Into<String>) {
    span.set_status(opentelemetry::trace::Status::error(description.into()));
}

/// Text fields as the default formatter writes them (`message` bare, then `name=value`), without the `otel.*`
/// fields that only name and classify spans for the export.
struct TextFields;

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || field.name().starts_with("otel.") {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{value:?}"),
            name => write!(self.writer, "{separator}{}={value:?}", name.strip_prefix("r#").unwrap_or(name)),
        };
    }
}

/// One JSON object per event: `timestamp`, `level`, `target`, the innermost `span`'s name, the fields of every
/// enclosing span (outermost first, inner ones win) and the event's own fields (`message` among them), all at
/// the top level. `otel.*` fields are left out.
struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Line::default();
        line.set("timestamp", chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true).into());
        line.set("level", meta.level().as_str().into());
        line.set("target", meta.target().into());
        if let Some(scope) = ctx.event_scope() {
            let mut innermost = None;
            for span in scope.from_root() {
                innermost = Some(span.name());
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else { continue };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    for (key, value) in fields {
                        line.set(&key, value);
                    }
                }
            }
            if let Some(name) = innermost {
                line.set("span", name.into());
            }
        }
        event.record(&mut line);
        let mut text = String::with_capacity(256);
        text.push('{');
        for (i, (key, value)) in line.0.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&Value::from(key.as_str()).to_string());
            text.push(':');
            text.push_str(&value.to_string());
        }
        text.push('}');
        writeln!(writer, "{text}")
    }
}

/// The fields of one JSON line, in order; a later value replaces an earlier one of the same name.
#[derive(Default)]
struct Line(Vec<(String, Value)>);

impl Line {
    fn set(&mut self, key: &str, value: Value) {
        let key = key.strip_prefix("r#").unwrap_or(key);
        if key.starts_with("otel.") {
            return;
        }
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field.name(), format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.set(field.name(), value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(vars: &[(&str, &str)]) -> OtlpPlan {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        OtlpPlan::from_env(&|name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        let none = plan(&[("OTEL_SERVICE_NAME", "x")]);
        assert!(!none.traces && !none.metrics && none.notes.is_empty(), "{none:?}");
        let both = plan(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]);
        assert!(both.traces && both.metrics, "{both:?}");
        let traces = plan(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")]);
        assert!(traces.traces && !traces.metrics, "{traces:?}");
        let off = plan(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"), ("OTEL_METRICS_EXPORTER", "none")]);
        assert!(off.traces && !off.metrics, "{off:?}");
        let disabled = plan(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"), ("OTEL_SDK_DISABLED", "true")]);
        assert!(!disabled.traces && !disabled.metrics, "{disabled:?}");
        let asked = plan(&[("OTEL_TRACES_EXPORTER", "otlp")]);
        assert!(asked.traces && !asked.metrics, "the default endpoint is used when asked: {asked:?}");
        let odd = plan(&[("OTEL_TRACES_EXPORTER", "zipkin"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318")]);
        assert!(!odd.traces && odd.notes.iter().any(|n| n.contains("zipkin")), "{odd:?}");
        let grpc = plan(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert!(grpc.traces && grpc.notes.iter().any(|n| n.contains("grpc")), "{grpc:?}");
    }

    #[test]
    fn traceparents_parse_as_the_w3c_spec_says() {
        let sc = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).expect("valid");
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        let unsampled = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None);
        assert!(unsampled.is_some_and(|sc| !sc.is_sampled()));
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert!(remote_context(bad, None).is_none(), "{bad}");
        }
    }
}
