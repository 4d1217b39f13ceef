//! A worker's stamps: which documents it processed and what it found, one file per worker
//! (`<data>/stamps/<worker>.json`) so different workers running at once never write the same file. Every save
//! writes a temporary file, syncs it to disk and renames it over the old one (syncing the folder too), so a reader
//! (or a SIGKILL, or a power cut) never sees half a file, and a save that returned is durable: a run's results
//! journal (`worklist.rs`), written after the save, never claims a stamp the disk lost.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The stamps of one worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StampBook {
    /// The worker's name.
    pub worker: String,
    /// The stamp it leaves (`tags_v1`).
    pub stamp: String,
    /// Document id → what the worker recorded for it.
    pub documents: BTreeMap<String, Value>,
    #[serde(skip)]
    path: PathBuf,
}

impl StampBook {
    /// Loads the stamps of `worker` under `data`: none yet if the file does not exist, and none either if they
    /// carry another stamp (a new version of the worker processes every document again).
    pub fn load(data: &Path, worker: &str, stamp: &str) -> anyhow::Result<Self> {
        let path = data.join("stamps").join(format!("{worker}.json"));
        let mut book = match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| format!("parse the stamps {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self {
                worker: worker.to_owned(),
                stamp: stamp.to_owned(),
                documents: BTreeMap::new(),
                path: PathBuf::new(),
            },
            Err(e) => return Err(e).with_context(|| format!("read the stamps {}", path.display())),
        };
        if book.stamp != stamp {
            book.stamp = stamp.to_owned();
            book.documents.clear();
        }
        book.path = path;
        Ok(book)
    }

    /// Whether `id` carries this worker's stamp.
    pub fn has(&self, id: &str) -> bool {
        self.documents.contains_key(id)
    }

    /// Stamps `id` with what the worker found (kept in memory until [`StampBook::save`]).
    pub fn stamp(&mut self, id: &str, record: Value) {
        self.documents.insert(id.to_owned(), record);
    }

    /// Writes the stamps atomically.
    pub fn save(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("encode the stamps")?;
        write_atomically(&self.path, text.as_bytes())
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, durably: the file is
/// synced before the rename and the folder after it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let folder = path.parent().context("a file path has a folder")?;
    fs::create_dir_all(folder).with_context(|| format!("create the folder {}", folder.display()))?;
    let name = path.file_name().context("a file path has a name")?.to_string_lossy();
    let temporary = folder.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = File::create(&temporary).with_context(|| format!("create {}", temporary.display()))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("write {}", temporary.display()))?;
    fs::rename(&temporary, path).with_context(|| format!("replace {}", path.display()))?;
    sync_folder(folder)
}

/// Syncs `folder` itself, so the names created or replaced in it survive a power cut.
pub fn sync_folder(folder: &Path) -> anyhow::Result<()> {
    File::open(folder).and_then(|f| f.sync_all()).with_context(|| format!("sync the folder {}", folder.display()))
}

/// Creates `path` with `bytes` unless it exists; returns whether this call created it. The file appears whole
/// (a hard link to a finished temporary file), and of workers creating it at once exactly one wins.
pub fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<bool> {
    let folder = path.parent().context("a file path has a folder")?;
    fs::create_dir_all(folder).with_context(|| format!("create the folder {}", folder.display()))?;
    let name = path.file_name().context("a file path has a name")?.to_string_lossy();
    let temporary = folder.join(format!(".{name}.{}.new", std::process::id()));
    fs::write(&temporary, bytes).with_context(|| format!("write {}", temporary.display()))?;
    let linked = fs::hard_link(&temporary, path);
    let _ = fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).with_context(|| format!("create {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_survive_a_reload() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let mut book = StampBook::load(dir.path(), "tag-suggest", "tags_v1").expect("empty book");
        assert!(!book.has("doc-0001"));
        book.stamp("doc-0001", serde_json::json!({"tags": ["harbour"]}));
        book.save().expect("save");
        let again = StampBook::load(dir.path(), "tag-suggest", "tags_v1").expect("reload");
        assert!(again.has("doc-0001"));
        let next_version = StampBook::load(dir.path(), "tag-suggest", "tags_v2").expect("reload");
        assert!(!next_version.has("doc-0001"));
    }

    #[test]
    fn a_new_file_is_written_once() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let path = dir.path().join("sub").join("f.json");
        assert!(write_new(&path, b"first").expect("create"));
        assert!(!write_new(&path, b"second").expect("exists"));
        assert_eq!(fs::read(&path).expect("read"), b"first");
        assert_eq!(fs::read_dir(path.parent().expect("folder")).expect("list").count(), 1, "no temporary file left");
    }
}
