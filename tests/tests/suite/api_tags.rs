//! Tags through the API, in-process on PostgreSQL and SQLite: a request's tags are stored and returned with its
//! run, and the ledger filtered by a tag (`GET /api/runs?tag=`, alone or with the other filters, page after page)
//! holds exactly the runs that carry it; a retry, a restart, a rerun and a sharded run's parent and children carry
//! the tags of the run they follow; a schedule's tags reach the runs it fires, and a pipeline's (its catalogue's,
//! then its starter's or its schedule's) each of its steps' runs; tags that are not short words, or more than ten,
//! are a 400 with a sentence naming the tag (the real binaries' refusals are in `bad_input::tags`).

use std::time::Duration;

use axum::http::StatusCode;
use scrinalia_api::{AppState, app};
use scrinalia_shared::{Description, EndReason, catalogue::PipelineSpec, descriptions::NewDescription, runs::Finish};
use scrinalia_tests::{
    TestDb,
    api_harness::{ApiConfig, OPERATOR, TestApi, VIEWER, config_file},
    backend_tests, eventually,
    fixtures::{LONG_LEASE, succeeded},
};
use serde_json::{Value, json};
use uuid::Uuid;

backend_tests!(
    a_tagged_request_is_stored_returned_and_found_by_its_tag,
    continuations_and_shards_carry_the_tags_of_the_run_they_follow,
    schedules_and_pipelines_pass_their_tags_to_their_runs,
);

const LETTERS: &str = "collection:1921-letters";

/// The test API (workers `tagger`, `judge`, `transfer`) with pipeline `p` (`tagger` then `judge`, tagged
/// `pipeline:p`) and pipeline `q` (`tagger` alone, untagged).
async fn api_of(t: &TestDb) -> TestApi {
    let pipelines = vec![
        PipelineSpec {
            name: "p".into(),
            description: None,
            steps: vec!["tagger".into(), "judge".into()],
            tags: vec!["pipeline:p".into()],
        },
        PipelineSpec { name: "q".into(), description: None, steps: vec!["tagger".into()], tags: Vec::new() },
    ];
    let config = config_file(&t.url, t.dir.path(), &ApiConfig::default()).with(|f| f.pipelines = pipelines);
    let settings = config.load(&t.dir.path().join("config.toml")).expect("a valid configuration");
    let state = AppState::new(settings, t.db.api.clone());
    TestApi { router: app(state.clone()), state, peer: std::net::SocketAddr::from(([127, 0, 0, 1], 40000)) }
}

fn uuid_of(v: &Value) -> Uuid {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a UUID, not {v}"))
}

/// The ids of a page of runs, in its order.
fn ids(page: &Value) -> Vec<Uuid> {
    page["runs"].as_array().expect("runs").iter().map(|r| uuid_of(&r["id"])).collect()
}

async fn page(api: &TestApi, query: &str) -> Value {
    api.get(&format!("/api/runs?{query}"), VIEWER).await.expect(StatusCode::OK, None)
}

/// Claims the queued run of `worker` and ends it with `finish`.
async fn end(t: &TestDb, worker: &str, finish: &Finish) -> Uuid {
    let daemon = Uuid::now_v7();
    let only = [worker.to_owned()];
    let claimed = t.db.daemon.claim_runs(daemon, LONG_LEASE, 1, Some(&only)).await.expect("claim");
    let run = claimed.first().unwrap_or_else(|| panic!("a queued run of {worker}")).id;
    t.db.daemon.mark_started(run, daemon, "runs/x").await.expect("started");
    t.db.daemon.finish_run(run, daemon, finish).await.expect("finish");
    run
}

fn failed() -> Finish {
    Finish { reason: EndReason::ExitStatus, exit_code: Some(1), error: Some("boom".into()), result: None, usage: None }
}

async fn a_tagged_request_is_stored_returned_and_found_by_its_tag(t: &TestDb) {
    let api = api_of(t).await;
    // A tag given twice is kept once, in the order given.
    let first = api.trigger("tagger", Some(json!({"tags": [LETTERS, "batch:7", LETTERS]}))).await;
    assert_eq!(first["tags"], json!([LETTERS, "batch:7"]), "{first}");
    let first_id = uuid_of(&first["id"]);
    let second = api.trigger("judge", Some(json!({"tags": [LETTERS]}))).await;
    let second_id = uuid_of(&second["id"]);
    let plain = api.trigger("transfer", None).await;
    assert_eq!(plain["tags"], json!([]), "a run without tags says so: {plain}");
    assert!(first["arguments"].get("tags").is_none(), "tags are no argument: {first}");

    let read = api.get(&format!("/api/runs/{first_id}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(read["tags"], json!([LETTERS, "batch:7"]));
    let all = page(&api, "").await;
    assert_eq!(ids(&all).len(), 3);
    assert_eq!(all["runs"][0]["tags"], json!([]), "the newest is the plain one");

    // Exactly the runs that carry the tag, newest first; with the other filters too.
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}")).await), [second_id, first_id]);
    assert_eq!(ids(&page(&api, "tag=batch:7").await), [first_id]);
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}&worker=judge")).await), [second_id]);
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}&state=queued")).await), [second_id, first_id]);
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}&state=failed")).await), Vec::<Uuid>::new());
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}&requested_by=nobody")).await), Vec::<Uuid>::new());
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}&id={first_id}")).await), [first_id]);
    assert_eq!(ids(&page(&api, "tag=nothing-carries-this").await), Vec::<Uuid>::new());
    assert_eq!(ids(&page(&api, "tag=").await).len(), 3, "an empty tag filters nothing");
    // Page by page.
    let one = page(&api, &format!("tag={LETTERS}&limit=1")).await;
    assert_eq!(ids(&one), [second_id]);
    let next = one["next"].as_str().expect("a next page");
    let two = page(&api, &format!("tag={LETTERS}&limit=1&after={next}")).await;
    assert_eq!(ids(&two), [first_id]);
    assert!(two["next"].is_null(), "the last page: {two}");

    // Bad tags: a 400 with the sentence, nothing queued.
    api.post(&format!("/api/runs/{first_id}/cancel"), OPERATOR, None).await.expect(StatusCode::ACCEPTED, None);
    let eleven: Vec<String> = (0..11).map(|i| format!("t{i}")).collect();
    let long = "x".repeat(65);
    for (tags, says) in [
        (json!(eleven), "A run takes at most 10 tags, 11 given.".to_owned()),
        (json!(["ok", "a b"]), "Tag \"a b\" is not a short word (it has a space): a tag is 1 to 64".to_owned()),
        (json!([""]), "Tag \"\" is not a short word (it is empty)".to_owned()),
        (json!([long]), format!("Tag \"{long}\" is not a short word (it is longer than 64 characters)")),
        (json!(["Letters"]), "Tag \"Letters\" is not a short word (it has a capital letter)".to_owned()),
    ] {
        let reply = api.post("/api/workers/tagger/runs", OPERATOR, Some(json!({"tags": tags}))).await;
        let refused = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_tags"));
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&says), "{tags}: {message}");
    }
    let reply = api.post("/api/workers/tagger/runs", OPERATOR, Some(json!({"tags": "one"}))).await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"));
    let reply = api.get("/api/runs?tag=a%20b", VIEWER).await;
    let refused = reply.expect(StatusCode::BAD_REQUEST, Some("invalid_query"));
    assert!(refused["message"].as_str().unwrap_or_default().starts_with("`tag`: Tag \"a b\" is not a short word"));
    assert_eq!(ids(&page(&api, "").await).len(), 3, "nothing refused was queued");
}

async fn continuations_and_shards_carry_the_tags_of_the_run_they_follow(t: &TestDb) {
    let api = api_of(t).await;
    let tags = json!([LETTERS]);
    let retry = json!({"max_attempts": 2, "initial_delay_seconds": 600, "max_delay_seconds": 600});
    let first = api.trigger("tagger", Some(json!({"retry": retry, "tags": tags}))).await;
    let first_id = uuid_of(&first["id"]);
    end(t, "tagger", &failed()).await;
    let chain = t.db.api.run_chain(first_id).await.expect("the chain");
    let [_, retry] = chain.as_slice() else { panic!("the run and its retry: {chain:?}") };
    assert_eq!(retry.retry_of, Some(first_id));
    assert_eq!(retry.tags, [LETTERS], "a retry keeps its run's tags");
    api.post(&format!("/api/runs/{}/cancel", retry.id), OPERATOR, None).await.expect(StatusCode::ACCEPTED, None);

    for how in ["restart", "rerun"] {
        let next = api.post(&format!("/api/runs/{first_id}/{how}"), OPERATOR, None).await;
        let next = next.expect(StatusCode::CREATED, None);
        assert_eq!(next["tags"], tags, "a {how} keeps its run's tags: {next}");
        let id = next["id"].as_str().expect("an id");
        api.post(&format!("/api/runs/{id}/cancel"), OPERATOR, None).await.expect(StatusCode::ACCEPTED, None);
    }

    // A sharded run: the parent and each child carry the request's tags.
    let description: Description =
        serde_json::from_value(json!({"capabilities": {"shards": true}})).expect("a description");
    let described = NewDescription {
        worker: "transfer".into(),
        outcome: Ok(description),
        described_by: Uuid::now_v7(),
        command: vec!["transfer".into()],
        took_ms: 1,
    };
    t.db.daemon.store_description(&described).await.expect("described");
    let parent = api.trigger("transfer", Some(json!({"shards": 2, "tags": ["part:a"]}))).await;
    assert_eq!(parent["tags"], json!(["part:a"]), "{parent}");
    let children = t.db.api.run_children(uuid_of(&parent["id"])).await.expect("the children");
    assert_eq!(children.len(), 2);
    assert!(children.iter().all(|c| c.tags == ["part:a"]), "{children:?}");
    assert_eq!(ids(&page(&api, "tag=part:a").await).len(), 3, "the parent and its two children");

    // The first run's whole line is found by its tag: it, its retry, the restart and the rerun.
    assert_eq!(ids(&page(&api, &format!("tag={LETTERS}")).await).len(), 4);
}

async fn schedules_and_pipelines_pass_their_tags_to_their_runs(t: &TestDb) {
    let api = api_of(t).await;
    // A pipeline started by hand: its own tags, then its starter's (each once).
    let started = api.post("/api/pipelines/p/runs", OPERATOR, Some(json!({"tags": ["by-hand", "pipeline:p"]}))).await;
    let started = started.expect(StatusCode::CREATED, None);
    let both = json!(["pipeline:p", "by-hand"]);
    assert_eq!(started["tags"], both, "{started}");
    assert_eq!(started["runs"][0]["tags"], both, "the first step's run: {started}");
    end(t, "tagger", &succeeded()).await;
    let path = format!("/api/pipeline-runs/{}", started["id"].as_str().expect("an id"));
    let view = api.get(&path, VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(view["runs"][1]["worker"], "judge", "{view}");
    assert_eq!(view["runs"][1]["tags"], both, "the second step's run: {view}");
    let eleven: Vec<String> = (0..11).map(|i| format!("t{i}")).collect();
    let reply = api.post("/api/pipelines/q/runs", OPERATOR, Some(json!({"tags": eleven}))).await;
    reply.expect(StatusCode::BAD_REQUEST, Some("invalid_tags"));

    // Schedules of a worker and of a pipeline: each fire's runs carry the schedule's tags.
    for (name, target, tags) in [
        ("nightly", json!({"worker": "transfer"}), json!(["nightly"])),
        ("nightly-q", json!({"pipeline": "q"}), json!(["sched:q"])),
    ] {
        let mut body = json!({"name": name, "cron": "* * * * * *", "tags": tags, "reason": "tagged fires"});
        body.as_object_mut().expect("an object").extend(target.as_object().expect("a target").clone());
        let created = api.post("/api/schedules", OPERATOR, Some(body)).await.expect(StatusCode::CREATED, None);
        assert_eq!(created["tags"], tags, "{created}");
    }
    let bad = json!({"name": "bad", "worker": "judge", "cron": "@daily", "tags": ["a b"], "reason": "no"});
    let refused =
        api.post("/api/schedules", OPERATOR, Some(bad)).await.expect(StatusCode::BAD_REQUEST, Some("invalid_tags"));
    assert!(refused["message"].as_str().unwrap_or_default().starts_with("Tag \"a b\" is not a short word"));

    let requested = |name: &'static str, key: &'static str| {
        let api = api.clone();
        async move {
            let fires = api.get(&format!("/api/schedules/{name}/fires"), VIEWER).await.expect(StatusCode::OK, None);
            fires.as_array()?.iter().find(|f| f["outcome"] == "requested").map(|f| uuid_of(&f[key]))
        }
    };
    let (run, pipeline_run) = eventually(Duration::from_secs(20), "both schedules to fire", || async {
        t.db.daemon
            .fire_due_schedules(api.state.catalogue(), Uuid::now_v7(), Duration::from_secs(60))
            .await
            .expect("fire what is due");
        Some((requested("nightly", "run_id").await?, requested("nightly-q", "pipeline_run_id").await?))
    })
    .await;
    let fired = api.get(&format!("/api/runs/{run}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(fired["tags"], json!(["nightly"]), "{fired}");
    assert_eq!(ids(&page(&api, "tag=nightly").await), [run]);
    let view = api.get(&format!("/api/pipeline-runs/{pipeline_run}"), VIEWER).await.expect(StatusCode::OK, None);
    assert_eq!(view["tags"], json!(["sched:q"]), "{view}");
    assert_eq!(view["runs"][0]["tags"], json!(["sched:q"]), "{view}");
}
