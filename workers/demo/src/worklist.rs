//! What one run of an archive worker works through, and how an interrupted run is continued.
//!
//! - **The worklist**: the documents pending when a fresh run starts (at most `limit` of them), recorded before
//!   any work as `<data>/runs/<worker>/<run-id>.json` (written atomically and durably, like the stamps). A list is
//!   known by the id of the run that drew it up — a fresh run, or a restart, which starts a new pass over an
//!   earlier list — and that id is the `worklist_of` of the checkpoints. Every run that has a run id records the
//!   list it works through under its own id (a resume too, its `worklist_of` then naming the list it continues),
//!   so any run can be restarted, a resumed one included.
//! - **The results journal** `<data>/results/<worker>.jsonl`: after each batch's stamps are saved, one line per
//!   document the batch stamped, `{"document": id, "run": <run id>, "worklist_of": <list>, "stamp": …, "tally":
//!   …}`, appended in one write and synced: the proof of what was processed, as durable as the stamps. A document
//!   that failed is not in it (it stays pending).
//! - **The checkpoint**, printed after the journal line: `{"checkpoint": {"worklist_of": <run id>, "done": n}}`:
//!   the first `n` documents of that list are finished (stamped, or failed and left pending, or skipped:
//!   quarantined, or outside the run's scope).
//!
//! A resume (`SCRINALIA_CHECKPOINT` holds that checkpoint) continues the list at `done`: documents of the list
//! only, never ones that arrived since, and never one the journal already shows finished in the same pass (a run
//! killed after its journal line but before its checkpoint). A checkpoint that is not one, or whose list is not
//! on disk, is refused with a sentence before any work (exit status 2). A restart (`SCRINALIA_RESTART_OF` names
//! the earlier run) processes that run's whole list again from the start, stamping every document again under a
//! new pass; when that list is not on disk it runs as a fresh run and says so. A run without a usable run id (run
//! by hand, or an id that cannot name a file) records no list and prints no checkpoints, as nothing could resume
//! it; it still journals.

use std::{
    collections::BTreeSet,
    fmt,
    fs::{self, OpenOptions},
    io::Write as _,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    invocation::{CHECKPOINT_ENV, RESTART_OF_ENV},
    stamps::{sync_folder, write_atomically},
};

/// The exit status of a run refused before any work (a checkpoint it cannot follow).
pub const REFUSED: i32 = 2;

/// Why a run cannot start as asked: a sentence for stderr; the run exits with [`REFUSED`].
#[derive(Debug)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

fn refuse(sentence: String) -> anyhow::Error {
    Refusal(sentence).into()
}

/// Whether `id` may name a worklist file: letters, digits, `-`, `_` and `.`, not starting with a dot (a run id is
/// a UUID).
pub fn usable_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// An archive worker's checkpoint: the first `done` documents of the worklist of run `worklist_of` are finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The run whose worklist this is.
    pub worklist_of: String,
    /// How many documents of it, from the start, are finished.
    pub done: usize,
}

impl Checkpoint {
    /// Reads the JSON text of `SCRINALIA_CHECKPOINT`; the error is a sentence.
    pub fn parse(text: &str) -> Result<Self, String> {
        let checkpoint: Self = serde_json::from_str(text).map_err(|e| {
            format!(
                "{CHECKPOINT_ENV} is not a checkpoint of this worker ({e}); one looks like {{\"worklist_of\": \
                 \"<run id>\", \"done\": <documents finished>}}, and this run cannot resume from {text:?}."
            )
        })?;
        if !usable_id(&checkpoint.worklist_of) {
            return Err(format!(
                "{CHECKPOINT_ENV} names the worklist of {:?}, which is not a run id, so this run cannot resume it.",
                checkpoint.worklist_of
            ));
        }
        Ok(checkpoint)
    }

    /// The value of the `{"checkpoint": …}` line.
    pub fn json(&self) -> Value {
        json!({ "worklist_of": self.worklist_of, "done": self.done })
    }
}

/// How a run starts, as its environment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// From the documents pending now.
    Fresh,
    /// From an earlier run's last checkpoint.
    Resume(Checkpoint),
    /// Over the worklist of this earlier run, from nothing.
    Restart(String),
}

impl Start {
    /// From `SCRINALIA_CHECKPOINT` and `SCRINALIA_RESTART_OF`; the error is a sentence.
    pub fn of(checkpoint: Option<&str>, restart_of: Option<&str>) -> Result<Self, String> {
        match (checkpoint, restart_of) {
            (Some(_), Some(_)) => Err(format!(
                "{CHECKPOINT_ENV} and {RESTART_OF_ENV} are both set, but a run either resumes an earlier one or \
                 starts it over, not both."
            )),
            (Some(text), None) => Checkpoint::parse(text).map(Self::Resume),
            (None, Some(run)) => Ok(Self::Restart(run.to_owned())),
            (None, None) => Ok(Self::Fresh),
        }
    }
}

/// The worklist a run recorded: the documents it works through, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worklist {
    /// The worker's name.
    pub worker: String,
    /// The run that recorded this file.
    pub run: String,
    /// The run that drew the list up (`run` itself, except for a resume).
    pub worklist_of: String,
    /// For a restart, the run it starts over.
    #[serde(default)]
    pub restart_of: Option<String>,
    /// When it was recorded (Unix seconds, the demo's clock).
    pub recorded_at: u64,
    /// The document ids.
    pub documents: Vec<String>,
}

impl Worklist {
    /// Where run `run` of `worker` records its worklist.
    pub fn path(data: &Path, worker: &str, run: &str) -> PathBuf {
        data.join("runs").join(worker).join(format!("{run}.json"))
    }

    /// The worklist run `run` of `worker` recorded; `None` when there is none (or `run` cannot name one). The
    /// error is a sentence: the file is there but unreadable, or not a worklist of `worker`.
    pub fn load(data: &Path, worker: &str, run: &str) -> Result<Option<Self>, String> {
        if !usable_id(run) {
            return Ok(None);
        }
        let path = Self::path(data, worker, run);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("The worklist of run {run}, {}, cannot be read: {e}.", path.display())),
        };
        match serde_json::from_str::<Self>(&text) {
            Ok(list) if list.worker == worker => Ok(Some(list)),
            Ok(list) => Err(format!("{} is the worklist of {}, not of {worker}.", path.display(), list.worker)),
            Err(e) => Err(format!("{} is not a worklist ({e}).", path.display())),
        }
    }

    /// Records it under its own run, atomically and durably.
    pub fn save(&self, data: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("encode the worklist")?;
        write_atomically(&Self::path(data, &self.worker, &self.run), text.as_bytes())
    }
}

/// What a run works through, settled before any work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The worklist.
    pub documents: Vec<String>,
    /// Its id, the checkpoints' `worklist_of`; `None` when the run prints no checkpoints.
    pub worklist_of: Option<String>,
    /// Whether the worklist is the documents pending now (a fresh run, or a restart whose list is lost) rather
    /// than an earlier run's.
    pub drawn_now: bool,
    /// The index of the first document to do (a resume's `done`, else 0).
    pub from: usize,
    /// Documents of the list the journal shows finished in this pass already (a resume's), skipped.
    pub finished: BTreeSet<String>,
    /// How the run continues an earlier one, for its first stderr line (`None` for a fresh run).
    pub continues: Option<String>,
    /// Sentences for stderr about what the run could not do as asked.
    pub notes: Vec<String>,
}

impl Plan {
    /// Settles the work of run `run_id` of `worker` started as `start`, `pending` being the documents pending now
    /// (at most `limit`), and records its worklist. A [`Refusal`] when it cannot start as asked.
    pub fn settle(
        data: &Path,
        worker: &str,
        run_id: Option<&str>,
        start: Start,
        pending: Vec<String>,
        now: u64,
    ) -> anyhow::Result<Self> {
        let own = run_id.filter(|id| usable_id(id));
        let mut notes = Vec::new();
        if own.is_none() {
            notes.push(match run_id {
                Some(id) => format!(
                    "the run id {id:?} cannot name a file, so this run records no worklist and reports no checkpoints."
                ),
                None => "without a run id this run records no worklist and reports no checkpoints.".to_owned(),
            });
        }
        let fresh = |documents: Vec<String>, notes: Vec<String>| Self {
            documents,
            worklist_of: own.map(str::to_owned),
            drawn_now: true,
            from: 0,
            finished: BTreeSet::new(),
            continues: None,
            notes,
        };
        let resuming = matches!(start, Start::Resume(_));
        let (plan, restart_of) = match start {
            Start::Fresh => (fresh(pending, notes), None),
            Start::Resume(Checkpoint { worklist_of, done }) => {
                let Some(list) = Worklist::load(data, worker, &worklist_of).map_err(refuse)? else {
                    return Err(refuse(format!(
                        "The checkpoint continues the worklist of run {worklist_of}, but {} does not exist, so this \
                         run cannot resume it.",
                        Worklist::path(data, worker, &worklist_of).display()
                    )));
                };
                let size = list.documents.len();
                if done > size {
                    return Err(refuse(format!(
                        "The checkpoint says {done} documents of the worklist of run {worklist_of} are finished, but \
                         it holds only {size}, so this run cannot resume it."
                    )));
                }
                let finished = Journal::of(data, worker).finished_in(&worklist_of)?;
                let continues = format!("resumes the worklist of run {worklist_of} at document {done} of {size}");
                let plan = Self {
                    documents: list.documents,
                    worklist_of: Some(worklist_of),
                    drawn_now: false,
                    from: done,
                    finished,
                    continues: Some(continues),
                    notes,
                };
                (plan, None)
            }
            Start::Restart(earlier) => match Worklist::load(data, worker, &earlier).map_err(refuse)? {
                Some(list) => {
                    let size = list.documents.len();
                    let mut plan = fresh(list.documents, notes);
                    plan.drawn_now = false;
                    plan.continues =
                        Some(format!("starts over the worklist of run {earlier}: all {size} documents again"));
                    (plan, Some(earlier))
                }
                None => {
                    notes.push(format!(
                        "the worklist of run {earlier} ({}) is not there, so this restart runs as a fresh run over \
                         the documents pending now.",
                        Worklist::path(data, worker, &earlier).display()
                    ));
                    (fresh(pending, notes), None)
                }
            },
        };
        // A resume records the list it continues under its own id too (unless it somehow is that very run), so
        // that it can be restarted.
        if let Some(run) = own {
            let worklist_of = plan.worklist_of.as_deref().unwrap_or(run);
            if !resuming || run != worklist_of {
                let list = Worklist {
                    worker: worker.to_owned(),
                    run: run.to_owned(),
                    worklist_of: worklist_of.to_owned(),
                    restart_of,
                    recorded_at: now,
                    documents: plan.documents.clone(),
                };
                list.save(data)?;
            }
        }
        Ok(plan)
    }
}

/// A worker's results journal, `<data>/results/<worker>.jsonl`.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    /// The journal of `worker`.
    pub fn of(data: &Path, worker: &str) -> Self {
        Self { path: data.join("results").join(format!("{worker}.jsonl")) }
    }

    /// Where it is.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `lines` in one write and syncs the file (and, when this creates it, its folder). A line left
    /// unfinished by a crash is ended first, so it spoils only itself.
    pub fn append(&self, lines: &[Value]) -> anyhow::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let folder = self.path.parent().context("a file path has a folder")?;
        fs::create_dir_all(folder).with_context(|| format!("create the folder {}", folder.display()))?;
        let created = !self.path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)
            .with_context(|| format!("open the results journal {}", self.path.display()))?;
        let length = file.metadata().with_context(|| format!("inspect {}", self.path.display()))?.len();
        let mut text = String::new();
        let mut last = [b'\n'];
        if length > 0 {
            file.read_exact_at(&mut last, length - 1).with_context(|| format!("read {}", self.path.display()))?;
        }
        if last[0] != b'\n' {
            text.push('\n');
        }
        for line in lines {
            text.push_str(&line.to_string());
            text.push('\n');
        }
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("append to the results journal {}", self.path.display()))?;
        if created {
            sync_folder(folder)?;
        }
        Ok(())
    }

    /// Every readable line so far (an unfinished or foreign line is skipped).
    pub fn entries(&self) -> anyhow::Result<Vec<Value>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("read the results journal {}", self.path.display())),
        };
        Ok(text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(Value::is_object).collect())
    }

    /// The documents journaled in the pass over the worklist of run `worklist_of`.
    pub fn finished_in(&self, worklist_of: &str) -> anyhow::Result<BTreeSet<String>> {
        Ok(self
            .entries()?
            .iter()
            .filter(|e| e["worklist_of"] == worklist_of)
            .filter_map(|e| e["document"].as_str().map(str::to_owned))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_read_back_and_a_bad_one_is_a_sentence() {
        let checkpoint = Checkpoint { worklist_of: "0190-ab".into(), done: 3 };
        assert_eq!(Checkpoint::parse(&checkpoint.json().to_string()), Ok(checkpoint));
        for text in [
            "",
            "null",
            "{\"done\": 3}",
            "{\"worklist_of\": \"r\", \"done\": -1}",
            "{\"worklist_of\": \"../r\", \"done\": 1}",
            "[1]",
        ] {
            let sentence = Checkpoint::parse(text).expect_err(text);
            assert!(sentence.starts_with("SCRINALIA_CHECKPOINT ") && sentence.ends_with('.'), "{sentence}");
        }
        assert!(Start::of(Some("{}"), Some("r")).is_err(), "resume and restart at once");
        assert_eq!(Start::of(None, Some("r")), Ok(Start::Restart("r".into())));
        assert_eq!(Start::of(None, None), Ok(Start::Fresh));
    }

    #[test]
    fn the_journal_ends_a_torn_line_and_skips_it() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let journal = Journal::of(dir.path(), "embed");
        assert_eq!(journal.entries().expect("no journal yet"), Vec::<Value>::new());
        journal.append(&[json!({"document": "doc-0001", "worklist_of": "a"})]).expect("append");
        let mut torn = OpenOptions::new().append(true).open(journal.path()).expect("open");
        torn.write_all(b"{\"document\": \"doc-00").expect("a torn line");
        journal.append(&[json!({"document": "doc-0002", "worklist_of": "b"})]).expect("append after it");
        let documents: Vec<Value> = journal.entries().expect("entries").iter().map(|e| e["document"].clone()).collect();
        assert_eq!(documents, [json!("doc-0001"), json!("doc-0002")]);
        assert_eq!(journal.finished_in("b").expect("pass b"), BTreeSet::from(["doc-0002".to_owned()]));
    }

    #[test]
    fn run_ids_that_cannot_name_a_file_are_not_used() {
        for id in ["0190b7c4-5d2e-7a10-8c3f-1b2a3c4d5e6f", "run_7", "r.1"] {
            assert!(usable_id(id), "{id}");
        }
        for id in ["", ".", "..", "../x", "a/b", "my run", ".hidden"] {
            assert!(!usable_id(id), "{id}");
        }
    }
}
