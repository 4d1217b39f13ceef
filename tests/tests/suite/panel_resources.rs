//! The panel's Resources view in a real headless Chromium against the real `scrinalia-api` and
//! `scrinalia-daemon` (anonymous admin on loopback): a resource with its capacity, source and the run holding it
//! (linked); a change refused in the page without a reason; the capacity raised with a reason, shown as an
//! override and in the audit trail; and put back to the catalogue's.

use scrinalia_shared::{ResourceSpec, Role};
use scrinalia_tests::{
    Kind, TestDb,
    browser::{Browser, PATIENCE},
    daemon_harness::probe,
    demo_worker, eventually, free_port,
};
use serde_json::{Value, json};

const CARD: &str = "article[data-resource=\"model-server\"]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_raises_and_resets_a_capacity_from_the_resources_view() {
    let db = TestDb::new(Kind::Sqlite).await;
    let dir = db.dir.path().to_path_buf();
    let port = free_port();
    let mut holder = probe(&demo_worker(), "probe-1", 120);
    holder.resources = vec!["model-server".into()];
    let config = db
        .config()
        .test_daemon(|d| (d.capacity, d.poll_seconds) = (2, 1))
        .with(|f| {
            (f.api.listen, f.api.events_poll_ms) = (([127, 0, 0, 1], port).into(), 100);
            (f.auth.anonymous_role, f.auth.anonymous_loopback_only) = (Some(Role::Admin), true);
            f.resources = vec![ResourceSpec {
                name: "model-server".into(),
                capacity: 1,
                description: Some("the archive's one Ollama server".into()),
                scope: Default::default(),
                starts_per_minute: None,
                preempt_after_seconds: None,
                preempt_grace_seconds: None,
            }];
        })
        .worker(holder);
    let path = db.write_config(&config, "config").display().to_string();
    let api = scrinalia_tests::start("scrinalia-api", "api", &dir, &["--config", &path], &[]);
    let daemon = scrinalia_tests::start("scrinalia-daemon", "daemon", &dir, &["--config", &path], &[]);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let request = http.get(format!("{base}{path}")).send();
        async move { request.await.ok()?.json::<Value>().await.ok() }
    };

    let run: Value = eventually(PATIENCE, "a long run of probe-1 requested", || async {
        let body = json!({"options": {"duration_ms": 60_000}});
        let reply = http.post(format!("{base}/api/workers/probe-1/runs")).json(&body).send().await.ok()?;
        reply.status().is_success().then_some(())?;
        reply.json().await.ok()
    })
    .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    eventually(PATIENCE, "the run holding the model server", || async {
        let list = get("/api/resources").await?;
        (list["resources"][0]["holders"] == json!([id])).then_some(())
    })
    .await;

    let browser = Browser::start("resources", &dir, 1280, 900).await;
    browser.goto(&format!("{base}/#/resources")).await;
    browser.wait_for(&format!("{CARD} .capacity[data-capacity=\"1\"]")).await;
    browser.wait_for(&format!("{CARD} .holders a[href=\"#/runs/{id}\"]")).await;
    let summary = browser.text(&format!("{CARD} .resource-summary")).await.unwrap_or_default();
    assert!(summary.contains("the catalogue's") && summary.contains("1 of 1"), "{summary:?}");
    assert_eq!(browser.is_enabled(&format!("{CARD} button.reset")).await, Some(false), "nothing to reset yet");

    // Without a reason the page says so, and nothing is sent.
    browser.type_into("#resource-model-server-capacity", "2").await;
    browser.click(&format!("{CARD} button.save")).await;
    browser.wait_for_text("#resource-model-server-alert", "Give a reason").await;

    browser.type_into("#resource-model-server-reason", "a second GPU is in").await;
    browser.click(&format!("{CARD} button.save")).await;
    browser.wait_for_text("#resource-model-server-status", "Capacity set to 2").await;
    browser.wait_for(&format!("{CARD} .capacity[data-capacity=\"2\"]")).await;
    let summary = browser.text(&format!("{CARD} .resource-summary")).await.unwrap_or_default();
    assert!(summary.contains("override by anonymous") && summary.contains("the catalogue says 1"), "{summary:?}");
    let listed = get("/api/resources").await.expect("the list");
    assert_eq!(
        (listed["resources"][0]["capacity"].clone(), listed["resources"][0]["source"].clone()),
        (json!(2), json!("override"))
    );

    browser.click(&format!("{CARD} details.resource-audit summary")).await;
    let row = browser.wait_for_text(&format!("{CARD} table.audit tbody tr"), "a second GPU is in").await;
    assert!(row.contains("anonymous") && row.contains("catalogue → 2"), "{row:?}");
    browser.screenshot("resources-override").await;

    browser.type_into("#resource-model-server-reason", "the GPU went back").await;
    browser.click(&format!("{CARD} button.reset")).await;
    browser.wait_for_text("#resource-model-server-status", "Back to the catalogue's capacity, 1.").await;
    browser.wait_for(&format!("{CARD} .capacity[data-capacity=\"1\"]")).await;
    browser.wait_for_text(&format!("{CARD} table.audit tbody tr"), "the GPU went back").await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    let cancel = http.post(format!("{base}/api/runs/{id}/cancel")).send().await.expect("cancel the long run");
    assert!(cancel.status().is_success(), "{}", cancel.status());
    drop((api, daemon));
    db.cleanup().await;
}
