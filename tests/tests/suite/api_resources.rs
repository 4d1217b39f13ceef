//! A shared resource's capacity as an audited override, on both backends: through the API in-process (a change is
//! what the list shows, each change is one audit row naming its actor and reason, and every refusal is a 4xx with a
//! sentence that changes nothing), and with a real daemon: raised from the catalogue's 1 to 2, two holders run at
//! once (the probes' own records overlap) and a queued third names capacity 2 as what it waits for; put back to
//! the catalogue's while both hold, neither is stopped, and from then on the holders no longer overlap.

use std::{net::SocketAddr, time::Duration};

use axum::http::{Method, StatusCode};
use scrinalia_api::{AppState, app};
use scrinalia_shared::{ResourceSpec, Role, RunState};
use scrinalia_tests::{
    ConfigFile, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, TestApi, VIEWER, config_file},
    backend_tests,
    daemon_harness::{Setup, wait_finished},
    eventually,
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    a_capacity_override_is_listed_and_each_change_is_audited,
    refused_capacity_changes_are_4xx_and_change_nothing,
    a_raised_capacity_lets_two_holders_run_at_once_until_it_is_reset,
);

/// The resource every test shares: one model server.
fn model_server() -> ResourceSpec {
    ResourceSpec {
        name: "model-server".into(),
        capacity: 1,
        description: Some("one GPU".into()),
        scope: Default::default(),
        starts_per_minute: None,
        preempt_after_seconds: None,
        preempt_grace_seconds: None,
    }
}

/// The in-process API over the API tests' catalogue, with `tagger` and `transfer` sharing `model-server`.
fn api_with_resource(t: &TestDb) -> TestApi {
    let config = config_file(&t.url, t.dir.path(), &ApiConfig::default()).with(|f| {
        f.resources = vec![model_server()];
        for w in f.workers.iter_mut().filter(|w| w.name == "tagger" || w.name == "transfer") {
            w.resources = vec!["model-server".into()];
        }
    });
    in_process(t, config)
}

fn in_process(t: &TestDb, config: ConfigFile) -> TestApi {
    let settings = config.load(&t.dir.path().join("api.toml")).unwrap_or_else(|e| panic!("{e:#}"));
    let state = AppState::new(settings, t.db.api.clone());
    TestApi { router: app(state.clone()), state, peer: SocketAddr::from(([127, 0, 0, 1], 40000)) }
}

async fn put(api: &TestApi, name: &str, token: &str, body: Value) -> scrinalia_tests::Reply {
    api.send(Method::PUT, &format!("/api/resources/{name}"), Some(token), Some(body)).await
}

/// The only resource of the list.
async fn listed(api: &TestApi) -> Value {
    let list = api.get("/api/resources", VIEWER).await.expect(StatusCode::OK, None);
    let resources = list["resources"].as_array().expect("a list");
    assert_eq!(resources.len(), 1, "{list}");
    resources[0].clone()
}

async fn a_capacity_override_is_listed_and_each_change_is_audited(t: &TestDb) {
    let api = api_with_resource(t);
    let before = listed(&api).await;
    assert_eq!(
        before,
        json!({"name": "model-server", "description": "one GPU", "catalogue_capacity": 1, "capacity": 1,
            "source": "default", "updated_by": null, "updated_at": null, "holders": [], "scope": "global"})
    );

    let raised = put(&api, "model-server", ADMIN, json!({"capacity": 3, "reason": "a second GPU is in"}))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!((raised["capacity"].clone(), raised["catalogue_capacity"].clone()), (json!(3), json!(1)));
    assert_eq!((raised["source"].as_str(), raised["updated_by"].as_str()), (Some("override"), Some("ada-admin")));
    let now = t.db.api.now().await.expect("the database clock");
    let at: chrono::DateTime<chrono::Utc> = serde_json::from_value(raised["updated_at"].clone()).expect("a time");
    assert!((now - at).num_seconds().abs() < 30, "updated_at is the database clock's: {at} vs {now}");
    assert_eq!(listed(&api).await, raised, "the list shows what the change answered");

    let lowered = put(&api, "model-server", ADMIN, json!({"capacity": 2, "reason": "one GPU is flaky"})).await;
    assert_eq!(lowered.expect(StatusCode::OK, None)["capacity"], 2);
    let reset = put(&api, "model-server", ADMIN, json!({"capacity": null, "reason": "back to one"}))
        .await
        .expect(StatusCode::OK, None);
    assert_eq!(reset, before, "a reset follows the catalogue again");

    let trail = api.get("/api/resources/model-server/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(trail["resource"], "model-server");
    let entries: Vec<(Value, Value, Value, Value)> = trail["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (e["actor"].clone(), e["before"].clone(), e["after"].clone(), e["reason"].clone()))
        .collect();
    assert_eq!(
        entries,
        [
            (json!("ada-admin"), json!(2), Value::Null, json!("back to one")),
            (json!("ada-admin"), json!(3), json!(2), json!("one GPU is flaky")),
            (json!("ada-admin"), Value::Null, json!(3), json!("a second GPU is in")),
        ],
        "newest first, each with its actor, before, after and reason"
    );
    let one = api.get("/api/resources/model-server/audit?limit=1", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(one["entries"].as_array().map(Vec::len), Some(1));
    api.get("/api/resources/model-server/audit?limit=0", VIEWER)
        .await
        .expect(StatusCode::BAD_REQUEST, Some("invalid_query"));

    let doc = api.send(Method::GET, "/api/openapi.json", None, None).await.expect(StatusCode::OK, None);
    for (path, method) in
        [("/api/resources", "get"), ("/api/resources/{name}", "put"), ("/api/resources/{name}/audit", "get")]
    {
        assert!(doc["paths"][path][method].is_object(), "the document describes {method} {path}");
    }
}

async fn refused_capacity_changes_are_4xx_and_change_nothing(t: &TestDb) {
    let api = api_with_resource(t);
    let body = json!({"capacity": 2, "reason": "more"});
    for (token, who) in [(VIEWER, "vera-viewer"), (OPERATOR, "otto-operator")] {
        let refused =
            put(&api, "model-server", token, body.clone()).await.expect(StatusCode::FORBIDDEN, Some("forbidden"));
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.contains("admin") && message.contains(who), "{refused}");
    }
    api.send(Method::PUT, "/api/resources/model-server", None, Some(body.clone()))
        .await
        .expect(StatusCode::UNAUTHORIZED, Some("unauthorized"));

    let unknown =
        put(&api, "gpu-box", ADMIN, body.clone()).await.expect(StatusCode::NOT_FOUND, Some("unknown_resource"));
    assert!(unknown["message"].as_str().is_some_and(|m| m.contains("\"gpu-box\"")), "{unknown}");
    api.get("/api/resources/gpu-box/audit", VIEWER).await.expect(StatusCode::NOT_FOUND, Some("unknown_resource"));

    for (change, status, code, says) in [
        (json!({"capacity": 2}), StatusCode::BAD_REQUEST, "reason_required", "A reason is required"),
        (json!({"capacity": 2, "reason": "   "}), StatusCode::BAD_REQUEST, "reason_required", "A reason is required"),
        (json!({"capacity": 0, "reason": "off"}), StatusCode::BAD_REQUEST, "invalid_capacity", "A capacity of 0"),
        (json!({"capacity": 10001, "reason": "all"}), StatusCode::BAD_REQUEST, "invalid_capacity", "at most 10000"),
        (json!({"reason": "forgot"}), StatusCode::BAD_REQUEST, "invalid_capacity", "Say in `capacity`"),
        (json!({"capacity": -1, "reason": "r"}), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", "expected fields"),
        (json!({"capacity": "2", "reason": "r"}), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", "expected fields"),
        (
            json!({"capacity": 2, "reason": "r", "x": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            "unknown field",
        ),
    ] {
        let refused = put(&api, "model-server", ADMIN, change.clone()).await;
        let error = refused.expect_of(&format!("PUT {change}"), status, Some(code));
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(says) && message.ends_with('.'), "{change}: {message}");
    }
    let empty = api.send(Method::PUT, "/api/resources/model-server", Some(ADMIN), None).await;
    empty.expect(StatusCode::BAD_REQUEST, Some("invalid_capacity"));

    assert_eq!(listed(&api).await["source"], "default", "nothing was changed");
    let trail = api.get("/api/resources/model-server/audit", VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(trail["entries"], json!([]), "nothing was audited");
}

/// The daemon tests' probes with `probe-1`, `probe-2` and `probe-3` sharing one `model-server` slot, a daemon that
/// runs three at once (so only the resource holds a run back), and the API tests' tokens.
fn shared_model_server(t: &TestDb) -> ConfigFile {
    Setup::config(t, |d| d.capacity = 3)
        .with(|f| {
            f.resources = vec![model_server()];
            for w in &mut f.workers {
                w.resources = vec!["model-server".into()];
            }
        })
        .token("ada-admin", Role::Admin, ADMIN)
        .token("vera-viewer", Role::Viewer, VIEWER)
}

/// The probe's own record of a run: from its start line to its end line, in realtime ns.
fn span(setup: &Setup, run: Uuid) -> (i128, i128) {
    let (start, end) = setup.probe_run(run);
    let start = start.unwrap_or_else(|| panic!("run {run} has a start line")).at_ns;
    (start, end.unwrap_or_else(|| panic!("run {run} has an end line")).at_ns)
}

async fn a_raised_capacity_lets_two_holders_run_at_once_until_it_is_reset(t: &TestDb) {
    let setup = Setup::with(t, shared_model_server(t));
    let api = in_process(t, shared_model_server(t));
    let daemon = setup.start_daemon("daemon", &[]);
    let raised = put(&api, "model-server", ADMIN, json!({"capacity": 2, "reason": "a second GPU is in"})).await;
    assert_eq!(raised.expect(StatusCode::OK, None)["capacity"], 2);

    let first = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 2500})).await;
    let second = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 2500})).await;
    let holding = eventually(Duration::from_secs(20), "both probes holding the model server", || async {
        let r = listed(&api).await;
        (r["holders"].as_array().map(Vec::len) == Some(2)).then_some(r)
    })
    .await;
    let mut holders: Vec<&str> =
        holding["holders"].as_array().expect("holders").iter().filter_map(Value::as_str).collect();
    holders.sort_unstable();
    let mut expected = [first.id.to_string(), second.id.to_string()];
    expected.sort();
    assert_eq!(holders, expected, "the list names the runs holding it");

    // A third waits, and says for which capacity.
    let third = setup.request(&t.db.api, "probe-3", json!({"duration_ms": 100})).await;
    let third_path = format!("/api/runs/{}", third.id);
    let waits = |capacity: u32| {
        let (api, path) = (&api, &third_path);
        async move {
            eventually(Duration::from_secs(10), &format!("probe-3 waiting for capacity {capacity}"), || async {
                let run = api.get(path, VIEWER).await.expect(StatusCode::OK, None);
                let message = run["waiting"]["message"].as_str().unwrap_or_default().to_owned();
                (run["waiting"]["code"] == "resource_full" && message.contains(&format!("(capacity {capacity})")))
                    .then_some(message)
            })
            .await
        }
    };
    waits(2).await;

    // Back to the catalogue's 1 while two hold it: neither is stopped, and the third now waits for capacity 1.
    let reset = put(&api, "model-server", ADMIN, json!({"capacity": null, "reason": "the GPU went back"})).await;
    let reset = reset.expect(StatusCode::OK, None);
    assert_eq!((reset["capacity"].clone(), reset["holders"].as_array().map(Vec::len)), (json!(1), Some(2)));
    waits(1).await;
    for run in [first.id, second.id, third.id] {
        assert_eq!(
            wait_finished(&t.db.api, run, Duration::from_secs(30)).await.state,
            RunState::Succeeded,
            "run {run}"
        );
    }
    let (a, b, c) = (span(&setup, first.id), span(&setup, second.id), span(&setup, third.id));
    assert!(a.0 < b.1 && b.0 < a.1, "with capacity 2 both ran at once: {a:?} and {b:?}");
    assert!(c.0 >= a.1.max(b.1), "with capacity 1 the third started once both had ended: {c:?} after {a:?} {b:?}");

    // From now on one at a time again.
    let one = setup.request(&t.db.api, "probe-1", json!({"duration_ms": 400})).await;
    let two = setup.request(&t.db.api, "probe-2", json!({"duration_ms": 400})).await;
    for run in [one.id, two.id] {
        assert_eq!(
            wait_finished(&t.db.api, run, Duration::from_secs(30)).await.state,
            RunState::Succeeded,
            "run {run}"
        );
    }
    let (a, b) = (span(&setup, one.id), span(&setup, two.id));
    assert!(a.1 <= b.0 || b.1 <= a.0, "with capacity 1 the probes no longer overlap: {a:?} and {b:?}");
    assert!(listed(&api).await["holders"].as_array().is_some_and(Vec::is_empty), "nothing holds it once they ended");
    daemon.stop(Duration::from_secs(10)).await;
}
