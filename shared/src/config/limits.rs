//! The checks of `[api]`'s limits (timeouts, connection and stream caps, the metrics listener), kept apart
//! from the browser checks in `edges` so each set reads as one rule.

use super::ApiSettings;

/// What is wrong with `[api]`'s limits, each with its full key.
pub fn problems(api: &ApiSettings) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if let Some(hash) = api.metrics_token_hash.as_deref()
        && !crate::auth::is_token_hash(hash)
    {
        problems.push((
            "api.metrics_token_hash".into(),
            "must be sha256:<64 hex digits>, as printed by `scrinalia-api token`; never the token itself".into(),
        ));
    }
    if !(1..=10).contains(&api.header_read_timeout_seconds) {
        problems.push(("api.header_read_timeout_seconds".into(), "must be from 1 to 10 seconds".into()));
    }
    if api.connection_limit < 16 {
        problems.push(("api.connection_limit".into(), "must be at least 16".into()));
    }
    if api.streams_per_caller == 0 {
        problems.push(("api.streams_per_caller".into(), "must be at least 1".into()));
    }
    if api.metrics_listen.is_some_and(|m| m == api.listen) {
        problems.push(("api.metrics_listen".into(), "must differ from api.listen".into()));
    }
    problems
}
