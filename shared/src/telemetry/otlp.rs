//! The OTLP export: what the standard `OTEL_*` variables ask for, the service's resource, and the exporters'
//! HTTP client on the process's runtime. Apart from the logs, so that a process without those variables visibly
//! builds nothing here.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    Resource,
    metrics::{PeriodicReader, SdkMeterProvider},
    trace::SdkTracerProvider,
};

use super::Telemetry;

/// The exporters `plan` asks for, sending through the workspace's `reqwest` on `runtime`; why one could not be
/// built goes to `notes`.
pub(super) fn start(
    plan: &OtlpPlan,
    service: &'static str,
    runtime: &tokio::runtime::Handle,
    env: &impl Fn(&str) -> Option<String>,
    notes: &mut Vec<String>,
) -> Telemetry {
    let mut telemetry = Telemetry::default();
    if plan.traces || plan.metrics {
        let resource = resource(service, env);
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
    telemetry
}

/// What the `OTEL_*` variables ask for.
#[derive(Debug, Default, PartialEq)]
pub(super) struct OtlpPlan {
    pub(super) traces: bool,
    pub(super) metrics: bool,
    pub(super) timeout: Duration,
    /// Warnings to log once logging is set up.
    pub(super) notes: Vec<String>,
}

impl OtlpPlan {
    pub(super) fn from_env(env: &impl Fn(&str) -> Option<String>) -> Self {
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
}
