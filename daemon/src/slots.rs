//! The slots of daemon-scoped resources (a GPU) a claimed run holds on this daemon, which its worker is given as
//! `SCRINALIA_RESOURCE_<NAME>` (see `Invocation::holding`).

use scrinalia_shared::{ResourceScope, Run, WorkerSpec};

use crate::Context;

/// The slots `run` holds, (resource, slot), read only when its worker `spec` holds a daemon-scoped resource; an
/// error, as a sentence, when they cannot be read.
pub async fn of(ctx: &Context, run: &Run, spec: &WorkerSpec) -> Result<Vec<(String, u32)>, String> {
    let catalogue = &ctx.settings.catalogue;
    let per_daemon =
        spec.resources.iter().any(|r| catalogue.resource(r).is_some_and(|r| r.scope == ResourceScope::Daemon));
    if !per_daemon {
        return Ok(Vec::new());
    }
    ctx.db.resource_slots(run.id).await.map_err(|e| format!("could not read the run's resource slots: {e}"))
}
