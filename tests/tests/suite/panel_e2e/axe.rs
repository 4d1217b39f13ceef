//! Accessibility: axe-core 4 (the npm package, installed into `tests/axe/` by scripts/test from its committed
//! lock file; the panel itself needs no Node toolchain) checks every view of the panel's router against WCAG 2.1
//! A and AA, with each worker's card, its run form, its schedule form and its history open, and the runs view's
//! bulk action open, and the busiest views again in the dark colour scheme: no critical or serious violation
//! anywhere. A failure lists each violation's id, impact, help and the elements it found.

use reqwest::StatusCode;
use scrinalia_tests::{
    Kind,
    browser::{Browser, PATIENCE, workspace_root},
    eventually,
};
use serde_json::{Value, json};

use super::{
    open_cards,
    stack::{Access, Stack},
};

/// Where scripts/test installs axe-core (`npm ci` in `tests/axe/`).
const AXE: &str = "tests/axe/node_modules/axe-core/axe.min.js";
/// The rules' tags the panel is held to.
const TAGS: [&str; 4] = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"];

/// axe-core's source, read once per test.
fn axe_source() -> String {
    let path = workspace_root().join(AXE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}. scripts/test installs axe-core there: run `npm ci` in tests/axe (Node 20, npm)",
            path.display()
        )
    })
}

/// Runs axe on the page as it is (injecting it first when the page has none) and panics listing every critical
/// or serious violation of `view`.
async fn assert_accessible(browser: &Browser, source: &str, view: &str) {
    let present = browser.js("return typeof window.axe === 'object';", vec![]).await;
    if present != json!(true) {
        browser.js(source, vec![]).await;
    }
    let script = "const done = arguments[arguments.length - 1];
        const options = { runOnly: { type: 'tag', values: arguments[0] }, resultTypes: ['violations'] };
        axe.run(document, options)
          .then((r) => done(r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
            url: v.helpUrl, targets: v.nodes.map((n) => n.target.join(' ') + ' — ' + n.failureSummary) }))))
          .catch((e) => done({ error: String(e) }));";
    let answer = browser
        .client
        .execute_async(script, vec![json!(TAGS)])
        .await
        .unwrap_or_else(|e| panic!("run axe on the {view} view: {e}"));
    let violations = answer.as_array().unwrap_or_else(|| panic!("axe failed on the {view} view: {answer}"));
    let grave: Vec<&Value> =
        violations.iter().filter(|v| matches!(v["impact"].as_str(), Some("critical" | "serious"))).collect();
    if !grave.is_empty() {
        browser.screenshot(&format!("axe-{view}")).await;
        let listed: Vec<String> = grave
            .iter()
            .map(|v| {
                let targets: Vec<&str> =
                    v["targets"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                format!("{} ({}): {} <{}>\n    {}", v["id"], v["impact"], v["help"], v["url"], targets.join("\n    "))
            })
            .collect();
        panic!(
            "the {view} view has {} critical or serious violations of WCAG 2.1 A/AA:\n{}",
            grave.len(),
            listed.join("\n")
        );
    }
    let minor = violations.len();
    eprintln!("axe: the {view} view has no critical or serious violation ({minor} minor or moderate)");
}

/// Waits until `css` matches and nothing under `main` says it is still loading.
async fn settled(browser: &Browser, css: &str) {
    browser.wait_for(css).await;
    browser
        .wait("the view to finish loading", || async {
            let busy = browser.js("return !!document.querySelector('main [aria-busy=\"true\"]');", vec![]).await;
            (busy == json!(false)).then_some(())
        })
        .await;
}

async fn ended(stack: &Stack, id: &str, path: &str) {
    eventually(PATIENCE, "the run to end", || async {
        stack.get(&format!("{path}/{id}")).await?["finished_at"].is_string().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_has_no_critical_or_serious_accessibility_violation() {
    let source = axe_source();
    let stack = Stack::start(Kind::Sqlite, Access::AnonymousAdmin).await;
    // Something in every view: a finished run, a failed one, a pipeline run, a schedule.
    let (status, run) = stack.post("/api/workers/probe-1/runs", json!({"options": {"duration_ms": 100}})).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run = run["id"].as_str().expect("a run id").to_owned();
    ended(&stack, &run, "/api/runs").await;
    let (status, failed) = stack.post("/api/workers/probe-2/runs", json!({"options": {"exit_code": 3}})).await;
    assert_eq!(status, StatusCode::CREATED, "{failed}");
    ended(&stack, failed["id"].as_str().expect("a run id"), "/api/runs").await;
    let (status, pipeline) = stack.post("/api/pipelines/probes/runs", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{pipeline}");
    let pipeline = pipeline["id"].as_str().expect("a pipeline run id").to_owned();
    let schedule = json!({"name": "nightly", "worker": "probe-1", "cron": "0 3 * * *", "reason": "e2e: axe"});
    let (status, body) = stack.post("/api/schedules", schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let browser = stack.open_panel("axe").await;
    browser.wait_for("#who[data-role=\"admin\"]").await;

    // The workers overview alone, then with every card open and one card's forms and history open too.
    settled(&browser, "tr.worker-row[data-worker=\"probe-3\"]").await;
    browser.wait_for("tr.worker-row[data-worker=\"probe-1\"] .last-cell .badge").await;
    assert_accessible(&browser, &source, "workers").await;
    open_cards(&browser, &["probe-1", "probe-2", "probe-3"]).await;
    browser.wait_for("article[data-worker=\"probe-1\"] li.schedule[data-schedule=\"nightly\"]").await;
    browser.click("article[data-worker=\"probe-1\"] details.run-options summary").await;
    browser.click("article[data-worker=\"probe-1\"] details.schedule-new summary").await;
    browser.click("#history-probe-1 summary").await;
    browser.wait_for("#history-probe-1 figure[data-chart=\"items\"] rect.bar").await;
    assert_accessible(&browser, &source, "workers-cards").await;

    // Every other view of the router.
    let base = &stack.base;
    let views = [
        ("runs", format!("{base}/#/runs"), "#ledger tr[data-worker=\"probe-2\"][data-state=\"failed\"]".to_owned()),
        ("run", format!("{base}/#/runs/{run}"), "#log-state".to_owned()),
        ("pipelines", format!("{base}/#/pipelines"), "article[data-pipeline=\"probes\"]".to_owned()),
        (
            "pipeline-run",
            format!("{base}/#/pipelines/runs/{pipeline}"),
            "#pipeline-steps tr[data-step=\"1\"]".to_owned(),
        ),
        ("resources", format!("{base}/#/resources"), "#resources".to_owned()),
        ("overrides", format!("{base}/#/overrides"), "#override-worker".to_owned()),
        ("override", format!("{base}/#/overrides/probe-1"), "#audit-title".to_owned()),
        ("daemons", format!("{base}/#/daemons"), "#daemons tbody tr".to_owned()),
        ("tokens", format!("{base}/#/tokens"), "#tokens".to_owned()),
        ("quarantine", format!("{base}/#/workers/probe-1/quarantine"), "#quarantine-summary[data-after]".to_owned()),
        ("not-found", format!("{base}/#/no-such-view"), "main h1".to_owned()),
    ];
    for (view, url, ready) in views {
        browser.goto(&url).await;
        settled(&browser, &ready).await;
        assert_accessible(&browser, &source, view).await;
    }
    // The runs view's bulk action, open: the dry run's count and its confirmation form.
    browser.goto(&format!("{base}/#/runs?state=failed")).await;
    settled(&browser, "#ledger tr[data-worker=\"probe-2\"][data-state=\"failed\"]").await;
    browser.click("#bulk-select").await;
    browser.wait_for("#bulk-form:not([hidden]) #bulk-count[data-count=\"1\"]").await;
    assert_accessible(&browser, &source, "runs-bulk").await;
    // The run view once its log has ended (its live parts drawn).
    browser.goto(&format!("{base}/#/runs/{run}")).await;
    browser.wait_for_text("#log-state", "complete").await;
    assert_accessible(&browser, &source, "run-complete").await;

    // The dark colour scheme (the panel follows the system's), on the views with the most colours.
    browser.prefer_dark(true).await;
    let dark = browser.js("return matchMedia('(prefers-color-scheme: dark)').matches;", vec![]).await;
    assert_eq!(dark, json!(true), "the page prefers dark colours");
    assert_accessible(&browser, &source, "run-dark").await;
    browser.goto(&format!("{base}/#/runs")).await;
    settled(&browser, "#ledger tr[data-worker=\"probe-2\"][data-state=\"failed\"]").await;
    assert_accessible(&browser, &source, "runs-dark").await;
    browser.goto(&format!("{base}/#/workers")).await;
    settled(&browser, "article[data-worker=\"probe-1\"] li.schedule[data-schedule=\"nightly\"]").await;
    let dark = browser.js("return matchMedia('(prefers-color-scheme: dark)').matches;", vec![]).await;
    assert_eq!(dark, json!(true), "the page still prefers dark colours");
    assert_accessible(&browser, &source, "workers-cards-dark").await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
