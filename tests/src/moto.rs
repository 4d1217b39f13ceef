//! A real S3-speaking server for the run-log store's tests: moto's standalone server, started on a free loopback
//! port and killed when dropped. moto accepts any keys and unsigned bucket creation, so no account is needed.
//!
//! moto is a Python package (`python3 -m pip install 'moto[server]'`; `scripts/test` installs it). A test that
//! needs it and cannot start it fails with that sentence: it is never skipped.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

use crate::{eventually, free_port};

/// How to install what this module needs, for failure messages.
pub const INSTALL: &str = "python3 -m pip install 'moto[server]'";

/// A running moto server.
pub struct Moto {
    child: Child,
    /// Its URL, e.g. `http://127.0.0.1:40123` (the `object_store.endpoint` of a test).
    pub endpoint: String,
    /// Its combined output.
    pub log: PathBuf,
}

impl Moto {
    /// Starts moto in `dir` (its output goes to `<dir>/moto.log`) and waits until it answers.
    pub async fn start(dir: &Path) -> Self {
        let python = std::env::var("SCRINALIA_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        // `moto.server` needs the `server` extra (flask, flask-cors); importing them says whether it is there.
        let probe = Command::new(&python)
            .args(["-c", "import moto.server, flask, flask_cors"])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| {
                panic!("The S3 tests need Python 3 to run moto ({python}: {e}). Install both: {INSTALL}")
            });
        assert!(
            probe.status.success(),
            "The S3 tests need moto's standalone server, which is not installed for {python}: run `{INSTALL}` \
             (scripts/test does). Python said:\n{}",
            String::from_utf8_lossy(&probe.stderr)
        );

        let port = free_port();
        let log = dir.join("moto.log");
        let out = std::fs::File::create(&log).expect("create moto's log file");
        let err = out.try_clone().expect("clone moto's log file");
        let child = Command::new(&python)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start moto ({python} -m moto.server): {e}"));
        let mut moto = Self { child, endpoint: format!("http://127.0.0.1:{port}"), log };

        let http = reqwest::Client::new();
        let health = format!("{}/moto-api/", moto.endpoint);
        let started = eventually(Duration::from_secs(30), "moto to answer", || {
            let exited = moto.child.try_wait().ok().flatten();
            let request = http.get(&health).send();
            async move {
                if let Some(status) = exited {
                    return Some(Err(status));
                }
                request.await.ok().map(|_| Ok(()))
            }
        })
        .await;
        if let Err(status) = started {
            panic!("moto exited ({status}) before it answered; its output:\n{}", moto.output());
        }
        moto
    }

    /// Creates `bucket` (moto takes an unsigned `PUT /<bucket>`).
    pub async fn create_bucket(&self, bucket: &str) {
        let response = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .unwrap_or_else(|e| panic!("create the bucket {bucket}: {e}"));
        assert!(response.status().is_success(), "create the bucket {bucket}: {}", response.status());
    }

    /// The keys in `bucket` that start with `prefix`, listed over plain HTTP (`ListObjectsV2`), independently of
    /// the store's own client.
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let response = reqwest::Client::new()
            .get(format!("{}/{bucket}", self.endpoint))
            .query(&[("list-type", "2"), ("prefix", prefix)])
            .send()
            .await
            .unwrap_or_else(|e| panic!("list the bucket {bucket}: {e}"));
        assert!(response.status().is_success(), "list the bucket {bucket}: {}", response.status());
        let xml = response.text().await.expect("the listing");
        xml.split("<Key>").skip(1).filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_owned())).collect()
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
