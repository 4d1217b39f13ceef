//! The real `scrinalia-api` binary: three processes on one PostgreSQL database take 200 concurrent triggers of
//! one worker (exactly one 201, 199 × 409, no 5xx), an SSE client of one process sees a run triggered through
//! another, and SIGTERM stops each cleanly even with a live stream open. On PostgreSQL and SQLite, an SSE client
//! of one process sees each override set or cleared through another as one `override` event. Also the `token`
//! command.

use std::{
    net::SocketAddr,
    process::Command,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use scrinalia_shared::auth::{hash_token, is_token_hash};
use scrinalia_tests::{
    Process, TestDb,
    api_harness::{ADMIN, ApiConfig, OPERATOR, VIEWER, config_file},
    backend_tests, bin_path, eventually, free_port,
    sse::EventStream,
};
use serde_json::{Value, json};

backend_tests!(an_override_set_or_cleared_through_one_api_process_is_one_override_event_on_another);

/// Starts one API process on a free port; returns it and its base URL.
fn start_api(t: &TestDb, name: &str) -> (Process, String) {
    let port = free_port();
    let config = ApiConfig { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..ApiConfig::default() };
    let path = t.write_config(&config_file(&t.url, t.dir.path(), &config), name);
    let path = path.display().to_string();
    (
        scrinalia_tests::start("scrinalia-api", name, t.dir.path(), &["--config", &path, "serve"], &[]),
        format!("http://127.0.0.1:{port}"),
    )
}

/// Reads until `count` whole `override` events have arrived; returns the data of all of them.
async fn overrides<S, B, E>(stream: &mut EventStream<S>, count: usize) -> Vec<Value>
where
    S: futures::Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let what = format!("{count} override events");
    stream
        .until(Duration::from_secs(10), &what, |e| {
            (e.iter().filter(|e| e.name == "override").count() >= count).then_some(())
        })
        .await;
    stream.named("override")
}

/// Another browser must learn of an override change: the event comes from the database (a trigger on PostgreSQL,
/// the poller on SQLite), not from the process that made the change, so the watcher is a different process.
async fn an_override_set_or_cleared_through_one_api_process_is_one_override_event_on_another(t: &TestDb) {
    let (watcher, watched) = start_api(t, "api-watcher");
    let (editor, edited) = start_api(t, "api-editor");
    let client = reqwest::Client::new();
    for (process, base) in [(&watcher, &watched), (&editor, &edited)] {
        let ready = format!("{base}/readyz");
        eventually(Duration::from_secs(30), &format!("{} to be ready:\n{}", process.name, process.output()), || {
            let request = client.get(&ready).send();
            async move { request.await.ok().filter(|r| r.status() == reqwest::StatusCode::OK) }
        })
        .await;
    }
    let events = client.get(format!("{watched}/api/events")).bearer_auth(VIEWER).send().await.expect("subscribe");
    assert_eq!(events.status(), reqwest::StatusCode::OK);
    let mut stream = EventStream::new(events.bytes_stream());
    stream.event(Duration::from_secs(5), "ready", |_| true).await;

    let override_url = format!("{edited}/api/workers/tagger/override");
    let set = client
        .put(&override_url)
        .bearer_auth(ADMIN)
        .json(&json!({"preset": "big", "reason": "bigger model for the backlog"}))
        .send()
        .await
        .expect("PUT the override");
    assert_eq!(set.status(), reqwest::StatusCode::OK, "{}", set.text().await.unwrap_or_default());
    let after_set = overrides(&mut stream, 1).await;
    assert_eq!(after_set, [json!({"kind": "override", "worker": "tagger", "actor": "ada-admin", "action": "set"})]);

    let clear = client
        .delete(format!("{override_url}?reason=back%20to%20the%20default"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("DELETE the override");
    assert_eq!(clear.status(), reqwest::StatusCode::OK, "{}", clear.text().await.unwrap_or_default());
    // Exactly one event per change: the set was not repeated before the clear arrived.
    let after_clear = overrides(&mut stream, 2).await;
    assert_eq!(after_clear.len(), 2, "one event per change: {after_clear:?}");
    assert_eq!(
        after_clear[1],
        json!({"kind": "override", "worker": "tagger", "actor": "ada-admin", "action": "clear"})
    );
    let trail: Value = client
        .get(format!("{edited}/api/workers/tagger/audit"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .expect("the audit trail")
        .json()
        .await
        .expect("JSON");
    let actions: Vec<&Value> = trail["entries"].as_array().expect("entries").iter().map(|e| &e["action"]).collect();
    assert_eq!(actions, ["clear", "set"], "one event per audit entry: {trail}");

    drop(stream);
    for mut process in [watcher, editor] {
        process.signal(Signal::SIGTERM);
        let code = process.wait(Duration::from_secs(15)).await;
        assert_eq!(code, Some(0), "{} exits 0 on SIGTERM:\n{}", process.name, process.output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_api_processes_on_one_postgres_admit_exactly_one_of_200_concurrent_triggers() {
    let t = TestDb::postgres().await;
    let mut processes = Vec::new();
    let mut bases = Vec::new();
    for name in ["api-a", "api-b", "api-c"] {
        let (process, base) = start_api(&t, name);
        processes.push(process);
        bases.push(base);
    }
    let client = reqwest::Client::new();
    for (process, base) in processes.iter().zip(&bases) {
        let ready = format!("{base}/readyz");
        eventually(Duration::from_secs(30), &format!("{} to be ready:\n{}", process.name, process.output()), || {
            let request = client.get(&ready).send();
            async move { request.await.ok().filter(|r| r.status() == reqwest::StatusCode::OK) }
        })
        .await;
    }

    let events = client.get(format!("{}/api/events", bases[0])).bearer_auth(VIEWER).send().await.expect("subscribe");
    assert_eq!(events.status(), reqwest::StatusCode::OK);
    let mut stream = EventStream::new(events.bytes_stream());
    stream.event(Duration::from_secs(5), "ready", |_| true).await;

    let started = Instant::now();
    let triggers = (0..200).map(|i| {
        let request = client.post(format!("{}/api/workers/tagger/runs", bases[i % 3])).bearer_auth(OPERATOR).send();
        async move {
            let response = request.await.expect("an answer");
            let status = response.status();
            (status, response.json::<Value>().await.expect("a JSON body"))
        }
    });
    let answers = futures::future::join_all(triggers).await;
    let took = started.elapsed();
    let created: Vec<&Value> =
        answers.iter().filter(|(s, _)| *s == reqwest::StatusCode::CREATED).map(|(_, b)| b).collect();
    let conflicts: Vec<&Value> =
        answers.iter().filter(|(s, _)| *s == reqwest::StatusCode::CONFLICT).map(|(_, b)| b).collect();
    let others: Vec<_> = answers.iter().filter(|(s, _)| !matches!(s.as_u16(), 201 | 409)).collect();
    assert!(others.is_empty(), "only 201 and 409: {others:?}");
    assert_eq!((created.len(), conflicts.len()), (1, 199), "exactly one trigger wins");
    let winner = created[0]["id"].as_str().expect("an id");
    assert!(
        conflicts.iter().all(|c| c["code"] == "run_in_flight" && c["run_id"] == winner),
        "every 409 names the winner"
    );
    eprintln!("200 concurrent triggers over 3 processes answered in {took:?}");

    // A run triggered through C is seen by the SSE client of A.
    let cancel = client.post(format!("{}/api/runs/{winner}/cancel", bases[1])).bearer_auth(OPERATOR).send().await;
    assert_eq!(cancel.expect("cancel").status(), reqwest::StatusCode::ACCEPTED);
    let triggered = Instant::now();
    let run: Value = client
        .post(format!("{}/api/workers/transfer/runs", bases[2]))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .expect("trigger through C")
        .json()
        .await
        .expect("a run");
    let id = run["id"].as_str().expect("an id");
    stream.event(Duration::from_secs(5), "run", |e| e["run"] == id).await;
    eprintln!("the SSE client of A saw the run triggered through C after {:?}", triggered.elapsed());
    stream.event(Duration::from_secs(5), "run", |e| e["run"] == winner && e["state"] == "cancelled").await;

    // SIGTERM: each process stops cleanly, ending the live stream it serves.
    for process in &processes {
        process.signal(Signal::SIGTERM);
    }
    for process in &mut processes {
        let code = process.wait(Duration::from_secs(15)).await;
        assert_eq!(code, Some(0), "{} exits 0 on SIGTERM:\n{}", process.name, process.output());
        assert!(process.output().contains("API stopped"), "{}", process.output());
    }
    assert!(stream.ends_within(Duration::from_secs(5)).await, "the SSE stream ended with the process");
    t.cleanup().await;
}

#[test]
fn the_token_command_prints_a_token_and_its_configuration_entry() {
    let output = Command::new(bin_path("scrinalia-api"))
        .args(["token", "--role", "operator", "--name", "ci-bot"])
        .output()
        .expect("run scrinalia-api token");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("text");
    let token = text.lines().find_map(|l| l.trim_start_matches('#').trim().strip_prefix("scr_")).expect("a token line");
    let hash = text.lines().find_map(|l| l.strip_prefix("hash = ")).expect("a hash line").trim_matches('"');
    assert!(is_token_hash(hash));
    assert_eq!(hash_token(&format!("scr_{token}")), hash, "the printed hash is the token's");
    assert!(
        text.contains("[[auth.tokens]]") && text.contains("name = \"ci-bot\"") && text.contains("role = \"operator\"")
    );

    let refused = Command::new(bin_path("scrinalia-api")).args(["token", "--role", "root"]).output().expect("run");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("the roles are viewer, operator and admin"));
    let missing = Command::new(bin_path("scrinalia-api"))
        .args(["--config", "/nonexistent/scrinalia.toml"])
        .output()
        .expect("run");
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("does not exist"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}
