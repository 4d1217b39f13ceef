//! Where run output is kept: an object store (a local folder by default), one object per run, written in
//! chunks while the run goes on so that it can be read before the run ends.

use std::sync::Arc;

use object_store::{ObjectStore, local::LocalFileSystem, path::Path};
use uuid::Uuid;

use crate::config::{ObjectStoreKind, ObjectStoreSettings};

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// The folder could not be created or opened.
    #[error("cannot open the run-log folder {path}: {source}")]
    Folder {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store said no.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// The kind is configured but not built into this binary.
    #[error("object store kind {0:?} is not supported by this build")]
    Unsupported(String),
}

/// An opened object store with the configured key prefix.
#[derive(Clone, Debug)]
pub struct LogStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

impl LogStore {
    /// Opens the configured store; a local folder is created if missing.
    pub fn open(settings: &ObjectStoreSettings) -> Result<Self, LogStoreError> {
        let store: Arc<dyn ObjectStore> = match settings.kind {
            ObjectStoreKind::Local => {
                let folder = |source| LogStoreError::Folder { path: settings.path.display().to_string(), source };
                std::fs::create_dir_all(&settings.path).map_err(folder)?;
                let root = std::fs::canonicalize(&settings.path).map_err(folder)?;
                Arc::new(LocalFileSystem::new_with_prefix(root)?)
            }
            ObjectStoreKind::S3 => return Err(LogStoreError::Unsupported("s3".to_owned())),
        };
        Ok(Self { store, prefix: settings.prefix.trim_matches('/').to_owned() })
    }

    /// The store itself.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key of one chunk of a run's log: `runs/<worker>/<run>/<seq>.log`. Worker names are identifiers, so
    /// nothing user-supplied reaches a path.
    pub fn chunk_key(&self, worker: &str, run: Uuid, seq: u32) -> Path {
        Path::from(format!("{}/{seq:08}.log", self.run_prefix_str(worker, run)))
    }

    /// The folder of a run's log chunks.
    pub fn run_prefix(&self, worker: &str, run: Uuid) -> Path {
        Path::from(self.run_prefix_str(worker, run))
    }

    fn run_prefix_str(&self, worker: &str, run: Uuid) -> String {
        if self.prefix.is_empty() {
            format!("runs/{worker}/{run}")
        } else {
            format!("{}/runs/{worker}/{run}", self.prefix)
        }
    }

    /// The key used by health checks.
    pub fn probe_key(&self) -> Path {
        let name = format!("health/probe-{}", Uuid::new_v4());
        if self.prefix.is_empty() { Path::from(name) } else { Path::from(format!("{}/{name}", self.prefix)) }
    }
}
