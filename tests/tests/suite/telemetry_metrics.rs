//! `/metrics` with the real binaries: the API's and the daemon's answers parse as the Prometheus text format
//! (version 0.0.4, checked by the strict parser below), and they move after a run: on the daemon, runs started
//! and finished by worker and outcome, the run-duration and queue-wait histograms, lease renewals (the run
//! lasts longer than a third of the lease) and the run's usage by worker (CPU seconds, tokens, cost); on the API, daemons alive and runs in flight from the database. A run
//! whose daemon died is counted by the daemon that recovered it. Every metric the shipped alert rules read is
//! exported by one of the two.

use std::{collections::BTreeMap, time::Duration};

use scrinalia_shared::RunState;
use scrinalia_tests::{
    TestDb, backend_tests,
    daemon_harness::{Setup, wait_finished, wait_started},
    eventually, free_port,
};
use serde_json::{Value, json};
use uuid::Uuid;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: each family's type and help, and every sample in order.
#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the sample `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.samples.iter().find(|s| s.name == name && s.labels == wanted).map(|s| s.value)
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    !s.starts_with("__")
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ if s.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')) => {
            s.parse().map_err(|_| format!("{s:?} is not a number"))
        }
        _ => Err(format!("{s:?} is not a number")),
    }
}

/// `{a="x",b="y"}` (after the name) → labels and the rest of the line.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("labels must start with {")?;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("a label without =")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("{name:?} is not a label name"));
        }
        rest = rest[eq + 1..].strip_prefix('"').ok_or("a label value must be quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in a label value")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err("a raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
                None => return Err("an unterminated label value".into()),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name:?} twice"));
        }
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("labels must be separated by commas".into());
        }
    }
}

/// The family a sample belongs to, given the declared types.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        (types.get(base).map(String::as_str) == Some("histogram")).then_some(base)
    })
}

/// Parses the Prometheus text format strictly: every sample's family has a `# TYPE` before it, a family's samples
/// are together, names, labels, escapes and values are valid, nothing is repeated, counters are not negative and
/// histograms are cumulative with a `+Inf` bucket equal to their `_count` and a `_sum`.
fn parse(text: &str) -> Result<Exposition, String> {
    let mut expo = Exposition::default();
    if !text.ends_with('\n') {
        return Err("the text must end with a newline".into());
    }
    let mut done_families: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let fail = |why: String| format!("line {}: {why}: {line:?}", i + 1);
        if line.contains('\r') {
            return Err(fail("a carriage return".into()));
        }
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !is_metric_name(name) {
                        return Err(fail("a bad metric name".into()));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(fail(format!("unknown type {kind:?}")));
                    }
                    if expo.types.insert(name.to_owned(), kind.to_owned()).is_some() {
                        return Err(fail("a second TYPE".into()));
                    }
                    if expo.samples.iter().any(|s| family_of(&s.name, &expo.types) == Some(name)) {
                        return Err(fail("TYPE after the family's samples".into()));
                    }
                }
                (Some("HELP"), Some(name), help) => {
                    if !is_metric_name(name) {
                        return Err(fail("a bad metric name".into()));
                    }
                    if expo.helps.insert(name.to_owned(), help.unwrap_or_default().to_owned()).is_some() {
                        return Err(fail("a second HELP".into()));
                    }
                }
                (Some("TYPE" | "HELP"), ..) => return Err(fail("an incomplete TYPE or HELP".into())),
                _ => {}
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| fail("no value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(fail("a bad metric name".into()));
        }
        let (labels, rest) = match line[name_end..].starts_with('{') {
            true => parse_labels(&line[name_end..]).map_err(fail)?,
            false => (BTreeMap::new(), &line[name_end..]),
        };
        let mut fields = rest.strip_prefix(' ').ok_or_else(|| fail("no space before the value".into()))?.split(' ');
        let value = parse_value(fields.next().unwrap_or_default()).map_err(fail)?;
        if let Some(timestamp) = fields.next() {
            timestamp.parse::<i64>().map_err(|_| fail("a bad timestamp".into()))?;
        }
        if fields.next().is_some() {
            return Err(fail("trailing text".into()));
        }
        let family = family_of(name, &expo.types).ok_or_else(|| fail("a sample without a TYPE".into()))?.to_owned();
        if current.as_deref() != Some(&family) {
            if done_families.contains(&family) {
                return Err(fail("the family's samples are not together".into()));
            }
            if let Some(previous) = current.replace(family.clone()) {
                done_families.push(previous);
            }
        }
        let kind = expo.types[&family].as_str();
        if kind == "counter" && (value.is_nan() || value < 0.0) {
            return Err(fail("a negative counter".into()));
        }
        if kind == "histogram" && name.ends_with("_bucket") && !labels.contains_key("le") {
            return Err(fail("a bucket without le".into()));
        }
        let sample = Sample { name: name.to_owned(), labels, value };
        if expo.samples.iter().any(|s| s.name == sample.name && s.labels == sample.labels) {
            return Err(fail("a repeated sample".into()));
        }
        expo.samples.push(sample);
    }
    check_histograms(&expo)?;
    Ok(expo)
}

fn check_histograms(expo: &Exposition) -> Result<(), String> {
    for (family, _) in expo.types.iter().filter(|(_, k)| *k == "histogram") {
        let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for s in expo.samples.iter().filter(|s| s.name == format!("{family}_bucket")) {
            let mut key = s.labels.clone();
            let le = parse_value(&key.remove("le").unwrap_or_default())?;
            series.entry(key).or_default().push((le, s.value));
        }
        for (labels, buckets) in series {
            let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            if !buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1) {
                return Err(format!("{family}{labels:?}: buckets are not increasing and cumulative: {buckets:?}"));
            }
            let inf = buckets.last().filter(|(le, _)| le.is_infinite()).map(|(_, n)| *n);
            let count = expo.value(&format!("{family}_count"), &pairs);
            if inf.is_none() || inf != count {
                return Err(format!("{family}{labels:?}: the +Inf bucket {inf:?} is not the count {count:?}"));
            }
            if expo.value(&format!("{family}_sum"), &pairs).is_none() {
                return Err(format!("{family}{labels:?}: no _sum"));
            }
        }
    }
    Ok(())
}

#[test]
fn the_parser_refuses_what_prometheus_would_refuse() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{w=\"x\\\"y\"} 1\n# TYPE h histogram\n\
                h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n";
    let expo = parse(good).expect("valid");
    assert_eq!(expo.value("a_total", &[("w", "x\"y")]), Some(1.0));
    for bad in [
        "a 1\n",                                                                                   // no TYPE
        "# TYPE a gauge\na{b=\"c} 1\n",                                                            // unterminated
        "# TYPE a gauge\na{b=\"\\t\"} 1\n",                                                        // bad escape
        "# TYPE a gauge\na one\n",                                                                 // not a number
        "# TYPE a gauge\na 1",                                                                     // no final newline
        "# TYPE a gauge\na 1\na 2\n",                                                              // repeated
        "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 1\n",                                // not together
        "# TYPE a counter\na -1\n",                                                                // negative counter
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // not cumulative
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", // +Inf is not the count
        "# TYPE a gauge\na{__x=\"1\"} 1\n",                                  // reserved label
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}

backend_tests!(metrics_of_both_processes_move_after_a_run);

async fn scrape(client: &reqwest::Client, url: &str) -> Exposition {
    let response = client.get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(response.status(), reqwest::StatusCode::OK, "GET {url}");
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{url}: Content-Type {content_type:?}");
    let text = response.text().await.expect("the body");
    parse(&text).unwrap_or_else(|e| panic!("{url} is not valid Prometheus text: {e}\n{text}"))
}

/// A daemon and an API over one test setup, each serving `/metrics` once they answer there (the daemon on a port
/// of its own); worker `fresh` has a freshness target, so that the freshness gauges are exported too.
pub(crate) struct Exporters {
    pub(crate) daemon: scrinalia_testkit::process::Process,
    pub(crate) api: scrinalia_testkit::process::Process,
    pub(crate) api_port: u16,
    pub(crate) daemon_url: String,
    pub(crate) api_url: String,
    pub(crate) client: reqwest::Client,
}

pub(crate) async fn start_exporters(db: &TestDb, fresh: usize) -> Exporters {
    let daemon_port = free_port();
    let config = Setup::config(db, |d| d.metrics_listen = Some(([127, 0, 0, 1], daemon_port).into()))
        .with(|f| f.workers[fresh].fresh_within_seconds = Some(86_400));
    let setup = Setup::with(db, config);
    let daemon = setup.start_daemon("daemon", &[]);
    let api_port = free_port();
    let api_listen = format!("127.0.0.1:{api_port}");
    let config = setup.config.display().to_string();
    let api = scrinalia_tests::start(
        "scrinalia-api",
        "api",
        &setup.dir,
        &["--config", &config, "serve"],
        &[("SCRINALIA__API__LISTEN", &api_listen), ("SCRINALIA__AUTH__ANONYMOUS_ROLE", "operator")],
    );
    let (daemon_url, api_url) =
        (format!("http://127.0.0.1:{daemon_port}/metrics"), format!("http://127.0.0.1:{api_port}/metrics"));
    let client = reqwest::Client::new();
    for (process, url) in [(&daemon, &daemon_url), (&api, &api_url)] {
        eventually(
            Duration::from_secs(30),
            &format!("{} to serve /metrics:\n{}", process.name, process.output()),
            || {
                let request = client.get(url).send();
                async move { request.await.ok().filter(|r| r.status().is_success()) }
            },
        )
        .await;
    }
    Exporters { daemon, api, api_port, daemon_url, api_url, client }
}

async fn metrics_of_both_processes_move_after_a_run(db: &TestDb) {
    // probe-2 has a freshness target, so that the freshness gauges an alert rule reads are exported.
    let Exporters { daemon, api: _api, api_port, daemon_url, api_url, client } = start_exporters(db, 1).await;
    eventually(Duration::from_secs(10), "the API to see the daemon alive", || async {
        (scrape(&client, &api_url).await.value("scrinalia_daemons_alive", &[]) == Some(1.0)).then_some(())
    })
    .await;

    let probe = [("worker", "probe-1")];
    let succeeded = [("worker", "probe-1"), ("outcome", "succeeded")];
    let renewed = [("worker", "probe-1"), ("result", "renewed")];
    let before = scrape(&client, &daemon_url).await;
    let at = |e: &Exposition, name: &str, labels: &[(&str, &str)]| e.value(name, labels).unwrap_or(0.0);
    assert_eq!(at(&before, "scrinalia_runs_finished_total", &succeeded), 0.0);
    assert_eq!(before.value("scrinalia_runs_in_flight", &[]), Some(0.0));
    assert_eq!(before.value("scrinalia_daemon_capacity", &[]), Some(3.0));

    // A run longer than a third of the 3 s lease: its lease is renewed at least once. Longer than the 5 s the API
    // keeps its `/metrics` text too, so that the API measures while it runs. It burns 200 ms of CPU in a
    // grandchild and reports tokens and a cost (its last usage line: 1200 in, 300 out, 0.0042 EUR).
    let run: Value = client
        .post(format!("http://127.0.0.1:{api_port}/api/workers/probe-1/runs"))
        .json(&json!({"options": {"duration_ms": 7000, "report_usage": true, "burn_cpu_ms": 200}}))
        .send()
        .await
        .expect("trigger")
        .json()
        .await
        .expect("the run");
    let id: Uuid = run["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no run: {run}"));
    eventually(Duration::from_secs(10), "both processes to show the run in flight", || async {
        let api_sees = scrape(&client, &api_url)
            .await
            .value("scrinalia_runs_in_flight", &[("worker", "probe-1"), ("state", "running")]);
        let daemon_sees = scrape(&client, &daemon_url).await.value("scrinalia_runs_in_flight", &[]);
        (api_sees == Some(1.0) && daemon_sees == Some(1.0)).then_some(())
    })
    .await;
    let done = wait_finished(&db.db.api, id, Duration::from_secs(30)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());

    let after = eventually(Duration::from_secs(5), "the daemon to count the finished run", || async {
        let after = scrape(&client, &daemon_url).await;
        (at(&after, "scrinalia_runs_finished_total", &succeeded) == 1.0).then_some(after)
    })
    .await;
    assert_eq!(
        at(&after, "scrinalia_runs_started_total", &probe) - at(&before, "scrinalia_runs_started_total", &probe),
        1.0
    );
    let durations = at(&after, "scrinalia_run_duration_seconds_count", &succeeded);
    assert_eq!(durations, 1.0, "one duration recorded");
    let seconds = at(&after, "scrinalia_run_duration_seconds_sum", &succeeded);
    assert!((6.9..25.0).contains(&seconds), "the run took about 7 s: {seconds}");
    assert_eq!(at(&after, "scrinalia_queue_wait_seconds_count", &probe), 1.0, "one queue wait recorded");
    let waited = at(&after, "scrinalia_queue_wait_seconds_sum", &probe);
    assert!((0.0..10.0).contains(&waited), "the request waited {waited} s");
    let renewals = at(&after, "scrinalia_lease_renewals_total", &renewed);
    assert!(renewals >= 1.0, "a 7 s run under a 3 s lease (renewed every 1 s) is renewed: {renewals}");
    assert_eq!(after.value("scrinalia_runs_in_flight", &[]), Some(0.0));
    // The run's usage, by worker: its CPU (the grandchild's counted), the tokens and the cost it reported.
    let cpu = at(&after, "scrinalia_run_cpu_seconds_total", &probe);
    assert!((0.15..30.0).contains(&cpu), "200 ms burnt in a grandchild: {cpu} s");
    let tokens =
        |direction| at(&after, "scrinalia_run_tokens_total", &[("worker", "probe-1"), ("direction", direction)]);
    assert_eq!((tokens("in"), tokens("out")), (1200.0, 300.0));
    assert_eq!(at(&after, "scrinalia_run_cost_total", &[("worker", "probe-1"), ("currency", "EUR")]), 0.0042);
    for name in ["scrinalia_run_cpu_seconds_total", "scrinalia_run_tokens_total", "scrinalia_run_cost_total"] {
        assert_eq!(after.types.get(name).map(String::as_str), Some("counter"), "{name}");
    }
    let info = after.samples.iter().find(|s| s.name == "scrinalia_daemon_info").expect("the daemon's info");
    assert_eq!(info.labels.get("daemon_id").map(String::as_str), done.daemon_id.map(|d| d.to_string()).as_deref());

    // The API measures again once its 5 s old text has expired.
    let api_after = eventually(Duration::from_secs(10), "the API to see the run ended", || async {
        let after = scrape(&client, &api_url).await;
        let running = after.value("scrinalia_runs_in_flight", &[("worker", "probe-1"), ("state", "running")]);
        (running == Some(0.0)).then_some(after)
    })
    .await;
    assert_eq!(api_after.value("scrinalia_daemons", &[("state", "active")]), Some(1.0));
    assert_eq!(api_after.value("scrinalia_runs_in_flight", &[("worker", "probe-1"), ("state", "running")]), Some(0.0));
    assert_eq!(api_after.value("scrinalia_queue_oldest_wait_seconds", &probe), Some(0.0));
    for (name, kind) in [("scrinalia_daemons", "gauge"), ("scrinalia_runs_in_flight", "gauge")] {
        assert_eq!(api_after.types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    assert_eq!(api_after.value("scrinalia_run_progress_age_seconds", &probe), Some(0.0), "no run of it runs");
    let fresh = [("worker", "probe-2")];
    assert_eq!(api_after.value("scrinalia_worker_freshness_breached", &fresh), Some(0.0), "nothing pending");

    // The shipped alert rules read only what the two processes export.
    let rules =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/prometheus/scrinalia-alerts.yml"))
            .expect("the shipped alert rules");
    let exported = |name: &str| [&after, &api_after].iter().any(|e| e.samples.iter().any(|s| s.name == name));
    let used = rules.split(|c: char| !(c.is_ascii_lowercase() || c == '_')).filter(|w| w.starts_with("scrinalia_"));
    for name in used {
        assert!(exported(name), "the alert rules read {name}, which neither process exports");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_run_is_counted_by_the_daemon_that_recovered_it() {
    let db = TestDb::postgres().await;
    let setup = Setup::new(&db, |_| {});
    let victim = setup.start_daemon("victim", &[]);
    let run = setup.request(&db.db.api, "probe-1", json!({"duration_ms": 60_000})).await;
    wait_started(&db.db.api, run.id, Duration::from_secs(10)).await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let rescuer = setup.start_daemon("rescuer", &[("SCRINALIA__DAEMON__METRICS_LISTEN", &listen)]);
    victim.signal(nix::sys::signal::Signal::SIGKILL);
    let done = wait_finished(&db.db.api, run.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, RunState::Interrupted, "{done:?}\n{}", rescuer.output());
    let client = reqwest::Client::new();
    let url = format!("http://{listen}/metrics");
    let after = eventually(Duration::from_secs(5), "the rescuer to count the recovered run", || async {
        let after = scrape(&client, &url).await;
        (after.value("scrinalia_runs_recovered_total", &[("worker", "probe-1")]) == Some(1.0)).then_some(after)
    })
    .await;
    let finished = after.samples.iter().filter(|s| s.name == "scrinalia_runs_finished_total").count();
    assert_eq!(finished, 0, "the rescuer ended no run of its own");
    db.cleanup().await;
}
