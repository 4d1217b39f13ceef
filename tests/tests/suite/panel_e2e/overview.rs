//! The workers overview on the demo's catalogue (`deploy/demo.toml`, nine workers): on a 1366×768 laptop screen
//! at scroll 0 every worker's row and its Run button lie within the viewport, header and health strip included; a
//! row opens the worker's detailed card beneath it and closes it again; a row's Run asks for a run. The freshness
//! and paused columns draw a breached target's sentence and a pause's reason.

use scrinalia_tests::{
    Kind,
    browser::{Browser, PATIENCE, workspace_root},
    eventually,
};
use serde_json::{Value, json};

use super::stack::Stack;

/// The laptop screen the overview must fit.
const SCREEN: (i64, i64) = (1366, 768);

/// Resizes the window until its viewport (`innerWidth` × `innerHeight`) is `SCREEN`: a window's frame, if any,
/// is added to the size asked for.
async fn fit_viewport(browser: &Browser) {
    for _ in 0..3 {
        let size = browser.js("return [window.innerWidth, window.innerHeight];", vec![]).await;
        let (w, h) = (size[0].as_i64().unwrap_or_default(), size[1].as_i64().unwrap_or_default());
        if (w, h) == SCREEN {
            return;
        }
        let rect = browser.client.get_window_size().await.expect("the window's size");
        let (outer_w, outer_h) = (rect.0 as i64, rect.1 as i64);
        let (want_w, want_h) = (outer_w + SCREEN.0 - w, outer_h + SCREEN.1 - h);
        browser.client.set_window_size(want_w as u32, want_h as u32).await.expect("resize the window");
    }
    let size = browser.js("return [window.innerWidth, window.innerHeight];", vec![]).await;
    assert_eq!(size, json!([SCREEN.0, SCREEN.1]), "the viewport is the laptop screen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nine_demo_workers_fit_a_laptop_screen_and_a_row_opens_its_card() {
    let stack = Stack::start_demo(Kind::Sqlite).await;
    let workers: Vec<String> = stack.get("/api/workers").await.expect("the workers")["workers"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|w| w["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(workers.len(), 9, "the demo has nine workers: {workers:?}");

    let browser = Browser::start("overview", stack.db.dir.path(), SCREEN.0 as u32, SCREEN.1 as u32).await;
    browser.goto(&format!("{}/#/workers", stack.base)).await;
    fit_viewport(&browser).await;
    browser.wait_for("#who[data-role=\"admin\"]").await;
    browser.wait_for("#health li[data-check=\"daemons\"]").await;
    // Every row drawn with its measured queue (what the screen shows once the daemon has counted).
    browser
        .wait("every row with its queue measured and its Run enabled", || async {
            let script = "return [...document.querySelectorAll('tr.worker-row')].filter((r) =>
                !r.querySelector('.queue-cell').textContent.includes('not measured')
                && !r.querySelector('button.run').disabled).length;";
            (browser.js(script, vec![]).await == json!(9)).then_some(())
        })
        .await;
    let shown = browser
        .js("return [...document.querySelectorAll('tr.worker-row')].map((r) => r.dataset.worker);", vec![])
        .await;
    assert_eq!(shown, json!(workers), "one row per worker, in catalogue order");

    // At scroll 0, each row and its Run button within the viewport.
    let script = "window.scrollTo(0, 0);
        const inside = (r) => r.top >= 0 && r.left >= 0 && r.bottom <= window.innerHeight
          && r.right <= window.innerWidth;
        return [...document.querySelectorAll('tr.worker-row')].map((row) => {
          const r = row.getBoundingClientRect();
          const b = row.querySelector('button.run').getBoundingClientRect();
          return { worker: row.dataset.worker, row: inside(r), run: inside(b), bottom: b.bottom, rowBottom: r.bottom };
        });";
    let rects = browser.js(script, vec![]).await;
    let shot = browser.screenshot("overview-laptop").await;
    if std::env::var_os("SCRINALIA_UPDATE_DOCS_SCREENSHOT").is_some() {
        std::fs::copy(&shot, workspace_root().join("docs/screenshot-workers.png")).expect("update the README's shot");
    }
    let rows = rects.as_array().expect("the rows' rectangles");
    assert_eq!(rows.len(), 9, "{rects}");
    let outside: Vec<&Value> = rows.iter().filter(|r| r["row"] != json!(true) || r["run"] != json!(true)).collect();
    assert!(
        outside.is_empty(),
        "rows or Run buttons beyond the 1366×768 viewport: {outside:#?}; see {}",
        shot.display()
    );
    let scroll = browser.js("return window.scrollY;", vec![]).await;
    assert_eq!(scroll, json!(0), "measured at scroll 0");

    // A click on a row (not on its controls) opens the worker's card beneath it, with what the card does today.
    let row = "tr.worker-row[data-worker=\"summarize\"]";
    assert_eq!(browser.attr(&format!("{row} button.expand"), "aria-expanded").await.as_deref(), Some("false"));
    browser.click(&format!("{row} td.queue-cell")).await;
    let card = "article[data-worker=\"summarize\"]";
    browser
        .wait("summarize's card to show", || async {
            browser.find(card).await?.is_displayed().await.ok()?.then_some(())
        })
        .await;
    assert_eq!(browser.attr(&format!("{row} button.expand"), "aria-expanded").await.as_deref(), Some("true"));
    browser.wait_for_text(&format!("{card} .readiness-line"), "Readiness").await;
    browser.wait_for_text(&format!("{card} .queue"), "pending").await;
    assert!(browser.find(&format!("{card} button.run")).await.is_some(), "the card keeps its Run");
    assert!(browser.find(&format!("{card} button.chore-count")).await.is_some(), "and its chores");
    browser.screenshot("overview-card-open").await;
    // Its toggle closes it again.
    browser.click(&format!("{row} button.expand")).await;
    browser
        .wait("summarize's card to hide", || async {
            (!browser.find(card).await?.is_displayed().await.ok()?).then_some(())
        })
        .await;

    // A row's Run asks for a run of its worker with its configuration as it is.
    browser.click("tr.worker-row[data-worker=\"transfer\"] button.run").await;
    eventually(PATIENCE, "the transfer's run", || async {
        let runs = stack.get("/api/runs?worker=transfer").await?;
        (!runs["runs"].as_array()?.is_empty()).then_some(())
    })
    .await;
    browser.wait_for("tr.worker-row[data-worker=\"transfer\"] .last-cell .badge").await;

    // A worker view with a breached freshness target and a pause (fields the API adds): the row says the
    // target's sentence and "Paused" with the pause's reason as its title.
    let script = "const done = arguments[arguments.length - 1];
        import('/panel/worker-table.js').then((m) => {
          const w = { name: 'demo-fields', title: null,
            freshness: { within_seconds: 86400, age_seconds: 10800, breached: true,
              reason: 'no daemon with label gpu for 3 h' },
            paused: { at: '2026-12-07T10:00:00Z', by: 'scrinalia', reason: 'last 4 runs failed', automatic: true } };
          const row = m.overviewRow(w, document.createElement('article'), () => {});
          m.renderRow(row, w, { shown: true, disabled: false, reason: '' }, Date.now());
          const fresh = { ...w, freshness: { ...w.freshness, breached: false, reason: null }, paused: null };
          const other = m.overviewRow(fresh, document.createElement('article'), () => {});
          m.renderRow(other, fresh, { shown: true, disabled: false, reason: '' }, Date.now());
          done({ stale: row.cells.freshness.textContent, paused: row.cells.paused.textContent,
            title: row.cells.paused.firstChild.title, fresh: other.cells.freshness.textContent,
            unpaused: other.cells.paused.textContent, none: (() => {
              const bare = { name: 'bare', title: null };
              const r = m.overviewRow(bare, document.createElement('article'), () => {});
              m.renderRow(r, bare, { shown: false, disabled: true, reason: '' }, Date.now());
              return [r.cells.freshness.textContent, r.cells.paused.textContent, !!r.runButton.parentNode];
            })() });
        }).catch((e) => done({ error: String(e) }));";
    let drawn = browser.client.execute_async(script, vec![]).await.expect("draw rows of made-up views");
    assert_eq!(drawn["stale"], "stale: no daemon with label gpu for 3 h", "{drawn}");
    assert_eq!(drawn["paused"], "Paused", "{drawn}");
    assert!(drawn["title"].as_str().is_some_and(|t| t.contains("last 4 runs failed")), "{drawn}");
    assert_eq!(drawn["fresh"], "fresh (3 h of 24 h)", "{drawn}");
    assert_eq!(drawn["unpaused"], "no", "{drawn}");
    assert_eq!(drawn["none"], json!(["no target", "no", false]), "views without the fields: {drawn}");

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
