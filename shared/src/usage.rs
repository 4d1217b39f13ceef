//! What a run cost: the rules for a worker's `usage` line (cumulative, the last accepted one wins) and for the
//! figures recorded on the run's row when it ends (docs/worker-protocol.md, "Usage"). Pure, so the daemon's loop
//! only hands lines and measurements over.

use serde_json::Value;

pub use scrinalia_wire::{ReportedUsage, RunUsage, choice::limits::size_text};

/// The figures the daemon measured of a run's processes with `getrusage(RUSAGE_CHILDREN)` in its supervisor:
/// the worker and the descendants it waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rusage {
    /// User CPU, in microseconds.
    pub user_us: u64,
    /// System CPU, in microseconds.
    pub system_us: u64,
    /// The largest single process's peak resident set, in KiB (Linux's `ru_maxrss`).
    pub max_rss_kib: u64,
}

/// Checks a `usage` line's value: an object of `tokens_in` and `tokens_out` (whole numbers), `gpu_seconds` and
/// `cost` (numbers), each at least 0, and `currency` (three capital letters, required with a cost). Refused
/// with a sentence that names the key.
pub fn parse(value: &Value) -> Result<ReportedUsage, String> {
    if !value.is_object() {
        return Err("a usage line's value must be an object, such as {\"tokens_in\": 1200}".into());
    }
    let usage: ReportedUsage = serde_json::from_value(value.clone()).map_err(|e| {
        let text = e.to_string();
        let text = text.split(" at line").next().unwrap_or(&text).to_owned();
        format!("a usage line was refused: {text} (known keys: tokens_in, tokens_out, gpu_seconds, cost, currency)")
    })?;
    for (key, number) in [("gpu_seconds", usage.gpu_seconds), ("cost", usage.cost)] {
        if number.is_some_and(|n| !n.is_finite() || n < 0.0) {
            return Err(format!("a usage line was refused: {key} must be a number of at least 0"));
        }
    }
    if let Some(currency) = &usage.currency
        && !(currency.len() == 3 && currency.bytes().all(|b| b.is_ascii_uppercase()))
    {
        return Err(format!("a usage line was refused: currency {currency:?} is not a three-letter code such as EUR"));
    }
    if usage.cost.is_some() && usage.currency.is_none() {
        return Err("a usage line was refused: a cost needs its currency, such as \"currency\": \"EUR\"".into());
    }
    Ok(usage)
}

/// What a run's cgroup counted of its whole process tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeCounters {
    /// `cgroup v1` or `cgroup v2`.
    pub measured_by: &'static str,
    /// The tree's CPU, in microseconds.
    pub cpu_us: Option<u64>,
    /// The tree's peak memory, in bytes (v1: page cache included).
    pub peak_bytes: Option<u64>,
}

/// The usage recorded on a run's row: its wall time, the CPU and peak memory measured (the cgroup's figures of
/// the whole tree when the run had one, else `getrusage`'s), and what the worker reported last.
pub fn of_run(
    wall_ms: u64,
    measured: Option<Rusage>,
    tree: Option<TreeCounters>,
    reported: Option<ReportedUsage>,
) -> RunUsage {
    let seconds = |us: u64| us as f64 / 1_000_000.0;
    let rusage = RunUsage {
        wall_seconds: wall_ms as f64 / 1000.0,
        measured_by: "rusage".to_owned(),
        cpu_user_seconds: measured.map(|m| seconds(m.user_us)),
        cpu_system_seconds: measured.map(|m| seconds(m.system_us)),
        cpu_seconds: measured.map(|m| seconds(m.user_us + m.system_us)),
        peak_rss_largest_process_bytes: measured.map(|m| m.max_rss_kib * 1024),
        peak_memory_bytes: None,
        reported,
    };
    match tree {
        None => rusage,
        // The tree's CPU replaces the waited-for processes' (the split into user and system is rusage's).
        Some(tree) => RunUsage {
            measured_by: tree.measured_by.to_owned(),
            cpu_seconds: tree.cpu_us.map(seconds).or(rusage.cpu_seconds),
            cpu_user_seconds: None,
            cpu_system_seconds: None,
            peak_memory_bytes: tree.peak_bytes,
            ..rusage
        },
    }
}

/// The sentence of a run its memory limit ended: "exceeded its memory limit of 4 GiB (peak 4.0 GiB)".
pub fn out_of_memory(limit_bytes: u64, peak_bytes: Option<u64>) -> String {
    let peak = |bytes: u64| {
        let (unit, size) = if bytes >= 1 << 30 { ("GiB", 1u64 << 30) } else { ("MiB", 1 << 20) };
        format!(" (peak {:.1} {unit})", bytes as f64 / size as f64)
    };
    format!("exceeded its memory limit of {}{}", size_text(limit_bytes), peak_bytes.map(peak).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_usage_line_names_what_it_refuses() {
        let ok = parse(&json!({"tokens_in": 1200, "tokens_out": 300, "cost": 0.0042, "currency": "EUR"}));
        assert_eq!(ok.map(|u| (u.tokens_in, u.currency)), Ok((Some(1200), Some("EUR".to_owned()))));
        let refused = |v: Value| parse(&v).expect_err("refused");
        assert!(refused(json!({"tokens": 3})).contains("unknown field `tokens`"), "{}", refused(json!({"tokens": 3})));
        assert!(refused(json!({"tokens_in": -1})).contains("tokens_in"), "{}", refused(json!({"tokens_in": -1})));
        assert!(refused(json!({"cost": -0.5, "currency": "EUR"})).contains("cost must be a number of at least 0"));
        assert!(refused(json!({"cost": 1.0})).contains("a cost needs its currency"));
        assert!(refused(json!({"currency": "euro"})).contains("not a three-letter code"));
        assert!(refused(json!([1])).contains("must be an object"));
    }

    #[test]
    fn the_recorded_usage_says_how_it_was_measured() {
        let measured = Rusage { user_us: 1_500_000, system_us: 250_000, max_rss_kib: 2048 };
        let usage = of_run(2500, Some(measured), None, None);
        assert_eq!((usage.wall_seconds, usage.cpu_seconds, usage.measured_by.as_str()), (2.5, Some(1.75), "rusage"));
        assert_eq!((usage.peak_rss_largest_process_bytes, usage.peak_memory_bytes), (Some(2 * 1024 * 1024), None));
        let tree = TreeCounters { measured_by: "cgroup v1", cpu_us: Some(3_000_000), peak_bytes: Some(1 << 30) };
        let usage = of_run(2500, Some(measured), Some(tree), None);
        assert_eq!((usage.cpu_seconds, usage.peak_memory_bytes), (Some(3.0), Some(1 << 30)), "the tree's figures");
        assert_eq!((usage.measured_by.as_str(), usage.cpu_user_seconds), ("cgroup v1", None));
        assert_eq!(usage.peak_rss_largest_process_bytes, Some(2 * 1024 * 1024), "still named for what it is");
        let unmeasured =
            of_run(10, None, None, Some(ReportedUsage { tokens_out: Some(7), ..ReportedUsage::default() }));
        assert_eq!((unmeasured.cpu_seconds, unmeasured.reported.and_then(|r| r.tokens_out)), (None, Some(7)));
    }

    #[test]
    fn an_out_of_memory_end_says_the_limit_as_written_and_the_peak() {
        assert_eq!(out_of_memory(4 << 30, Some(4 << 30)), "exceeded its memory limit of 4 GiB (peak 4.0 GiB)");
        assert_eq!(
            out_of_memory(128 << 20, Some(134_000_000)),
            "exceeded its memory limit of 128 MiB (peak 127.8 MiB)"
        );
        assert_eq!(out_of_memory(1536 << 20, None), "exceeded its memory limit of 1.5 GiB");
    }
}
