//! The daemon's metrics, held by its [`Context`](crate::Context): what its runs did, counted where it happens
//! (runner, lease), served as Prometheus text on `daemon.metrics_listen` (`GET /metrics`, nothing else) and
//! exported over OTLP when configured. Queue counts and daemons alive are read from the database by the API
//! (`GET /metrics` there), since any daemon or API process would report the same values.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use anyhow::Context as _;
use axum::{Router, extract::State, http::header, response::IntoResponse, routing::get};
use opentelemetry::metrics::Meter;
use scrinalia_shared::{
    metrics::{Buckets, CounterVec, FloatCounterVec, GaugeVec, HistogramVec, Metrics},
    usage::RunUsage,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How a lease renewal went.
#[derive(Debug, Clone, Copy)]
pub enum Renewal {
    /// The database extended the lease.
    Renewed,
    /// The database did not answer or failed; retried.
    Failed,
    /// The database refused it, or it could not be renewed in time: the worker is killed.
    Lost,
}

/// The daemon's instruments.
#[derive(Debug)]
pub struct DaemonMetrics {
    metrics: Metrics,
    started: CounterVec,
    finished: CounterVec,
    recovered: CounterVec,
    preempted: CounterVec,
    duration: HistogramVec,
    queue_wait: HistogramVec,
    renewals: CounterVec,
    fires: CounterVec,
    webhooks: CounterVec,
    cpu: FloatCounterVec,
    tokens: CounterVec,
    gpu: FloatCounterVec,
    cost: FloatCounterVec,
    in_flight_gauge: GaugeVec,
    in_flight: AtomicI64,
}

impl DaemonMetrics {
    /// Registers every instrument; `meter` when OTLP metrics export is configured.
    pub fn new(meter: Option<Meter>, daemon_id: Uuid, capacity: u32) -> Self {
        let mut metrics = Metrics::new(meter);
        let info = metrics.gauge("scrinalia_daemon_info", "This daemon: 1, labelled with its id and version");
        let capacity_gauge = metrics.gauge("scrinalia_daemon_capacity", "How many runs this daemon takes at once");
        let this = Self {
            started: metrics.counter("scrinalia_runs_started", "Runs whose worker process started, by worker"),
            finished: metrics.counter(
                "scrinalia_runs_finished",
                "Runs this daemon ended, by worker and outcome (succeeded, failed, cancelled, interrupted; \
                 lost: another daemon had recovered it; unrecorded: the ledger could not be written)",
            ),
            recovered: metrics.counter(
                "scrinalia_runs_recovered",
                "Runs of another (dead or frozen) daemon whose lease expired, recorded interrupted by this one, by worker",
            ),
            preempted: metrics.counter(
                "scrinalia_runs_preempted",
                "Runs this daemon ended preempted (they yielded their resource to a more urgent run), by worker",
            ),
            duration: metrics.histogram(
                "scrinalia_run_duration_seconds",
                "Run duration from the worker's start to its end (database clock), by worker and outcome",
                Buckets::RunDuration,
            ),
            queue_wait: metrics.histogram(
                "scrinalia_queue_wait_seconds",
                "Time from the request to the worker's start (database clock), by worker",
                Buckets::Wait,
            ),
            renewals: metrics.counter(
                "scrinalia_lease_renewals",
                "Lease renewals by worker and result (renewed, failed: retried, lost: the worker was killed)",
            ),
            fires: metrics.counter(
                "scrinalia_schedule_fires",
                "Schedule fire times this daemon handled, by result: attempted (fired in a transaction holding the \
                 schedule), requested, skipped, missed, waiting, lost_race (another daemon fired it first) and \
                 refused_by_constraint (a double fire stopped only by the unique index: never expected)",
            ),
            webhooks: metrics.counter(
                "scrinalia_webhook_deliveries",
                "Webhook delivery attempts this daemon made, by webhook and outcome (delivered: a 2xx; retry: failed, \
                 tried again later; gave_up: failed, the last attempt)",
            ),
            cpu: metrics.float_counter(
                "scrinalia_run_cpu_seconds",
                "CPU seconds (user and system) of the runs this daemon ended, by worker, as recorded in each run's \
                 usage (its cgroup's tree, or rusage's waited-for processes)",
            ),
            tokens: metrics.counter(
                "scrinalia_run_tokens",
                "Tokens the workers of the runs this daemon ended reported (their last usage line), by worker and \
                 direction (in: sent to a model, out: produced)",
            ),
            gpu: metrics.float_counter(
                "scrinalia_run_gpu_seconds",
                "GPU seconds the workers of the runs this daemon ended reported, by worker",
            ),
            cost: metrics.float_counter(
                "scrinalia_run_cost",
                "Money the workers of the runs this daemon ended reported spending, by worker and currency (an ISO \
                 4217 code; never summed across currencies)",
            ),
            in_flight_gauge: metrics.gauge("scrinalia_runs_in_flight", "Runs this daemon holds now"),
            in_flight: AtomicI64::new(0),
            metrics,
        };
        info.set(&[("daemon_id", &daemon_id.to_string()), ("version", scrinalia_shared::VERSION)], 1);
        capacity_gauge.set(&[], i64::from(capacity));
        this.in_flight_gauge.set(&[], 0);
        for result in ["attempted", "refused_by_constraint"] {
            this.fires.touch(&[("result", result)]);
        }
        this
    }

    /// A run was claimed and its task starts.
    pub fn run_began(&self) {
        let n = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_gauge.set(&[], n);
    }

    /// A run's task ends.
    pub fn run_ended(&self) {
        let n = self.in_flight.fetch_sub(1, Ordering::Relaxed) - 1;
        self.in_flight_gauge.set(&[], n);
    }

    /// The worker process of a run started, `queued_s` after the request.
    pub fn worker_started(&self, worker: &str, queued_s: Option<f64>) {
        self.started.inc(&[("worker", worker)]);
        if let Some(seconds) = queued_s {
            self.queue_wait.observe(&[("worker", worker)], seconds.max(0.0));
        }
    }

    /// A run ended with `outcome` after `duration_s`.
    pub fn run_finished(&self, worker: &str, outcome: &str, duration_s: Option<f64>) {
        let labels = [("worker", worker), ("outcome", outcome)];
        self.finished.inc(&labels);
        if let Some(seconds) = duration_s {
            self.duration.observe(&labels, seconds.max(0.0));
        }
    }

    /// What a run of `worker` cost, when its end was written with a usage: its CPU seconds, and the tokens, GPU
    /// seconds and cost its worker reported.
    pub fn run_usage(&self, worker: &str, usage: Option<&RunUsage>) {
        let Some(usage) = usage else { return };
        let by_worker = [("worker", worker)];
        self.cpu.add(&by_worker, usage.cpu_seconds.unwrap_or(0.0));
        let Some(reported) = &usage.reported else { return };
        for (direction, tokens) in [("in", reported.tokens_in), ("out", reported.tokens_out)] {
            if let Some(n) = tokens {
                self.tokens.inc_by(&[("worker", worker), ("direction", direction)], n);
            }
        }
        self.gpu.add(&by_worker, reported.gpu_seconds.unwrap_or(0.0));
        if let (Some(cost), Some(currency)) = (reported.cost, reported.currency.as_deref()) {
            self.cost.add(&[("worker", worker), ("currency", currency)], cost);
        }
    }

    /// What one pass over the due schedules did.
    pub fn fired(&self, pass: &scrinalia_shared::schedules::FirePass) {
        for (result, n) in [
            ("attempted", pass.attempted),
            ("requested", pass.requested),
            ("skipped", pass.skipped),
            ("missed", pass.missed),
            ("waiting", pass.waiting),
            ("refused_by_constraint", pass.refused_by_constraint),
        ] {
            self.fires.inc_by(&[("result", result)], u64::from(n));
        }
    }

    /// A run of `worker` whose lease had expired was recorded interrupted by this daemon's recovery.
    pub fn run_recovered(&self, worker: &str) {
        self.recovered.inc(&[("worker", worker)]);
    }

    /// A run of `worker` ended preempted: it yielded its resource to a more urgent run.
    pub fn run_preempted(&self, worker: &str) {
        self.preempted.inc(&[("worker", worker)]);
    }

    /// An attempt to deliver an event to `webhook` ended with `outcome` (`delivered`, `retry`, `gave_up`).
    pub fn webhook_attempt(&self, webhook: &str, outcome: &str) {
        self.webhooks.inc(&[("webhook", webhook), ("outcome", outcome)]);
    }

    /// A lease renewal of a run of `worker`.
    pub fn renewal(&self, worker: &str, result: Renewal) {
        let result = match result {
            Renewal::Renewed => "renewed",
            Renewal::Failed => "failed",
            Renewal::Lost => "lost",
        };
        self.renewals.inc(&[("worker", worker), ("result", result)]);
    }

    /// The Prometheus text.
    pub fn render(&self) -> String {
        self.metrics.render()
    }
}

/// Serves `GET /metrics` on `listen` until `stop`. Binding happens before this returns, so a taken port stops the
/// daemon at start with a sentence.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<crate::Context>,
    stop: CancellationToken,
) -> anyhow::Result<impl Future<Output = ()>> {
    let listener =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listen for /metrics on {listen}"))?;
    tracing::info!(listen = %listener.local_addr().unwrap_or(listen), "serving /metrics");
    let app = Router::new().route("/metrics", get(render)).with_state(metrics);
    Ok(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the /metrics listener failed");
        }
    })
}

async fn render(State(ctx): State<Arc<crate::Context>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, scrinalia_shared::metrics::CONTENT_TYPE)], ctx.metrics.render())
}

#[cfg(test)]
mod tests {
    use scrinalia_shared::usage::ReportedUsage;

    use super::*;

    #[test]
    fn a_runs_usage_is_counted_by_worker_direction_and_currency() {
        let metrics = DaemonMetrics::new(None, Uuid::nil(), 1);
        let reported = ReportedUsage {
            tokens_in: Some(1200),
            tokens_out: Some(300),
            gpu_seconds: None,
            cost: Some(0.0042),
            currency: Some("EUR".into()),
        };
        let usage = RunUsage {
            wall_seconds: 2.0,
            measured_by: "rusage".into(),
            cpu_seconds: Some(0.5),
            reported: Some(reported),
            ..RunUsage::default()
        };
        metrics.run_usage("tagger", Some(&usage));
        metrics.run_usage("tagger", Some(&usage));
        metrics.run_usage("tagger", None);
        metrics.run_usage("judge", Some(&RunUsage { cpu_seconds: Some(0.25), ..RunUsage::default() }));
        let text = metrics.render();
        for line in [
            "scrinalia_run_cpu_seconds_total{worker=\"tagger\"} 1.0",
            "scrinalia_run_cpu_seconds_total{worker=\"judge\"} 0.25",
            "scrinalia_run_tokens_total{worker=\"tagger\",direction=\"in\"} 2400",
            "scrinalia_run_tokens_total{worker=\"tagger\",direction=\"out\"} 600",
            "scrinalia_run_cost_total{worker=\"tagger\",currency=\"EUR\"} 0.0084",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("direction=\"in\"} 0") && !text.contains("worker=\"judge\",currency"), "{text}");
    }
}
