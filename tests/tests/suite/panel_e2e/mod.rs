//! End-to-end tests of the web panel in a real headless Chromium (Debian's `chromium` and `chromium-driver`),
//! against the real `scrinalia-api` and `scrinalia-daemon` binaries running the demo worker's probes on a fresh
//! database. Every wait polls the page for a condition, with generous timeouts; nothing sleeps to assert.
//! Screenshots of each view go to `artifacts/screenshots/`; with `SCRINALIA_UPDATE_DOCS_SCREENSHOT=1` the
//! overview's test also refreshes `docs/screenshot-workers.png` (the README's), and others those of docs/panel.md.
//! Every view is checked with axe-core against WCAG 2.1 A and AA (`axe.rs`).
//!
//! The probes declare their options in their code, and the code wins over the catalogue: a long run to watch is
//! asked for with an override or explicit arguments, never with a catalogue default.
//!
//! The stack the tests run against is in `stack.rs`; each test, one person's visit to the panel, has its own file.

mod access;
mod axe;
mod bulk;
mod curator;
mod drain;
mod freshness;
mod history;
mod items;
mod overview;
mod pause;
mod rerun;
mod schedules;
mod search;
mod shards;
mod signin;
mod stack;
mod tags;
mod usage;
mod waiting;

use scrinalia_tests::browser::{Browser, workspace_root};
use serde_json::json;

const VIEWER_TOKEN: &str = "scr_e2e_viewer_0123456789abcdef";
/// What probe-3's check says is missing (its catalogue entry sets `SCRINALIA_PROBE_NOT_READY`).
const NOT_READY: &str = "The probe's model server is not up (set by the test's catalogue).";
/// Where probe-3's catalogue entry disagrees with its code: an option the code lacks, and a default.
const DISAGREEMENTS: [&str; 2] = [
    "catalogue declares option batch_size, code has no such option; it is not passed",
    "catalogue says progress_steps 6, code says 4; runs use 4",
];
/// The model the quality probe reports it used: its engine is configured elsewhere, and the environment its
/// catalogue entry sets says another model than the one the catalogue resolves.
const REPORTED_MODEL: &str = "big-model-v2";
const ADMIN_TOKEN: &str = "scr_e2e_admin_0123456789abcdef";

/// Presses a disabled button as a stale panel would (one drawn before the state changed, or two people at once):
/// what the API answers is what the test is after.
async fn press_disabled(browser: &Browser, selector: &str) {
    let script = "const b = document.querySelector(arguments[0]); b.disabled = false; b.click(); return true;";
    browser.js(script, vec![json!(selector)]).await;
}

/// Opens the detailed cards of `workers` from the workers overview, where a row opens its worker's card beneath
/// it (the panel keeps them open for the tab, across views and reloads), and waits until each shows.
async fn open_cards(browser: &Browser, workers: &[&str]) {
    for worker in workers {
        let toggle = format!("tr.worker-row[data-worker={worker:?}] button.expand");
        browser.wait_for(&toggle).await;
        if browser.attr(&toggle, "aria-expanded").await.as_deref() != Some("true") {
            browser.click(&toggle).await;
        }
        let card = format!("article[data-worker={worker:?}]");
        browser
            .wait(&format!("the card of {worker} to show"), || async {
                browser.find(&card).await?.is_displayed().await.ok()?.then_some(())
            })
            .await;
    }
}

/// Signs in with `token` and waits for the panel to say `role`.
async fn sign_in(browser: &Browser, token: &str, role: &str) {
    browser.type_into("#token-input", token).await;
    browser.click("#signin-form button[type=\"submit\"]").await;
    browser.wait_for(&format!("#who[data-role={role:?}]")).await;
}

/// A screenshot in `artifacts/screenshots/`; with `SCRINALIA_UPDATE_DOCS_SCREENSHOT=1`, also in
/// `docs/screenshots/<name>.png`, where docs/panel.md shows it.
async fn docs_screenshot(browser: &Browser, name: &str) {
    let shot = browser.screenshot(name).await;
    if std::env::var_os("SCRINALIA_UPDATE_DOCS_SCREENSHOT").is_some() {
        let docs = workspace_root().join("docs/screenshots");
        std::fs::create_dir_all(&docs).expect("create docs/screenshots");
        std::fs::copy(&shot, docs.join(format!("{name}.png"))).expect("update a docs screenshot");
    }
}
