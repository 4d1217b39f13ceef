//! `scrinalia overrides` against a running system (the real API and daemon): an admin changes a worker's
//! override in parts and clears it, each with a reason; the listing, `--json` and the audit trail show who
//! changed what; the refusals exit with their documented codes and the API's sentence.

use scrinalia_tests::{
    Kind,
    daemon_harness::{probe, with_defaults},
    demo_worker,
    system::{ADMIN, System},
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_changes_and_clears_an_override_and_the_trail_says_who_and_why() {
    let defaults = [("output_lines", json!(2)), ("exit_code", json!(0))];
    let system =
        System::start(Kind::Postgres, |c| c.worker(with_defaults(probe(&demo_worker(), "probe-1", 120), &defaults)))
            .await;
    let none = system.cli(&["overrides"]).await;
    assert!(none.expect(0).stderr.contains("No worker has an override"), "{none:#?}");

    let admin = |args: &'static [&'static str]| system.cli_as(ADMIN, args);
    let set = admin(&["overrides", "set", "probe-1", "-o", "output_lines=5", "--reason", "longer logs"]).await;
    set.expect(0).has(&["Worker probe-1's override is now output_lines=5.", "scrinalia overrides audit probe-1"]);
    let listed = system.cli(&["overrides", "--json"]).await.expect(0).json();
    assert_eq!(listed["overrides"][0]["worker"], "probe-1", "{listed}");
    assert_eq!(listed["overrides"][0]["values"]["options"]["output_lines"], 5, "{listed}");
    assert_eq!(listed["overrides"][0]["updated_by"], "ada", "{listed}");
    system.cli(&["overrides"]).await.expect(0).has(&["probe-1", "output_lines=5", "ada"]);

    // An operator may not; a value the worker does not take is the API's 400; nothing to change is a usage error.
    let operator = system.cli(&["overrides", "set", "probe-1", "-o", "output_lines=9", "--reason", "r"]).await;
    operator.expect(4);
    let bad = admin(&["overrides", "set", "probe-1", "-o", "output_lines=\"many\"", "--reason", "r"]).await;
    bad.expect(7);
    assert!(bad.stderr.contains("output_lines"), "the sentence names the option: {bad:#?}");
    admin(&["overrides", "set", "probe-1", "--reason", "r"]).await.expect(2);
    admin(&["overrides", "set", "probe-1", "--preset", "x", "--unset", "preset", "--reason", "r"]).await.expect(2);

    let moved =
        admin(&["overrides", "set", "probe-1", "--unset", "output_lines", "-o", "exit_code=0", "--reason", "back"]);
    moved.await.expect(0).has(&["override is now exit_code=0."]);
    let trail = system.cli(&["overrides", "audit", "probe-1"]).await;
    trail.expect(0).has(&[
        "output_lines: default → 5",
        "longer logs",
        "exit_code: default → 0, output_lines: 5 → default",
    ]);
    assert!(trail.stdout.matches("ada").count() >= 2, "{trail:#?}");
    let entries = system.cli(&["overrides", "audit", "probe-1", "--json"]).await.expect(0).json();
    assert_eq!(entries["entries"].as_array().map(Vec::len), Some(2), "{entries}");
    assert_eq!(entries["entries"][0]["reason"], "back");

    let cleared = admin(&["overrides", "clear", "probe-1", "--reason", "done with it"]).await;
    cleared.expect(0).has(&["Worker probe-1 has no override: its runs follow the defaults."]);
    let entries = system.cli(&["overrides", "audit", "probe-1", "--json"]).await.expect(0).json();
    assert_eq!(
        (entries["entries"][0]["action"].as_str(), entries["entries"][0]["actor"].as_str()),
        (Some("clear"), Some("ada"))
    );
    system.cleanup().await;
}
