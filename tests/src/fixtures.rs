//! Small builders for what the database tests request and write directly through the domain operations.

use std::time::Duration;

use scrinalia_shared::{
    ApiStore, Catalogue, EndReason, ExplicitArgs, Run,
    runs::{Finish, RequestError, RunRequest},
};
use scrinalia_testkit::config::worker;
use uuid::Uuid;

/// A catalogue of `names`, each a worker with no engine and no option, timing out after 60 s.
pub fn catalogue_of(names: &[&str]) -> Catalogue {
    let workers = names
        .iter()
        .map(|name| {
            let mut spec = worker(name, &["true"]);
            spec.timeout_seconds = 60;
            spec
        })
        .collect();
    Catalogue::new(workers, Default::default()).unwrap_or_else(|problems| panic!("{problems:?}"))
}

/// A request for `worker` by "tester", with no argument.
pub fn request(worker: &str) -> RunRequest {
    RunRequest {
        worker: worker.to_owned(),
        requested_by: "tester".to_owned(),
        arguments: ExplicitArgs::default(),
        trace_context: None,
        tags: Vec::new(),
    }
}

/// Requests a run of `worker` (a worker of no engine and no option; see [`catalogue_of`]) by "tester".
pub async fn insert(db: &ApiStore, worker: &str) -> Result<Run, RequestError> {
    db.request_run(&catalogue_of(&[worker]), request(worker)).await
}

/// A successful ending.
pub fn succeeded() -> Finish {
    Finish {
        reason: EndReason::ExitStatus,
        exit_code: Some(0),
        error: None,
        result: Some(serde_json::json!({"processed": 3})),
        usage: None,
    }
}

/// A lease long enough never to expire during a test.
pub const LONG_LEASE: Duration = Duration::from_secs(600);

/// The ids of `runs`, sorted.
pub fn ids(runs: &[Run]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
    ids.sort();
    ids
}
