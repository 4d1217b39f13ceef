//! Access with tokens: signed out the panel asks for one, a viewer sees everything but no control, and an
//! admin's override is audited and effective; then the engine configured elsewhere, a reported model that
//! differs, and a narrow screen.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::Browser};
use serde_json::json;

use super::{
    ADMIN_TOKEN, DISAGREEMENTS, NOT_READY, REPORTED_MODEL, VIEWER_TOKEN, open_cards,
    stack::{Access, Stack},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_controls_and_an_admin_override_is_audited_and_effective() {
    let stack = Stack::start(Kind::Sqlite, Access::Tokens).await;
    let browser = stack.open_panel("tokens").await;

    // Signed out: the panel asks for a token and reads nothing else.
    browser.wait_for("#who[data-role=\"none\"]").await;
    browser.wait_for_text("main h1", "Sign in").await;
    browser.type_into("#token-input", "scr_not_a_token_of_this_api").await;
    browser.click("#signin-form button[type=\"submit\"]").await;
    browser.wait_for_text("#signin-error", "not one this API accepts").await;
    sign_in(&browser, VIEWER_TOKEN, "viewer").await;
    open_cards(&browser, &["probe-1", "probe-2", "probe-3"]).await;
    browser.wait_for("article[data-worker=\"probe-1\"] .queue").await;
    browser.wait_for("#health li[data-check=\"database\"][data-status=\"ok\"]").await;

    // A run in flight (started by someone else): the viewer sees it live, but no Run and no Cancel.
    let (status, run) = stack.post("/api/workers/probe-1/runs", json!({"options": {"duration_ms": 60000}})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    browser.wait_for("article[data-worker=\"probe-1\"] .in-flight").await;
    assert!(browser.find_all("button.run").await.is_empty(), "a viewer sees no Run button");
    assert!(browser.find_all("button.cancel").await.is_empty(), "a viewer sees no Cancel button");
    assert!(browser.find_all(".run-options").await.is_empty(), "a viewer sees no run form");
    assert!(browser.find_all("button.chore").await.is_empty(), "a viewer sees no chore buttons");
    // Readiness and disagreements are for everyone to read.
    browser.wait_for_text("article[data-worker=\"probe-3\"] .readiness-line", NOT_READY).await;
    browser.wait_for_text("article[data-worker=\"probe-3\"] .disagreements", DISAGREEMENTS[0]).await;
    browser.screenshot("viewer-workers").await;
    let (status, _) = stack.post(&format!("/api/runs/{}/cancel", run["id"].as_str().expect("id")), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    browser.wait_for("article[data-worker=\"probe-1\"] .last[data-state=\"cancelled\"]").await;

    browser.goto(&format!("{}/#/overrides/probe-1", stack.base)).await;
    browser.wait_for_text("main", "needs the admin role").await;
    assert!(browser.find("#override-form").await.is_none(), "a viewer sees no override form");

    // An admin sets a partial override with a reason: it shows in the audit trail and the effective config.
    browser.click("#session button.link").await;
    browser.wait_for("#who[data-role=\"none\"]").await;
    sign_in(&browser, ADMIN_TOKEN, "admin").await;
    browser.goto(&format!("{}/#/overrides/probe-1", stack.base)).await;
    browser.wait_for("#override-form").await;
    browser.wait_for_text("#audit-title", "Audit trail").await;
    browser.type_into("#ov-opt-duration_ms", "1234").await;
    browser.click("#override-form button[type=\"submit\"]").await;
    browser.wait_for_text("#override-alert", "Give a reason").await;
    browser.type_into("#ov-reason", "e2e: a shorter probe for the demo").await;
    browser.click("#override-form button[type=\"submit\"]").await;
    let entry = browser.wait_for_text("#audit tbody tr", "e2e: a shorter probe for the demo").await;
    assert!(entry.contains("e2e-admin") && entry.contains("duration_ms") && entry.contains("1234"), "{entry:?}");
    let effective = browser.wait_for_text("#effective tr[data-field=\"duration_ms\"]", "1234").await;
    assert!(effective.contains("override"), "the effective value is marked override: {effective:?}");
    browser.screenshot("overrides").await;

    browser.click("nav.views a[data-nav=\"workers\"]").await;
    let option =
        browser.wait_for_text("article[data-worker=\"probe-1\"] li[data-option=\"duration_ms\"]", "1234").await;
    assert!(option.contains("override"), "{option:?}");
    assert!(browser.find("article[data-worker=\"probe-1\"] button.run").await.is_some(), "an admin may run");

    // The quality probe's engine is not editable: the panel says where it comes from and links there.
    browser.goto(&format!("{}/#/overrides/probe-2", stack.base)).await;
    browser.wait_for_text(".engine-source", "LLM_CHECK cleaning rule").await;
    assert_eq!(browser.attr("#engine-source-link", "href").await.as_deref(), Some("/rules#llm-check"));
    browser.wait_for("#override-form").await;
    assert!(browser.find("#ov-engine").await.is_none(), "no engine field for an engine configured elsewhere");

    // Its run reports the model it really used, which is not the one resolved here: the run view says so.
    let (status, run) = stack.post("/api/workers/probe-2/runs", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    browser.goto(&format!("{}/#/runs/{}", stack.base, run["id"].as_str().expect("id"))).await;
    browser.wait_for(".view-head[data-state=\"succeeded\"]").await;
    let model =
        browser.wait_for_text("#run-config tr[data-field=\"model\"][data-differs=\"true\"]", REPORTED_MODEL).await;
    assert!(model.contains("big-model") && model.contains("differs"), "resolved and reported models: {model:?}");
    let note = browser.wait_for_text("#reported-differs", "different model").await;
    assert!(!note.contains("engine"), "only the model differs: {note:?}");
    browser.screenshot("run-reported-config").await;

    // A narrow screen: one column, nothing wider than the window.
    browser.client.set_window_size(390, 844).await.expect("resize");
    browser.goto(&format!("{}/#/workers", stack.base)).await;
    browser.wait_for("article[data-worker=\"probe-3\"]").await;
    let fits = browser.js("return document.documentElement.scrollWidth <= window.innerWidth + 1;", vec![]).await;
    assert_eq!(fits, json!(true), "no horizontal scrolling on a narrow screen");
    browser.screenshot("workers-narrow").await;

    // Only the expected 401s (GET /api/me signed out, and with the refused token) are in the console.
    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    stack.stop().await;
}

async fn sign_in(browser: &Browser, token: &str, role: &str) {
    browser.type_into("#token-input", token).await;
    browser.click("#signin-form button[type=\"submit\"]").await;
    browser.wait_for(&format!("#who[data-role={role:?}]")).await;
}
