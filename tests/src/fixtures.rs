//! Small builders for rows that tests insert directly through the database layer.

use std::{collections::BTreeMap, time::Duration};

use scrinalia_shared::{
    ExplicitArgs, ResolvedConfig,
    db::{Finish, NewRun, Run, RunState},
};
use uuid::Uuid;

/// A resolved configuration with no engine and no options (enough for queue tests).
pub fn plain_config() -> ResolvedConfig {
    ResolvedConfig {
        engine: None,
        preset: None,
        model: None,
        endpoint: None,
        engine_configurable: true,
        options: BTreeMap::new(),
        timeout_seconds: 60,
    }
}

/// A request for `worker` by "tester".
pub fn request(worker: &str) -> NewRun {
    NewRun {
        id: Uuid::now_v7(),
        worker: worker.to_owned(),
        requested_by: "tester".to_owned(),
        arguments: ExplicitArgs::default(),
        config: plain_config(),
        trace_context: None,
    }
}

/// A successful ending.
pub fn succeeded() -> Finish {
    Finish {
        state: RunState::Succeeded,
        exit_code: Some(0),
        error: None,
        result: Some(serde_json::json!({"processed": 3})),
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
