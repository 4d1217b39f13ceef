//! The OpenAPI document as the real `scrinalia-api` serves it (`GET /api/openapi.json`) is what client
//! generators need: openapi-spec-validator finds it valid OpenAPI 3.1, with every error it has listed, and
//! openapi-python-client generates a client from it without a warning and with a function for every operation.
//! Both tools are PyPI packages that `scripts/test` installs; without them the test fails, it never skips.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Instant,
};

use scrinalia_tests::{TestDb, free_port, start_api};
use serde_json::Value;
use tokio::process::Command;

/// How to install what this module needs, for failure messages.
const INSTALL: &str = "python3 -m pip install 'openapi-spec-validator>=0.9' openapi-python-client";

/// Prints every validation error of the document named by the first argument, one per line; exits 1 if any.
const VALIDATE: &str = r#"
import json, sys
from openapi_spec_validator import OpenAPIV31SpecValidator
with open(sys.argv[1]) as f:
    spec = json.load(f)
errors = list(OpenAPIV31SpecValidator(spec).iter_errors())
for e in errors:
    print("-", e.message, "at", "/".join(str(p) for p in e.absolute_path))
sys.exit(1 if errors else 0)
"#;

/// The generator's configuration: no formatting afterwards (nothing here reads the code, and it saves seconds),
/// and the export's JSON lines (`application/x-ndjson`, a type it does not know) read as bytes, as a client reads
/// a stream of lines.
const GENERATOR_CONFIG: &str =
    "post_hooks: []\ncontent_type_overrides:\n  application/x-ndjson: application/octet-stream\n";

fn python() -> String {
    std::env::var("SCRINALIA_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs `python args…`; returns its exit status and its stdout and stderr together.
async fn run_python(args: &[&str], dir: &Path) -> (bool, String) {
    let python = python();
    let output = Command::new(&python)
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {python} (the OpenAPI tests need Python 3: {INSTALL}): {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

/// The `operationId` of every operation of the document, each asserted to have one.
fn operations(doc: &Value) -> BTreeSet<String> {
    const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
    let paths = doc["paths"].as_object().expect("the document's paths");
    let mut ids = BTreeSet::new();
    for (path, item) in paths {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let id = item[*method]["operationId"].as_str();
            let id = id.unwrap_or_else(|| panic!("{method} {path} has no operationId: a generator makes one up"));
            assert!(ids.insert(id.to_owned()), "two operations are called {id}");
        }
    }
    ids
}

/// The modules of the generated client's `api` package, one per operation (`api/<tag>/<operation>.py`).
fn generated_operations(api: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut folders = vec![api.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("read {}: {e}", folder.display())) {
            let path: PathBuf = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "py") && path.file_stem().is_some_and(|s| s != "__init__") {
                found.insert(path.file_stem().expect("a stem").to_string_lossy().into_owned());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_validates_and_a_generated_python_client_has_every_operation() {
    let t = TestDb::sqlite().await;
    let dir = t.dir.path();
    let port = free_port();
    let config = t.config().with(|f| f.api.listen = ([127, 0, 0, 1], port).into());
    let path = t.write_config(&config, "config");
    let api = start_api(dir, "api", &path, port, &[]).await;
    let response = reqwest::get(format!("http://127.0.0.1:{port}/api/openapi.json")).await.expect("the document");
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let text = response.text().await.expect("the document's text");
    api.stop(std::time::Duration::from_secs(10)).await;
    let doc: Value = serde_json::from_str(&text).expect("the document is JSON");
    std::fs::write(dir.join("openapi.json"), &text).expect("write the document");

    // The two tools read the same file, so they run side by side.
    std::fs::write(dir.join("generator.yaml"), GENERATOR_CONFIG).expect("write the generator's configuration");
    let generate = [
        "-m",
        "openapi_python_client",
        "generate",
        "--path",
        "openapi.json",
        "--output-path",
        "client",
        "--config",
        "generator.yaml",
        "--meta",
        "none",
    ];
    let started = Instant::now();
    let ((valid, validated), (generated, said)) =
        tokio::join!(run_python(&["-c", VALIDATE, "openapi.json"], dir), run_python(&generate, dir));
    assert!(
        !validated.contains("ModuleNotFoundError"),
        "openapi-spec-validator is not installed for {}: run `{INSTALL}` (scripts/test does):\n{validated}",
        python()
    );
    assert!(valid, "the document is not valid OpenAPI 3.1:\n{validated}");
    assert!(
        !said.contains("No module named openapi_python_client"),
        "openapi-python-client is not installed for {}: run `{INSTALL}` (scripts/test does):\n{said}",
        python()
    );
    assert!(generated, "openapi-python-client failed:\n{said}");
    // It warns of whatever it leaves out or cannot type, an operation it does not generate included.
    assert!(!said.to_lowercase().contains("warning"), "openapi-python-client warned:\n{said}");
    let expected = operations(&doc);
    let found = generated_operations(&dir.join("client").join("api"));
    let missing: Vec<&String> = expected.difference(&found).collect();
    let unknown: Vec<&String> = found.difference(&expected).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "operations left out: {missing:?}; not in the document: {unknown:?}"
    );
    eprintln!(
        "OpenAPI: {} operations, valid and all generated, in {:.1} s",
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    t.cleanup().await;
}
