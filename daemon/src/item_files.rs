//! The item lists a run's worker is given as files, one id per line: its scope (`SCRINALIA_ITEMS_ONLY`, for a
//! rerun of a run's failures and its retries) and the quarantined items it must skip (`SCRINALIA_ITEMS_SKIP`).
//! A scoped run is never told to skip an item of its scope (a rerun of failures includes quarantined ones).
//! They live in a folder of the run's own, readable by the daemon's user only, removed when the run ends.

use std::{
    io::Write,
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::PathBuf,
};

use scrinalia_shared::{FollowKind, Run, WorkerSpec};

use crate::Context;

/// A run's item files, removed when dropped.
#[derive(Debug, Default)]
pub struct ItemFiles {
    dir: Option<PathBuf>,
    /// The variables that name them.
    pub env: Vec<(String, String)>,
}

impl Drop for ItemFiles {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Reads what `run` is scoped to and must skip, and writes the files; `Err` with a sentence when it cannot,
/// since a scoped run started without its scope would process everything.
pub async fn prepare(ctx: &Context, run: &Run, spec: &WorkerSpec) -> Result<ItemFiles, String> {
    let skip = match spec.quarantine_after {
        Some(_) => ctx
            .db
            .skip_list(&ctx.settings.catalogue, &run.worker)
            .await
            .map_err(|e| format!("could not read the worker's quarantined items, which the run must skip: {e}"))?,
        None => Vec::new(),
    };
    let rerun_failed = run.follows_as == Some(FollowKind::RerunFailed);
    let only = if rerun_failed || run.retry_of.is_some() {
        ctx.db.run_scope(run.id).await.map_err(|e| format!("could not read the run's scope: {e}"))?
    } else {
        Vec::new()
    };
    // A rerun of failures includes the quarantined ones among them: the operator asked for exactly those.
    let skip: Vec<String> = if only.is_empty() {
        skip
    } else {
        let scope: std::collections::HashSet<&String> = only.iter().collect();
        skip.into_iter().filter(|id| !scope.contains(id)).collect()
    };
    if rerun_failed && only.is_empty() {
        return Err("the run reruns failures but has no scope stored; it is not started, so it cannot process \
                    everything instead"
            .to_owned());
    }
    if skip.is_empty() && only.is_empty() {
        return Ok(ItemFiles::default());
    }
    let dir = std::env::temp_dir().join(format!("scrinalia-run-{}", run.id));
    let mut files = ItemFiles { dir: Some(dir.clone()), env: Vec::new() };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("could not create {} for the run's item lists: {e}", dir.display()))?;
    for (name, ids, variable) in [("only", &only, "SCRINALIA_ITEMS_ONLY"), ("skip", &skip, "SCRINALIA_ITEMS_SKIP")] {
        if ids.is_empty() {
            continue;
        }
        let path = dir.join(name);
        write_ids(&path, ids).map_err(|e| format!("could not write {}: {e}", path.display()))?;
        files.env.push((variable.to_owned(), path.display().to_string()));
    }
    tracing::info!(only = only.len(), skip = skip.len(), "the worker is given its item lists");
    Ok(files)
}

fn write_ids(path: &std::path::Path, ids: &[String]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    let mut text = String::with_capacity(ids.iter().map(|i| i.len() + 1).sum());
    for id in ids {
        text.push_str(id);
        text.push('\n');
    }
    file.write_all(text.as_bytes())?;
    file.sync_all()
}
