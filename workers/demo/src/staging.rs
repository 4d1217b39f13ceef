//! Staging: where new documents arrive before the transfer takes them into the archive. Arrivals follow a
//! schedule kept in `$SCRINALIA_DEMO_DATA/staging.json`, written when the data folder is first used:
//!
//! ```json
//! {"started_at": 1790000000, "initial": 20, "every_seconds": 20, "cap": 300}
//! ```
//!
//! Documents 1 to `initial` arrived at `started_at` (Unix seconds); after that document `n` arrives at
//! `started_at + (n - initial) * every_seconds`, up to `cap` documents (`every_seconds` 0: all of them at once).
//! Nothing runs in the background: every verb that looks at staging computes what has arrived by the time it
//! looks (documents are generated from their number, see `corpus.rs`), so the demo's queues rise while it runs
//! with no extra process. Time is a parameter, so tests move it instead of sleeping; a test may also rewrite
//! the file (an earlier `started_at` makes documents arrive, a `cap` equal to `initial` stops arrivals).
//!
//! The first use also writes the cleaning rules (`rules.rs`), before the schedule, so once the schedule exists
//! a missing rules file is one somebody removed.

use std::{
    fs,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::{
    corpus::{self, Document},
    rules,
    stamps::write_new,
};

/// The schedule file's name in the data folder.
pub const FILE: &str = "staging.json";

/// How many documents are in staging when the data folder is first used.
pub const INITIAL: usize = 20;
/// Seconds between two later arrivals.
pub const EVERY_SECONDS: u64 = 20;
/// How many documents arrive in all.
pub const CAP: usize = 300;
/// How many documents the corpus of the first version of the demo had, all there from the start.
const LEGACY_SIZE: usize = 60;

/// The current time, in seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// When documents arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// When the first `initial` documents arrived (Unix seconds).
    pub started_at: u64,
    /// How many arrived at `started_at`.
    #[serde(default = "initial")]
    pub initial: usize,
    /// Seconds between two later arrivals.
    #[serde(default = "every_seconds")]
    pub every_seconds: u64,
    /// How many arrive in all.
    #[serde(default = "cap")]
    pub cap: usize,
}

fn initial() -> usize {
    INITIAL
}

fn every_seconds() -> u64 {
    EVERY_SECONDS
}

fn cap() -> usize {
    CAP
}

fn path(data: &Path) -> PathBuf {
    data.join(FILE)
}

impl Schedule {
    /// The schedule of the data folder `data`, setting the folder up first (rules, then the schedule starting
    /// at `now`) if this is its first use. Workers starting at once on a new folder agree on one schedule.
    pub fn open(data: &Path, now: u64) -> anyhow::Result<Self> {
        let path = path(data);
        if !path.exists() {
            fs::create_dir_all(data).with_context(|| format!("create the data folder {}", data.display()))?;
            rules::seed(data)?;
            let mut fresh = Self { started_at: now, initial: INITIAL, every_seconds: EVERY_SECONDS, cap: CAP };
            // A folder of the first demo version already holds sixty transferred documents: start the schedule
            // as if those had arrived, so what the archive holds is also what has arrived.
            if data.join("corpus").is_dir() {
                fresh.started_at = now.saturating_sub((LEGACY_SIZE - INITIAL) as u64 * EVERY_SECONDS);
            }
            let text = serde_json::to_string_pretty(&fresh).context("encode the staging schedule")?;
            write_new(&path, text.as_bytes())?;
        }
        let text =
            fs::read_to_string(&path).with_context(|| format!("read the staging schedule {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parse the staging schedule {}", path.display()))
    }

    /// How many documents have arrived by `now`.
    pub fn arrived(&self, now: u64) -> usize {
        let later = match (now.checked_sub(self.started_at), self.every_seconds) {
            (None, _) => return 0,
            (Some(_), 0) => self.cap,
            (Some(elapsed), every) => usize::try_from(elapsed / every).unwrap_or(usize::MAX),
        };
        self.initial.saturating_add(later).min(self.cap)
    }

    /// When document `n` (1-based) arrives.
    pub fn arrival_of(&self, n: usize) -> u64 {
        let later = n.saturating_sub(self.initial) as u64;
        self.started_at.saturating_add(later.saturating_mul(self.every_seconds))
    }

    /// The documents in staging by `now` (transferred ones included), in order of arrival.
    pub fn documents(&self, now: u64) -> Vec<Document> {
        (1..=self.arrived(now)).map(|n| Document { arrived_at: self.arrival_of(n), ..corpus::generate(n) }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_790_000_000;

    #[test]
    fn documents_arrive_over_time_up_to_the_cap() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let schedule = Schedule::open(dir.path(), T0).expect("set up");
        assert_eq!(schedule.arrived(T0), INITIAL);
        assert_eq!(schedule.arrived(T0 - 100), 0, "nothing has arrived before the start");
        assert_eq!(schedule.arrived(T0 + EVERY_SECONDS - 1), INITIAL);
        assert_eq!(schedule.arrived(T0 + EVERY_SECONDS), INITIAL + 1);
        assert_eq!(schedule.arrived(T0 + 10 * EVERY_SECONDS + 3), INITIAL + 10);
        assert_eq!(schedule.arrived(T0 + 1_000_000), CAP);
        let documents = schedule.documents(T0 + 2 * EVERY_SECONDS);
        assert_eq!(documents.len(), INITIAL + 2);
        assert_eq!(documents[0].arrived_at, T0);
        assert_eq!(documents[INITIAL + 1].id, format!("doc-{:04}", INITIAL + 2));
        assert_eq!(documents[INITIAL + 1].arrived_at, T0 + 2 * EVERY_SECONDS);
    }

    #[test]
    fn the_first_use_sets_up_the_folder_once() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let data = dir.path().join("demo");
        let first = Schedule::open(&data, T0).expect("set up");
        assert!(rules::path(&data).is_file(), "the cleaning rules are written with the schedule");
        fs::remove_file(rules::path(&data)).expect("remove the rules");
        let again = Schedule::open(&data, T0 + 500).expect("reopen");
        assert_eq!(first, again, "the schedule is kept, not restarted");
        assert!(!rules::path(&data).exists(), "removed rules stay removed");
    }

    #[test]
    fn a_rewritten_schedule_is_followed() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        fs::write(path(dir.path()), r#"{"started_at": 1000, "initial": 2, "every_seconds": 0, "cap": 7}"#)
            .expect("write");
        let schedule = Schedule::open(dir.path(), T0).expect("open");
        assert_eq!(schedule.arrived(1000), 7, "every_seconds 0: everything at once");
        fs::write(path(dir.path()), r#"{"started_at": 1000}"#).expect("write");
        assert_eq!(Schedule::open(dir.path(), T0).expect("open").cap, CAP, "missing fields take the defaults");
    }

    #[test]
    fn a_folder_of_the_first_demo_version_has_its_sixty_documents_arrived() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        fs::create_dir_all(dir.path().join("corpus")).expect("an old corpus folder");
        assert_eq!(Schedule::open(dir.path(), T0).expect("set up").arrived(T0), LEGACY_SIZE);
    }
}
