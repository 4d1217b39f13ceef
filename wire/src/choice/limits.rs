//! The limits of a worker's runs as the catalogue and an override write them (`memory_max`, `cpu_max`,
//! `stall_seconds`), and the checks that refuse a bad one with a sentence that names its key: the catalogue's
//! load and an override's change use the same ones, so they cannot disagree.
//!
//! `memory_max` is a size in **binary units only**: a whole number followed by `B`, `KiB`, `MiB`, `GiB` or `TiB`
//! (case and a space before the unit do not matter: `"4GiB"`, `"512 MiB"`), or a plain whole number of bytes
//! (`4294967296` or `"4294967296"`). Decimal or ambiguous units (`"2G"`, `"2GB"`) are refused with the binary
//! spelling to use, since tools disagree on whether `G` means 10⁹ or 2³⁰ bytes; fractions (`"1.5GiB"`) are
//! refused too (write `"1536MiB"`). At least 1 MiB.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of the memory limit.
pub const MEMORY_MAX: &str = "memory_max";
/// The key of the CPU limit.
pub const CPU_MAX: &str = "cpu_max";
/// The key of the stall watchdog.
pub const STALL_SECONDS: &str = "stall_seconds";

/// The smallest memory limit: below it no worker starts.
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;
/// The largest CPU limit, in cores.
pub const MAX_CPU: f64 = 1024.0;
/// The longest stall watchdog: a year.
pub const MAX_STALL_SECONDS: i64 = 365 * 86_400;

/// The binary units, smallest first.
const UNITS: [(&str, u64); 5] = [("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40)];

/// A memory limit as written (`"4GiB"`, `"512MiB"` or a whole number of bytes), kept as written so the audit
/// trail shows what the operator wrote; [`MemoryMax::bytes`] checks and reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryMax(pub Value);

impl MemoryMax {
    /// The limit in bytes, or why it is not one, as a sentence naming `memory_max`.
    pub fn bytes(&self) -> Result<u64, String> {
        let shown = self.0.to_string();
        let bytes = match &self.0 {
            Value::String(text) => parse_size(text)?,
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(bytes), _) => bytes,
                (None, Some(_)) => return Err(format!("{MEMORY_MAX} cannot be negative, not {shown}.")),
                (None, None) => return Err(format!("{MEMORY_MAX} must be a whole number of bytes, not {shown}.")),
            },
            _ => return Err(format!("{MEMORY_MAX} must be a size such as \"4GiB\" or \"512MiB\", not {shown}.")),
        };
        if bytes < MIN_MEMORY_BYTES {
            return Err(format!("{MEMORY_MAX} must be at least 1MiB, not {shown}."));
        }
        Ok(bytes)
    }
}

impl From<&str> for MemoryMax {
    fn from(text: &str) -> Self {
        Self(Value::String(text.to_owned()))
    }
}

/// Reads a size written with a binary unit, or a plain number of bytes; the error is a sentence naming
/// `memory_max`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let written = text.trim();
    let expected = || {
        format!(
            "{MEMORY_MAX} must be a whole number and a binary unit (B, KiB, MiB, GiB, TiB), such as \"4GiB\" or \
             \"512MiB\", or a whole number of bytes, not {text:?}."
        )
    };
    if written.starts_with('-') {
        return Err(format!("{MEMORY_MAX} cannot be negative, not {text:?}."));
    }
    let digits = written.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = written.split_at(digits);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(expected());
    }
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "{MEMORY_MAX} takes whole numbers: write {text:?} in a smaller unit, such as \"1536MiB\"."
        ));
    }
    let factor = if unit.is_empty() {
        1
    } else if let Some((_, factor)) = UNITS.iter().find(|(name, _)| name.eq_ignore_ascii_case(unit)) {
        *factor
    } else if let Some((name, _)) = UNITS[1..].iter().find(|(name, _)| {
        let letter = &name[..1];
        unit.eq_ignore_ascii_case(letter) || unit.eq_ignore_ascii_case(&format!("{letter}B"))
    }) {
        return Err(format!(
            "{MEMORY_MAX} takes binary units, and {unit:?} could mean either: write \"{number}{name}\" for \
             {number} × 2^{} bytes.",
            UNITS.iter().position(|(n, _)| n == name).unwrap_or(0) * 10
        ));
    } else {
        return Err(expected());
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .filter(|&bytes| i64::try_from(bytes).is_ok())
        .ok_or_else(|| format!("{MEMORY_MAX} is too large: {text:?}."))
}

/// A size for people: the largest binary unit it is a whole number of (`4 GiB`), else one decimal of the
/// largest unit it reaches (`1.5 GiB`).
pub fn size_text(bytes: u64) -> String {
    let Some(&(name, factor)) = UNITS.iter().rev().find(|(_, factor)| bytes >= *factor) else {
        return "0 B".to_owned();
    };
    if bytes.is_multiple_of(factor) {
        format!("{} {name}", bytes / factor)
    } else {
        format!("{:.1} {name}", bytes as f64 / factor as f64)
    }
}

/// What is wrong with a CPU limit, as a sentence naming `cpu_max`, if anything.
pub fn cpu_problem(cores: f64) -> Option<String> {
    if !cores.is_finite() {
        return Some(format!("{CPU_MAX} must be a number of cores, not {cores}."));
    }
    if cores <= 0.0 {
        return Some(format!("{CPU_MAX} must be more than 0 cores (0.5 is half a core), not {cores}."));
    }
    (cores > MAX_CPU).then(|| format!("{CPU_MAX} must be at most {MAX_CPU} cores, not {cores}."))
}

/// What is wrong with a stall watchdog, as a sentence naming `stall_seconds`, if anything.
pub fn stall_problem(seconds: i64) -> Option<String> {
    if seconds < 1 {
        return Some(format!("{STALL_SECONDS} must be at least 1 second, not {seconds}."));
    }
    (seconds > MAX_STALL_SECONDS)
        .then(|| format!("{STALL_SECONDS} must be at most {MAX_STALL_SECONDS} seconds (a year), not {seconds}."))
}

/// The checked stall watchdog in seconds.
pub fn stall_seconds(seconds: i64) -> Result<u64, String> {
    match stall_problem(seconds) {
        Some(problem) => Err(problem),
        None => u64::try_from(seconds).map_err(|_| format!("{STALL_SECONDS} must be at least 1 second.")),
    }
}

/// The checked CPU limit in cores.
pub fn cpu_max(cores: f64) -> Result<f64, String> {
    cpu_problem(cores).map_or(Ok(cores), Err)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bytes(value: Value) -> Result<u64, String> {
        MemoryMax(value).bytes()
    }

    #[test]
    fn sizes_take_binary_units_and_plain_bytes() {
        assert_eq!(bytes(json!("4GiB")), Ok(4 << 30));
        assert_eq!(bytes(json!("512MiB")), Ok(512 << 20));
        assert_eq!(bytes(json!("128 mib")), Ok(128 << 20), "case and a space do not matter");
        assert_eq!(bytes(json!("2TiB")), Ok(2 << 40));
        assert_eq!(bytes(json!("1048576")), Ok(1 << 20));
        assert_eq!(bytes(json!("2048KiB")), Ok(2 << 20));
        assert_eq!(bytes(json!("1073741824B")), Ok(1 << 30));
        assert_eq!(bytes(json!(4_294_967_296_u64)), Ok(4 << 30));
    }

    #[test]
    fn bad_sizes_are_refused_with_a_sentence_naming_the_key() {
        let refused = |value: Value, says: &str| {
            let error = bytes(value.clone()).expect_err(&value.to_string());
            assert!(error.starts_with("memory_max "), "{error}");
            assert!(error.contains(says), "{value}: {error}");
        };
        refused(json!("lots"), "a whole number and a binary unit");
        refused(json!("0"), "at least 1MiB, not \"0\"");
        refused(json!(0), "at least 1MiB, not 0");
        refused(json!("-1GiB"), "cannot be negative");
        refused(json!(-5), "cannot be negative, not -5");
        refused(json!(1.5), "whole number of bytes");
        refused(json!("1.5GiB"), "\"1536MiB\"");
        refused(json!("2G"), "write \"2GiB\"");
        refused(json!("2GB"), "write \"2GiB\"");
        refused(json!("4 gigs"), "a whole number and a binary unit");
        refused(json!("GiB"), "a whole number and a binary unit");
        refused(json!(true), "such as \"4GiB\"");
        refused(json!("99999999999TiB"), "too large");
        refused(json!("1KiB"), "at least 1MiB");
    }

    #[test]
    fn sizes_read_back_for_people() {
        assert_eq!(size_text(4 << 30), "4 GiB");
        assert_eq!(size_text(128 << 20), "128 MiB");
        assert_eq!(size_text(3 << 29), "1.5 GiB");
        assert_eq!(size_text(1000), "1000 B");
        assert_eq!(size_text(0), "0 B");
    }

    #[test]
    fn cpu_and_stall_limits_have_bounds() {
        assert_eq!(cpu_max(0.5), Ok(0.5));
        assert_eq!(cpu_max(1024.0), Ok(1024.0));
        for bad in [0.0, -1.0, 1024.5, f64::NAN, f64::INFINITY] {
            let problem = cpu_problem(bad).expect("refused");
            assert!(problem.starts_with("cpu_max must be"), "{problem}");
        }
        assert_eq!(stall_seconds(1), Ok(1));
        assert_eq!(stall_seconds(0), Err("stall_seconds must be at least 1 second, not 0.".to_owned()));
        assert!(stall_problem(-3).is_some_and(|p| p.contains("not -3")));
        assert!(stall_problem(MAX_STALL_SECONDS + 1).is_some());
    }
}
