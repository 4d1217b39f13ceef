//! Figures, their targets, and how they are printed: Markdown table rows, or one JSON document with `--json`.

use std::time::Duration;

use serde::Serialize;

/// How a figure compares with its target.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The figure must be below the target.
    Below(f64),
    /// The figure must be above the target.
    Above(f64),
}

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// The subcommand that measured it.
    pub bench: &'static str,
    /// What was measured, as a short sentence.
    pub what: String,
    /// `PostgreSQL` or `SQLite`.
    pub backend: &'static str,
    /// The value.
    pub value: f64,
    /// Its unit (`ms`, `claims/s`, …).
    pub unit: &'static str,
    /// The target, when the issue sets one.
    pub target: Option<Bound>,
    /// Other figures of the same measurement (p90, max, counts), for the reader.
    pub detail: String,
}

impl Figure {
    /// A figure without a target.
    pub fn info(
        bench: &'static str,
        backend: &'static str,
        what: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Self {
        Self { bench, what: what.into(), backend, value, unit, target: None, detail: String::new() }
    }

    /// Sets the target.
    pub fn target(mut self, bound: Bound) -> Self {
        self.target = Some(bound);
        self
    }

    /// Sets the detail column.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Whether the target is met (`None` without a target).
    pub fn met(&self) -> Option<bool> {
        self.target.map(|t| match t {
            Bound::Below(limit) => self.value < limit,
            Bound::Above(limit) => self.value > limit,
        })
    }

    /// The Markdown row.
    pub fn row(&self) -> String {
        let target = match self.target {
            Some(Bound::Below(v)) => format!("< {} {}", number(v), self.unit),
            Some(Bound::Above(v)) => format!("> {} {}", number(v), self.unit),
            None => "—".to_owned(),
        };
        let met = match self.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        format!(
            "| {} | {} | {} | {} {} | {} | {} | {} |",
            self.bench,
            self.what,
            self.backend,
            number(self.value),
            self.unit,
            target,
            met,
            self.detail
        )
    }
}

/// The table's header.
pub const HEADER: &str =
    "| bench | measurement | backend | figure | target | met | detail |\n|---|---|---|---|---|---|---|";

/// A number with as many decimals as its size deserves.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        let whole = format!("{v:.0}");
        let (sign, digits) = whole.strip_prefix('-').map_or(("", whole.as_str()), |d| ("-", d));
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        format!("{sign}{grouped}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Sorted samples, in milliseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<f64>);

impl Samples {
    /// From durations.
    pub fn from_durations(d: impl IntoIterator<Item = Duration>) -> Self {
        Self::from_ms(d.into_iter().map(|d| d.as_secs_f64() * 1000.0))
    }

    /// From milliseconds.
    pub fn from_ms(ms: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = ms.into_iter().collect();
        v.sort_by(f64::total_cmp);
        Self(v)
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (nearest rank: the smallest sample with at least `q` of the samples at or below it).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let rank = ((self.0.len() as f64 * q).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1]
    }

    /// The median.
    pub fn p50(&self) -> f64 {
        self.quantile(0.5)
    }

    /// The 99th percentile.
    pub fn p99(&self) -> f64 {
        self.quantile(0.99)
    }

    /// The largest.
    pub fn max(&self) -> f64 {
        self.0.last().copied().unwrap_or(f64::NAN)
    }

    /// "p90 x, max y, n z" for the detail column.
    pub fn summary(&self) -> String {
        format!(
            "p50 {} · p90 {} · p99 {} · max {} ms · n {}",
            number(self.p50()),
            number(self.quantile(0.9)),
            number(self.p99()),
            number(self.max()),
            self.len()
        )
    }
}

/// Everything one invocation measured, and where.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The machine and the database server.
    pub machine: serde_json::Value,
    /// The figures, in the order measured.
    pub figures: Vec<Figure>,
}

impl Report {
    /// Prints the report to stdout.
    #[allow(clippy::print_stdout)]
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string_pretty(self).unwrap_or_default());
            return;
        }
        println!("{HEADER}");
        for figure in &self.figures {
            println!("{}", figure.row());
        }
        let missed: Vec<&Figure> = self.figures.iter().filter(|f| f.met() == Some(false)).collect();
        println!();
        if missed.is_empty() {
            println!("Every figure with a target met it.");
        } else {
            println!(
                "Targets missed: {}.",
                missed.iter().map(|f| format!("{} ({})", f.what, f.backend)).collect::<Vec<_>>().join("; ")
            );
        }
        if let Some(machine) = self.machine.as_object() {
            let line: Vec<String> = machine
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                .collect();
            println!("Machine: {}", line.join(" · "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let s = Samples::from_ms((1..=100).map(f64::from));
        assert_eq!(s.p50(), 50.0);
        assert_eq!(s.p99(), 99.0);
        assert_eq!(s.max(), 100.0);
        assert_eq!(Samples::from_ms([3.0]).p99(), 3.0);
    }

    #[test]
    fn numbers_are_readable() {
        assert_eq!(number(12345.6), "12,346");
        assert_eq!(number(0.4567), "0.457");
        assert_eq!(number(4.567), "4.57");
        assert_eq!(number(150.2), "150");
    }

    #[test]
    fn targets_are_compared() {
        let f = Figure::info("x", "PostgreSQL", "y", 1.0, "ms");
        assert_eq!(f.met(), None);
        assert_eq!(f.clone().target(Bound::Below(2.0)).met(), Some(true));
        assert_eq!(f.target(Bound::Above(2.0)).met(), Some(false));
    }
}
