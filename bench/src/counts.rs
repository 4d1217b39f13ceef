//! What a round of queue counts costs: `--daemons` real daemons (1, then 3; each set on a fresh, empty database
//! that the daemons migrate themselves, so that a daemon of another version than the bench can be measured) over
//! a catalogue of `--workers` (9) workers, queue counts every `--interval` (5) s, measured over `--seconds` (30)
//! from the moment the daemons are started (so a daemon's start-up work, its migrations and such as a `describe`
//! of each worker, falls in the window).
//!
//! Each worker is `/bin/sh <scratch>/counts-worker.sh <worker>`: the daemon appends the verb and its flags. The
//! script appends `<verb> <worker> start <epoch seconds.nanos> <pid>` to a log, and the same with `end` when it
//! is done; every verb it knows (`count-pending`, `describe`, `check`) takes `--count-ms` (300 ms: a Python
//! worker importing spaCy) and answers as the protocol says; any other verb exits 2 at once. The figures come from
//! that log, for the processes started within the window (each one's end is waited for):
//!
//! - processes started per verb, in all and per round (the total over `seconds / interval`);
//! - process-seconds: the sum of end − start over those processes;
//! - a round's wall time: the `count-pending` starts, sorted, are cut into rounds wherever two consecutive starts
//!   are more than half an interval apart; a round lasts from its first start to its last end;
//! - the most `count-pending` processes running at once for one worker, and for all workers together.
//!
//! The configuration holds only the settings the bench needs (the database, run logs, the two queue-count
//! settings and the workers; [`write_only`]): each of them exists in the daemons before and after queue counts
//! took leases, so the same bench measures both.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail, ensure};
use clap::{Args, ValueEnum};
use scrinalia_testkit::{ConfigFile, Kind, Process, config::worker};
use tokio::time::Instant;

use crate::{
    env::{Env, with_empty_db, write_only},
    report::{Figure, Samples, number},
};

/// Options of `scrinalia-bench counts`.
#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// How many daemons, one measurement per number (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 3])]
    pub daemons: Vec<usize>,
    /// Workers in the catalogue.
    #[arg(long, default_value_t = 9)]
    pub workers: usize,
    /// `daemon.queue_count_interval_seconds`.
    #[arg(long, default_value_t = 5)]
    pub interval: u64,
    /// Length of the measurement window, in seconds, from the daemons' start.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// How long one `count-pending` (and any other verb the script knows) takes, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub count_ms: u64,
    /// The databases, one measurement per backend (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Backend::Postgres, Backend::Sqlite])]
    pub backends: Vec<Backend>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            daemons: vec![1, 3],
            workers: 9,
            interval: 5,
            seconds: 30,
            count_ms: 300,
            backends: vec![Backend::Postgres, Backend::Sqlite],
        }
    }
}

impl Opts {
    /// The smallest size that still runs every part (`all --quick`): a check that the bench works, not a measure.
    pub fn quick() -> Self {
        Self {
            daemons: vec![1],
            workers: 2,
            interval: 1,
            // The window starts with the daemons' start: room for a slow machine to start them.
            seconds: 4,
            count_ms: 50,
            backends: vec![Backend::Postgres, Backend::Sqlite],
        }
    }
}

/// A database the daemons share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// A fresh database on the `--pg` server.
    Postgres,
    /// A fresh SQLite file in the scratch folder.
    Sqlite,
}

impl Backend {
    fn kind(self) -> Kind {
        match self {
            Self::Postgres => Kind::Postgres,
            Self::Sqlite => Kind::Sqlite,
        }
    }
}

const BENCH: &str = "counts";
/// The verbs with a row each, even when no process ran them (the daemon before leases runs only
/// `count-pending`).
const VERBS: [&str; 3] = ["count-pending", "describe", "check"];

/// Measures each backend with each number of daemons.
pub async fn run(env: &Env, opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    ensure!(opts.interval > 0 && opts.seconds >= opts.interval, "--seconds must be at least --interval (> 0)");
    ensure!(opts.workers > 0 && opts.daemons.iter().all(|&d| d > 0), "--workers and --daemons must be above 0");
    let mut figures = Vec::new();
    for backend in &opts.backends {
        for &daemons in &opts.daemons {
            let kind = backend.kind();
            let dir = env.folder(&format!("counts-{}-{daemons}", kind.name().to_lowercase()))?;
            let verbs =
                with_empty_db(env, kind, &dir, async |url| measure(env, url, kind, &dir, daemons, opts).await).await?;
            figures.extend(describe(kind.name(), daemons, opts, &verbs));
        }
    }
    Ok(figures)
}

/// One process of the worker script, from its log.
#[derive(Debug, Clone, PartialEq)]
struct Verb {
    verb: String,
    worker: String,
    /// Seconds since the epoch.
    start: f64,
    /// Seconds since the epoch; `None` if it never said it ended.
    end: Option<f64>,
}

impl Verb {
    fn seconds(&self) -> f64 {
        self.end.map_or(0.0, |end| end - self.start)
    }
}

/// What one measurement saw.
struct Seen {
    /// The processes started within the window.
    verbs: Vec<Verb>,
    /// `count-pending failed` warnings in the daemons' logs.
    failed: usize,
}

async fn measure(env: &Env, url: &str, kind: Kind, dir: &Path, daemons: usize, opts: &Opts) -> anyhow::Result<Seen> {
    let log = dir.join("verbs.log");
    let script = dir.join("counts-worker.sh");
    std::fs::write(&script, script_text(&log, opts.count_ms)).context("write the worker script")?;
    check_script(&script, &log).await?;
    let config = dir.join("bench.toml");
    let script_arg = script.display().to_string();
    let names: Vec<String> = (1..=opts.workers).map(|i| format!("worker-{i}")).collect();
    let file = ConfigFile::new(url, dir)
        .with(|f| {
            f.daemon.queue_count_interval_seconds = opts.interval;
            // A count never times out here, unless it takes far longer than it should.
            f.daemon.queue_count_timeout_seconds = (opts.count_ms / 1000 + 10).max(30);
        })
        .workers(names.iter().map(|name| worker(name, &["/bin/sh", &script_arg, name])));
    write_only(
        &file,
        &[
            ("database", &["url"]),
            ("object_store", &["kind", "path"]),
            ("daemon", &["queue_count_interval_seconds", "queue_count_timeout_seconds"]),
            ("workers", &["name", "command"]),
        ],
        &config,
    )?;
    let program = env.bin("scrinalia-daemon");
    let config_arg = config.display().to_string();
    let window = Duration::from_secs(opts.seconds);
    let from = epoch_seconds();
    let started = Instant::now();
    let mut processes = (0..daemons)
        .map(|i| Process::start(&program, &format!("daemon-{i}"), dir, &["--config", &config_arg], &[]))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for process in &mut processes {
        process.wait_for("daemon started", Duration::from_secs(60)).await?;
    }
    let exe: Vec<PathBuf> =
        processes.iter().filter_map(|p| std::fs::read_link(format!("/proc/{}/exe", p.pid())).ok()).collect();
    eprintln!(
        "counts: {} on {}, {} workers, counts every {} s, {} ms each: measuring {} s; daemon binary {}",
        plural(daemons, "daemon"),
        kind.name(),
        opts.workers,
        opts.interval,
        opts.count_ms,
        opts.seconds,
        exe.first().map_or_else(|| program.display().to_string(), |p| p.display().to_string())
    );
    tokio::time::sleep_until(started + window).await;
    let until = from + window.as_secs_f64();
    // The processes started within the window are waited for (a count the daemon stops would never end).
    let deadline = Instant::now() + Duration::from_millis(opts.count_ms) + Duration::from_secs(10);
    let verbs = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let verbs: Vec<Verb> = parse(&text).into_iter().filter(|v| v.start >= from && v.start < until).collect();
        if verbs.iter().all(|v| v.end.is_some()) || Instant::now() >= deadline {
            break verbs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let failed = processes.iter().map(|p| p.output().matches("count-pending failed").count()).sum();
    for process in processes {
        process.stop(Duration::from_secs(10)).await;
    }
    if verbs.is_empty() {
        bail!("no worker process started within {} s; see the daemons' logs in {}", opts.seconds, dir.display());
    }
    Ok(Seen { verbs, failed })
}

/// The worker: logs its start and end, takes `count_ms` for every verb it knows, answers as the protocol says.
fn script_text(log: &Path, count_ms: u64) -> String {
    let sleep = format!("{}.{:03}", count_ms / 1000, count_ms % 1000);
    let log = log.display();
    format!(
        r#"#!/bin/sh
# scrinalia-bench counts: a worker whose every verb only takes time.
# Usage: counts-worker.sh <worker> <verb> [flags...]; the flags are ignored.
log='{log}'
worker="$1"
verb="${{2:-none}}"
stamp() {{ echo "$verb $worker $1 $(date +%s.%N) $$" >> "$log"; }}
stamp start
case "$verb" in
  describe) answer='{{"engine":null,"preset":null,"model":null,"endpoint":null}}' ;;
  check) answer='{{"ready":true}}' ;;
  count-pending) answer='{{"pending":1}}' ;;
  *) stamp end; echo "unknown verb: $verb" >&2; exit 2 ;;
esac
sleep {sleep}
echo "$answer"
stamp end
"#
    )
}

/// Runs the script as the daemon will (with flags after the verb), then empties its log.
async fn check_script(script: &Path, log: &Path) -> anyhow::Result<()> {
    for (verb, status, answer) in [
        ("count-pending", Some(0), r#"{"pending":1}"#),
        ("describe", Some(0), r#"{"engine":null,"preset":null,"model":null,"endpoint":null}"#),
        ("check", Some(0), r#"{"ready":true}"#),
        ("no-such-verb", Some(2), ""),
    ] {
        let out = tokio::process::Command::new("/bin/sh")
            .arg(script)
            .args(["worker-0", verb, "--engine", "e", "--batch-size", "3"])
            .output()
            .await
            .context("run the worker script")?;
        let said = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.code() == status && said.trim() == answer,
            "the worker script answered {verb} with {said:?} ({}); stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(log).context("the worker script writes its log")?;
    let verbs = parse(&text);
    ensure!(verbs.len() == 4 && verbs.iter().all(|v| v.end.is_some()), "the worker script's log reads {text:?}");
    std::fs::remove_file(log).context("empty the worker script's log")?;
    Ok(())
}

/// The script's log: a start and an end line per process, matched by pid.
fn parse(text: &str) -> Vec<Verb> {
    let mut verbs: Vec<Verb> = Vec::new();
    let mut open: HashMap<&str, usize> = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [verb, worker, what, at, pid] = fields[..] else { continue };
        let Ok(at) = at.parse::<f64>() else { continue };
        match what {
            "start" => {
                open.insert(pid, verbs.len());
                verbs.push(Verb { verb: verb.to_owned(), worker: worker.to_owned(), start: at, end: None });
            }
            "end" => {
                if let Some(i) = open.remove(pid) {
                    verbs[i].end = Some(at);
                }
            }
            _ => {}
        }
    }
    verbs
}

/// A round of counts: its processes, its first start, its last end.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Round {
    processes: usize,
    first_start: f64,
    last_end: f64,
}

impl Round {
    fn wall_ms(&self) -> f64 {
        (self.last_end - self.first_start) * 1000.0
    }
}

/// Cuts `count-pending` processes into rounds: sorted by start, a round begins at every start that comes more
/// than half an interval after the one before.
fn rounds(counts: &[&Verb], interval: f64) -> Vec<Round> {
    let mut sorted: Vec<&Verb> = counts.to_vec();
    sorted.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut out: Vec<Round> = Vec::new();
    let mut previous = f64::NEG_INFINITY;
    for v in sorted {
        let end = v.end.unwrap_or(v.start);
        match out.last_mut() {
            Some(round) if v.start - previous <= interval / 2.0 => {
                round.processes += 1;
                round.last_end = round.last_end.max(end);
            }
            _ => out.push(Round { processes: 1, first_start: v.start, last_end: end }),
        }
        previous = v.start;
    }
    out
}

/// The most processes running at the same time (one that never said it ended runs to the end).
fn most_at_once<'a>(verbs: impl IntoIterator<Item = &'a Verb>) -> usize {
    let mut events: Vec<(f64, i32)> = Vec::new();
    for v in verbs {
        events.push((v.start, 1));
        events.push((v.end.unwrap_or(f64::INFINITY), -1));
    }
    // At the same instant an end comes before a start: back to back is not at once.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0_i32, 0_i32);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

fn describe(backend: &'static str, daemons: usize, opts: &Opts, seen: &Seen) -> Vec<Figure> {
    let verbs = &seen.verbs;
    let nominal = opts.seconds as f64 / opts.interval as f64;
    let setup = format!("{}, {} workers", plural(daemons, "daemon"), opts.workers);
    let window = format!("in {} s", opts.seconds);
    let mut by_verb: BTreeMap<&str, Vec<&Verb>> = VERBS.iter().map(|v| (*v, Vec::new())).collect();
    for v in verbs {
        by_verb.entry(v.verb.as_str()).or_default().push(v);
    }
    let unfinished = verbs.iter().filter(|v| v.end.is_none()).count();
    let mut figures = Vec::new();
    let order = VERBS.iter().copied().chain(by_verb.keys().copied().filter(|v| !VERBS.contains(v)).collect::<Vec<_>>());
    for verb in order {
        let n = by_verb.get(verb).map_or(0, Vec::len);
        let mut detail = format!("{n} {window}");
        if verb == "count-pending" {
            detail = format!(
                "{n} in {} s from the daemons' start (counts every {} s: {} rounds; {} ms a verb)",
                opts.seconds,
                opts.interval,
                number(nominal),
                opts.count_ms
            );
        }
        if verb == "count-pending" && seen.failed > 0 {
            detail.push_str(&format!(" · {} `count-pending failed` in the daemons' logs", seen.failed));
        }
        figures.push(
            Figure::info(
                BENCH,
                backend,
                format!("{setup}: `{verb}` processes a round"),
                n as f64 / nominal,
                "processes",
            )
            .detail(detail),
        );
    }
    let total: f64 = verbs.iter().map(Verb::seconds).sum();
    let per_verb: Vec<String> = by_verb
        .iter()
        .filter(|(_, vs)| !vs.is_empty())
        .map(|(verb, vs)| format!("{verb} {} s", number(vs.iter().map(|v| v.seconds()).sum())))
        .collect();
    let mut detail = format!("{} s {window}: {}", number(total), per_verb.join(", "));
    if unfinished > 0 {
        detail.push_str(&format!(" · {unfinished} never ended"));
    }
    figures.push(
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: process-seconds a round (end − start, all verbs)"),
            total / nominal,
            "s",
        )
        .detail(detail),
    );
    let counts = by_verb.get("count-pending").cloned().unwrap_or_default();
    let found = rounds(&counts, opts.interval as f64);
    let walls = Samples::from_ms(found.iter().map(Round::wall_ms));
    let each: Vec<String> = found.iter().map(|r| format!("{} ({})", number(r.wall_ms()), r.processes)).collect();
    figures.push(
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: a round's wall time p50 (first `count-pending` start → last end)"),
            walls.p50(),
            "ms",
        )
        .detail(format!(
            "max {} ms · {} rounds (cut where starts are > {} s apart); each in ms (processes): {}",
            number(walls.max()),
            found.len(),
            number(opts.interval as f64 / 2.0),
            each.join(", ")
        )),
    );
    let mut per_worker: BTreeMap<&str, Vec<&Verb>> = BTreeMap::new();
    for v in &counts {
        per_worker.entry(v.worker.as_str()).or_default().push(v);
    }
    let worst = per_worker.values().map(|vs| most_at_once(vs.iter().copied())).max().unwrap_or(0);
    let workers_at = per_worker.iter().filter(|(_, vs)| most_at_once(vs.iter().copied()) == worst).count();
    figures.push(
        Figure::info(
            BENCH,
            backend,
            format!("{setup}: most `count-pending` at once for one worker"),
            worst as f64,
            "processes",
        )
        .detail(format!("{workers_at} of {} workers reached it", per_worker.len())),
    );
    figures.push(Figure::info(
        BENCH,
        backend,
        format!("{setup}: most `count-pending` at once, all workers"),
        most_at_once(counts.iter().copied()) as f64,
        "processes",
    ));
    figures
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 { format!("{n} {what}") } else { format!("{n} {what}s") }
}

fn epoch_seconds() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb(worker: &str, start: f64, end: f64) -> Verb {
        Verb { verb: "count-pending".into(), worker: worker.into(), start, end: Some(end) }
    }

    #[test]
    fn the_log_is_matched_by_pid() {
        let text = "count-pending worker-1 start 10.5 7\ndescribe worker-2 start 10.6 8\n\
                    count-pending worker-1 end 10.8 7\nbroken line\ncheck worker-3 start 11.0 9\n";
        let verbs = parse(text);
        assert_eq!(verbs.len(), 3);
        assert_eq!(verbs[0], verb("worker-1", 10.5, 10.8));
        assert_eq!((verbs[1].verb.as_str(), verbs[1].end), ("describe", None));
        assert_eq!(verbs[2].worker, "worker-3");
    }

    #[test]
    fn rounds_are_cut_at_gaps_of_half_an_interval() {
        let a = [verb("a", 0.0, 0.3), verb("b", 0.05, 0.35), verb("a", 5.0, 5.3), verb("b", 5.4, 5.9)];
        let refs: Vec<&Verb> = a.iter().collect();
        let found = rounds(&refs, 5.0);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].processes, 2);
        assert!((found[0].wall_ms() - 350.0).abs() < 1e-6);
        assert!((found[1].wall_ms() - 900.0).abs() < 1e-6);
    }

    #[test]
    fn back_to_back_is_not_at_once() {
        let a = [verb("a", 0.0, 1.0), verb("a", 1.0, 2.0), verb("a", 1.5, 1.6), verb("a", 1.55, 3.0)];
        assert_eq!(most_at_once(&a[..2]), 1);
        assert_eq!(most_at_once(&a), 3);
    }
}
