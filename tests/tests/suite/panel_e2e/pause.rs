//! An admin pauses a worker from its card, with a reason (none is refused before anything is sent): the card says
//! "Paused since … by …: reason", its Run button is disabled with why, and the API refuses a Run with
//! `worker_paused`; Resume, with a reason, restores the Run button; the pause history keeps both.

use reqwest::StatusCode;
use scrinalia_tests::{Kind, browser::PATIENCE, eventually};
use serde_json::json;

use super::{
    ADMIN_TOKEN, open_cards, sign_in,
    stack::{Access, Stack},
};

const CARD: &str = "article[data-worker=\"probe-1\"]";

/// The visible reason form of the card's pause box (Pause's or Resume's).
fn open_form(part: &str) -> String {
    format!("{CARD} .pause-box .release-ask:not([hidden]) form:not([hidden]) {part}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pauses_and_resumes_a_worker_from_its_card() {
    let stack = Stack::start(Kind::Sqlite, Access::Tokens).await;
    let browser = stack.open_panel("pause").await;
    sign_in(&browser, ADMIN_TOKEN, "admin").await;
    open_cards(&browser, &["probe-1"]).await;
    browser.wait_for(&format!("{CARD} button.run")).await;

    // Pause asks for a reason, and refuses none before anything is sent.
    browser.click(&format!("{CARD} .pause-box button.pause")).await;
    browser.click(&open_form("button[type=\"submit\"]")).await;
    browser.wait_for_text(&format!("{CARD} .pause-box .release-ask:not([hidden]) .alert"), "Give a reason").await;
    browser.type_into(&open_form("textarea"), "the model server is down").await;
    browser.click(&open_form("button[type=\"submit\"]")).await;
    browser.wait_for(&format!("{CARD}[data-paused=\"true\"]")).await;
    let line = browser.wait_for_text(&format!("{CARD} .paused-line"), "the model server is down").await;
    assert!(line.starts_with("Paused since ") && line.contains(" by e2e-admin: "), "{line:?}");
    browser.wait_for_text(&format!("{CARD} .reason"), "paused").await;
    assert_eq!(browser.is_enabled(&format!("{CARD} button.run")).await, Some(false), "no Run while paused");
    assert!(browser.find(&format!("{CARD} .pause-box button.resume")).await.is_some(), "Resume is offered");
    browser.screenshot("worker-paused").await;
    let (status, refused) = stack.post("/api/workers/probe-1/runs", json!({})).await;
    assert_eq!((status, refused["code"].as_str()), (StatusCode::CONFLICT, Some("worker_paused")), "{refused}");

    // Resume, with a reason: the Run button is back.
    browser.click(&format!("{CARD} .pause-box button.resume")).await;
    browser.type_into(&open_form("textarea"), "the model server is back").await;
    browser.click(&open_form("button[type=\"submit\"]")).await;
    browser.wait_for(&format!("{CARD}:not([data-paused=\"true\"]) .pause-box button.pause")).await;
    browser
        .wait("the Run button enabled", || async {
            (browser.is_enabled(&format!("{CARD} button.run")).await == Some(true)).then_some(())
        })
        .await;
    let history =
        eventually(PATIENCE, "the pause history", || async { stack.get("/api/workers/probe-1/pauses").await }).await;
    let actions: Vec<&str> =
        history["history"].as_array().expect("history").iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["resume", "pause"], "{history}");
    browser.assert_no_console_errors(&[401]).await;
    browser.close().await;
    stack.stop().await;
}
