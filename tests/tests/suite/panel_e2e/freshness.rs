//! A breached freshness target on the panel: a worker that must stay fresh within 5 s, with 7 documents pending
//! since an hour ago, needs the label `gpu`, which the daemon (it counts the worker all the same) lacks. Its row
//! of the workers overview says "stale: …" naming the missing label, and its card's freshness line says it is
//! behind and why, in the API's sentence.

use scrinalia_shared::WorkerSpec;
use scrinalia_testkit::config::worker;
use scrinalia_tests::{ConfigFile, Kind, TestDb, browser::PATIENCE, eventually};

use super::{
    open_cards,
    stack::{Access, Stack},
};

const ROW: &str = "tr.worker-row[data-worker=\"stale\"]";
const CARD: &str = "article[data-worker=\"stale\"]";

/// The worker `stale`: a shell script whose count is 7 pending, the oldest an hour old; it needs label `gpu`.
fn stale(db: &TestDb) -> WorkerSpec {
    let oldest = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let script = db.dir.path().join("stale.sh");
    let text = format!(
        "case $1 in\n\
           count-pending) echo '{{\"pending\": 7, \"oldest_pending_at\": \"{oldest}\"}}';;\n\
           describe) echo '{{\"engine\": null, \"preset\": null, \"model\": null, \"endpoint\": null}}';;\n\
           check) echo '{{\"ready\": true}}';;\n\
           *) exit 2;;\n\
         esac\n"
    );
    std::fs::write(&script, text).expect("write the stale worker's script");
    let mut spec = worker("stale", &["/bin/sh", script.to_str().expect("a UTF-8 path")]);
    (spec.labels, spec.fresh_within_seconds) = (vec!["gpu".into()], Some(5));
    spec
}

fn config(db: &TestDb, port: u16, access: Access) -> ConfigFile {
    Stack::config(db, port, access).workers([stale(db)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breached_freshness_target_shows_on_the_row_and_the_card() {
    let stack = Stack::start_with(Kind::Sqlite, Access::AnonymousAdmin, config).await;
    let freshness = eventually(PATIENCE, "the breach", || async {
        let view = stack.get("/api/workers/stale").await?;
        (view["freshness"]["breached"] == true).then(|| view["freshness"].clone())
    })
    .await;
    let reason = freshness["reason"].as_str().expect("a reason").to_owned();
    assert!(reason.contains("label gpu"), "{freshness}");

    let browser = stack.open_panel("freshness").await;
    let cell = browser.wait_for_text(&format!("{ROW}[data-stale=\"true\"] .freshness-cell"), "label gpu").await;
    assert!(cell.starts_with("stale: "), "{cell:?}");
    assert_eq!(browser.attr(&format!("{ROW} .freshness-cell .stale"), "data-breached").await.as_deref(), Some("true"));
    // The other workers have no target: nothing says they are stale.
    assert!(browser.find("tr.worker-row[data-worker=\"probe-1\"][data-stale=\"true\"]").await.is_none());

    open_cards(&browser, &["stale"]).await;
    let line = browser.wait_for_text(&format!("{CARD} .freshness-line[data-breached=\"true\"]"), "label gpu").await;
    assert!(line.starts_with("Freshness: behind."), "{line:?}");
    assert!(line.contains(&reason), "the API's sentence: {line:?} / {reason:?}");
    browser.screenshot("freshness-breached").await;

    browser.assert_no_console_errors(&[]).await;
    browser.close().await;
    stack.stop().await;
}
