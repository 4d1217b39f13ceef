//! Metrics held by the process's own state (no global registry): each instrument writes to a Prometheus registry,
//! rendered as text for `/metrics`, and, when OTLP metrics export is configured
//! ([`crate::telemetry::Telemetry::meter`]), to an OpenTelemetry instrument of the same name, so one call
//! records both. Gauges computed from the database at scrape time ([`GaugeSeries`]) are rendered the same way and
//! observed by OpenTelemetry from the last computed values.

use std::sync::{Arc, Mutex, atomic::AtomicU64};

use opentelemetry::{
    KeyValue,
    metrics::{Meter, ObservableGauge},
};
use prometheus_client::{
    encoding::prometheus_text,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// The `Content-Type` of `/metrics`: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A label set: names and values, in a fixed order per metric.
pub type Labels = Vec<(&'static str, String)>;

fn owned(labels: &[(&'static str, &str)]) -> Labels {
    labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

fn attributes(labels: &[(&'static str, &str)]) -> Vec<KeyValue> {
    labels.iter().map(|(k, v)| KeyValue::new(*k, (*v).to_owned())).collect()
}

/// Histogram bucket layouts, in seconds.
#[derive(Debug, Clone, Copy)]
pub enum Buckets {
    /// Runs: a tenth of a second to six hours.
    RunDuration,
    /// Waits (queue, claims): a millisecond to an hour.
    Wait,
}

const RUN_DURATION: [f64; 15] =
    [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0];
const WAIT: [f64; 14] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

impl Buckets {
    fn bounds(self) -> &'static [f64] {
        match self {
            Self::RunDuration => &RUN_DURATION,
            Self::Wait => &WAIT,
        }
    }

    fn constructor(self) -> fn() -> Histogram {
        match self {
            Self::RunDuration => || Histogram::new(RUN_DURATION),
            Self::Wait => || Histogram::new(WAIT),
        }
    }
}

/// A process's metrics: the Prometheus registry and, when exported, the OpenTelemetry meter.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    meter: Option<Meter>,
}

impl Metrics {
    /// No metrics yet; `meter` when OTLP export is configured.
    pub fn new(meter: Option<Meter>) -> Self {
        Self { registry: Registry::default(), meter }
    }

    /// A counter (`name` without `_total`; Prometheus shows `<name>_total`).
    pub fn counter(&mut self, name: &'static str, help: &'static str) -> CounterVec {
        let prom = Family::<Labels, Counter>::default();
        self.registry.register(name, help, prom.clone());
        let otel = self.meter.as_ref().map(|m| m.u64_counter(name).with_description(help).build());
        CounterVec { prom, otel }
    }

    /// A counter of a quantity that is not a whole number (seconds, money); `name` without `_total`, as
    /// [`Self::counter`].
    pub fn float_counter(&mut self, name: &'static str, help: &'static str) -> FloatCounterVec {
        let prom = Family::<Labels, Counter<f64, AtomicU64>>::default();
        self.registry.register(name, help, prom.clone());
        let otel = self.meter.as_ref().map(|m| m.f64_counter(name).with_description(help).build());
        FloatCounterVec { prom, otel }
    }

    /// A histogram of seconds (`name` ends with `_seconds`).
    pub fn histogram(&mut self, name: &'static str, help: &'static str, buckets: Buckets) -> HistogramVec {
        let prom = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(buckets.constructor());
        self.registry.register(name, help, prom.clone());
        let otel = self.meter.as_ref().map(|m| {
            m.f64_histogram(name)
                .with_description(help)
                .with_unit("s")
                .with_boundaries(buckets.bounds().to_vec())
                .build()
        });
        HistogramVec { prom, otel }
    }

    /// A gauge.
    pub fn gauge(&mut self, name: &'static str, help: &'static str) -> GaugeVec {
        let prom = Family::<Labels, Gauge>::default();
        self.registry.register(name, help, prom.clone());
        let otel = self.meter.as_ref().map(|m| m.i64_gauge(name).with_description(help).build());
        GaugeVec { prom, otel }
    }

    /// Everything, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let _ = prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// A counter by labels.
#[derive(Debug, Clone)]
pub struct CounterVec {
    prom: Family<Labels, Counter>,
    otel: Option<opentelemetry::metrics::Counter<u64>>,
}

impl CounterVec {
    /// Adds one.
    pub fn inc(&self, labels: &[(&'static str, &str)]) {
        self.prom.get_or_create(&owned(labels)).inc();
        if let Some(otel) = &self.otel {
            otel.add(1, &attributes(labels));
        }
    }

    /// Adds `n`.
    pub fn inc_by(&self, labels: &[(&'static str, &str)], n: u64) {
        if n == 0 {
            return;
        }
        self.prom.get_or_create(&owned(labels)).inc_by(n);
        if let Some(otel) = &self.otel {
            otel.add(n, &attributes(labels));
        }
    }

    /// Makes the series exist (at zero), so that a rate can be computed from its first increase.
    pub fn touch(&self, labels: &[(&'static str, &str)]) {
        let _ = self.prom.get_or_create(&owned(labels));
    }
}

/// A counter of fractional amounts by labels.
#[derive(Debug, Clone)]
pub struct FloatCounterVec {
    prom: Family<Labels, Counter<f64, AtomicU64>>,
    otel: Option<opentelemetry::metrics::Counter<f64>>,
}

impl FloatCounterVec {
    /// Adds `amount`; one that is not a finite number of at least 0 is left out (a counter never goes down).
    pub fn add(&self, labels: &[(&'static str, &str)], amount: f64) {
        if !(amount.is_finite() && amount > 0.0) {
            return;
        }
        self.prom.get_or_create(&owned(labels)).inc_by(amount);
        if let Some(otel) = &self.otel {
            otel.add(amount, &attributes(labels));
        }
    }
}

/// A histogram by labels.
#[derive(Debug, Clone)]
pub struct HistogramVec {
    prom: Family<Labels, Histogram, fn() -> Histogram>,
    otel: Option<opentelemetry::metrics::Histogram<f64>>,
}

impl HistogramVec {
    /// Records one value, in seconds.
    pub fn observe(&self, labels: &[(&'static str, &str)], seconds: f64) {
        self.prom.get_or_create(&owned(labels)).observe(seconds);
        if let Some(otel) = &self.otel {
            otel.record(seconds, &attributes(labels));
        }
    }
}

/// A gauge by labels.
#[derive(Debug, Clone)]
pub struct GaugeVec {
    prom: Family<Labels, Gauge>,
    otel: Option<opentelemetry::metrics::Gauge<i64>>,
}

impl GaugeVec {
    /// Sets the value.
    pub fn set(&self, labels: &[(&'static str, &str)], value: i64) {
        self.prom.get_or_create(&owned(labels)).set(value);
        if let Some(otel) = &self.otel {
            otel.record(value, &attributes(labels));
        }
    }
}

/// One gauge computed on demand (from the database), with its samples.
#[derive(Debug, Clone)]
pub struct GaugeSeries {
    /// The metric's name.
    pub name: &'static str,
    /// What it measures.
    pub help: &'static str,
    /// Label sets and values.
    pub samples: Vec<(Labels, f64)>,
}

/// Renders computed gauges in the Prometheus text format.
pub fn render_gauges(series: &[GaugeSeries]) -> String {
    let mut registry = Registry::default();
    for s in series {
        let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        for (labels, value) in &s.samples {
            family.get_or_create(labels).set(*value);
        }
        registry.register(s.name, s.help, family);
    }
    let mut text = String::new();
    let _ = prometheus_text::encode(&mut text, &registry);
    text
}

/// Observable OpenTelemetry gauges reporting the last computed values of `names` (keep it alive).
#[derive(Debug)]
pub struct ObservedGauges {
    _gauges: Vec<ObservableGauge<f64>>,
}

/// Registers an observable gauge for each of `names` (name, help) that reports the samples of the series of that
/// name found in `last` when the exporter collects.
pub fn observe_gauges(
    meter: &Meter,
    names: &[(&'static str, &'static str)],
    last: Arc<Mutex<Vec<GaugeSeries>>>,
) -> ObservedGauges {
    let gauges = names
        .iter()
        .map(|&(name, help)| {
            let last = last.clone();
            meter
                .f64_observable_gauge(name)
                .with_description(help)
                .with_callback(move |observer| {
                    let Ok(series) = last.lock() else { return };
                    for s in series.iter().filter(|s| s.name == name) {
                        for (labels, value) in &s.samples {
                            let attributes: Vec<KeyValue> =
                                labels.iter().map(|(k, v)| KeyValue::new(*k, v.clone())).collect();
                            observer.observe(*value, &attributes);
                        }
                    }
                })
                .build()
        })
        .collect();
    ObservedGauges { _gauges: gauges }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_histograms_and_gauges_render_as_prometheus_text() {
        let mut metrics = Metrics::new(None);
        let finished = metrics.counter("scrinalia_runs_finished", "Runs finished");
        let duration = metrics.histogram("scrinalia_run_duration_seconds", "Run duration", Buckets::RunDuration);
        let in_flight = metrics.gauge("scrinalia_runs_in_flight", "Runs in flight");
        finished.inc(&[("worker", "probe-1"), ("outcome", "succeeded")]);
        finished.inc(&[("worker", "probe-1"), ("outcome", "succeeded")]);
        duration.observe(&[("worker", "probe-1")], 0.7);
        in_flight.set(&[], 2);
        let cpu = metrics.float_counter("scrinalia_run_cpu_seconds", "CPU seconds");
        cpu.add(&[("worker", "probe-1")], 0.25);
        cpu.add(&[("worker", "probe-1")], 1.5);
        cpu.add(&[("worker", "probe-1")], -3.0);
        cpu.add(&[("worker", "probe-1")], f64::NAN);
        let text = metrics.render();
        for line in [
            "# TYPE scrinalia_runs_finished_total counter",
            "scrinalia_runs_finished_total{worker=\"probe-1\",outcome=\"succeeded\"} 2",
            "scrinalia_run_duration_seconds_bucket{worker=\"probe-1\",le=\"1\"} 1",
            "scrinalia_run_duration_seconds_count{worker=\"probe-1\"} 1",
            "scrinalia_runs_in_flight 2",
            "# TYPE scrinalia_run_cpu_seconds_total counter",
            "scrinalia_run_cpu_seconds_total{worker=\"probe-1\"} 1.75",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        let gauges = render_gauges(&[GaugeSeries {
            name: "scrinalia_daemons",
            help: "Daemons by state",
            samples: vec![(vec![("state", "active".to_owned())], 2.0)],
        }]);
        assert!(gauges.contains("scrinalia_daemons{state=\"active\"} 2"), "{gauges}");
    }
}
