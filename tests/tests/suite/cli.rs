//! The `scrinalia` CLI against a running system: the real `scrinalia-api` and `scrinalia-daemon` on a fresh
//! database, with the probe worker of `scrinalia-demo-worker`. Each test checks what an operator or a script
//! relies on: the output, and the documented exit code.
//!
//! The probe's catalogue entry agrees with its code (health is then ok), except in the test of the listing, where
//! it gives `progress_steps` a default of 2 where the code says 4: once the daemon has described the probe, that
//! is a disagreement the listing must show.

use scrinalia_shared::{
    RetryOn, RetryPolicy, WorkerSpec,
    auth::{hash_token, is_token_hash},
};
use scrinalia_tests::{
    Kind,
    daemon_harness::{probe, with_defaults},
    demo_worker, free_port,
    system::{Cli as Outcome, System, VIEWER, scrinalia},
};
use serde_json::{Value, json};

/// The disagreement of the probe's catalogue entry with its code in the test of the listing.
const DISAGREEMENT: &str = "catalogue says progress_steps 2, code says 4; runs use 4";

/// The system with the probe `probe-1`.
async fn start(kind: Kind) -> System {
    start_with(kind, |probe| probe).await
}

/// The system with the probe's catalogue entry changed by `adjust`.
async fn start_with(kind: Kind, adjust: impl FnOnce(WorkerSpec) -> WorkerSpec) -> System {
    let defaults = [("output_lines", json!(2)), ("exit_code", json!(0))];
    let probe = adjust(with_defaults(probe(&demo_worker(), "probe-1", 120), &defaults));
    System::start(kind, |config| config.worker(probe)).await
}

async fn trigger_follow_prints_the_log_and_exits_with_the_outcome(kind: Kind) {
    let system = start(kind).await;
    let ok = system
        .cli(&["trigger", "probe-1", "--option", "duration_ms=1500", "--option", "output_lines=3", "--follow"])
        .await;
    ok.expect(0);
    for line in ["stdout line 1 of 3", "stdout line 3 of 3", "stderr line 3 of 3"] {
        assert!(ok.stdout.contains(line), "the followed log lacks {line:?}: {ok:#?}");
    }
    assert!(ok.stderr.contains("succeeded"), "{ok:#?}");

    let failed = system.cli(&["trigger", "probe-1", "-o", "exit_code=3", "-o", "duration_ms=100", "--follow"]).await;
    failed.expect(8);
    assert!(failed.stdout.contains("exiting with status 3"), "the log of the failed run is printed: {failed:#?}");
    assert!(failed.stderr.contains("ended failed"), "{failed:#?}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_trigger_follow_prints_the_log_and_exits_with_the_outcome() {
    trigger_follow_prints_the_log_and_exits_with_the_outcome(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_trigger_follow_prints_the_log_and_exits_with_the_outcome() {
    trigger_follow_prints_the_log_and_exits_with_the_outcome(Kind::Postgres).await;
}

/// `describe`, `count` and `check` ask a daemon for a chore and print the API's sentence; `workers` and `worker`
/// show what the check and the description said: the probe is not ready (the environment of its catalogue entry
/// says so), and its catalogue entry disagrees with its code.
async fn chores_are_asked_for_and_the_listing_shows_readiness_and_disagreements(kind: Kind) {
    let missing = "The probe's model server is away for the test.";
    let system = start_with(kind, |probe| {
        let mut probe = with_defaults(probe, &[("progress_steps", json!(2))]);
        probe.env.insert("SCRINALIA_PROBE_NOT_READY".into(), missing.into());
        probe
    })
    .await;

    let check = system.cli(&["check", "probe-1"]).await;
    check.expect(0);
    assert!(check.stdout.contains("A check of probe-1 was asked for; a daemon that takes it does it"), "{check:#?}");
    let listed = system
        .cli_until(&["workers"], "the listing to show the check and the description", |o| {
            o.stdout.contains("not ready") && o.stdout.contains(DISAGREEMENT)
        })
        .await;
    let header = listed.stdout.lines().next().unwrap_or_default();
    assert!(header.contains("READY"), "a READY column: {listed:#?}");
    assert!(listed.stdout.contains(&format!("probe-1: not ready: {missing}")), "the reason: {listed:#?}");
    assert!(listed.stdout.contains(&format!("probe-1: disagrees: {DISAGREEMENT}")), "{listed:#?}");

    let shown = system.cli(&["worker", "probe-1"]).await;
    shown.expect(0);
    for part in [format!("not ready: {missing}"), format!("disagrees  {DISAGREEMENT}"), "by daemon ".to_owned()] {
        assert!(shown.stdout.contains(&part), "{part:?} is missing: {shown:#?}");
    }
    assert!(shown.stdout.contains("option     progress_steps = 4 (default); integer, 0 to 10000"), "{shown:#?}");

    // A describe asked for is done again: the description is newer than the one the daemon took at its start.
    let described_at = |o: &Outcome| {
        let at = o.json()["described"]["described_at"].as_str().map(str::to_owned)?;
        chrono::DateTime::parse_from_rfc3339(&at).ok()
    };
    let before = described_at(system.cli(&["worker", "probe-1", "--json"]).await.expect(0))
        .expect("the daemon described probe-1 when it started");
    let describe = system.cli(&["describe", "probe-1"]).await;
    assert!(describe.expect(0).stdout.contains("A description of probe-1 was asked for"), "{describe:#?}");
    system
        .cli_until(&["worker", "probe-1", "--json"], "a newer description", |o| {
            described_at(o).is_some_and(|at| at > before)
        })
        .await;

    let count = system.cli(&["count", "probe-1", "--json"]).await.expect(0).json();
    assert_eq!((count["chore"]["chore"].as_str(), count["taken"].as_bool()), (Some("count"), Some(true)), "{count}");
    assert!(count["message"].as_str().is_some_and(|m| m.contains("A count of the queue of probe-1")), "{count}");

    let unknown = system.cli(&["count", "no-such-worker"]).await;
    unknown.expect(5);
    assert!(unknown.stderr.contains("no-such-worker") && unknown.stdout.is_empty(), "{unknown:#?}");
    let viewer = system.cli_as(VIEWER, &["describe", "probe-1"]).await;
    viewer.expect(4);
    assert!(viewer.stderr.contains("operator role"), "{viewer:#?}");
    system.cli(&["worker", "no-such-worker"]).await.expect(5);

    // What the probe reported it used at the start of a run is shown beside the resolved configuration.
    let run = system.cli(&["trigger", "probe-1", "-o", "duration_ms=100", "--follow", "--json"]).await;
    let id = run.expect(0).json()["id"].as_str().expect("the run's id").to_owned();
    let shown = system.cli(&["run", "show", &id]).await;
    assert!(shown.expect(0).stdout.contains("\nreported "), "{shown:#?}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chores_are_asked_for_and_the_listing_shows_readiness_and_disagreements() {
    chores_are_asked_for_and_the_listing_shows_readiness_and_disagreements(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_chores_are_asked_for_and_the_listing_shows_readiness_and_disagreements() {
    chores_are_asked_for_and_the_listing_shows_readiness_and_disagreements(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_makes_a_second_trigger_exit_6_with_the_api_sentence() {
    let system = start(Kind::Sqlite).await;
    let first = system.cli(&["trigger", "probe-1", "--option", "duration_ms=20000", "--json"]).await;
    let id = first.expect(0).json()["id"].as_str().expect("the run's id").to_owned();

    let second = system.cli(&["trigger", "probe-1"]).await;
    second.expect(6);
    assert!(second.stderr.contains("already has a run in flight") && second.stderr.contains(&id), "{second:#?}");
    assert!(second.stdout.is_empty(), "{second:#?}");

    system.cli(&["cancel", &id]).await.expect(0);
    let followed = system.cli(&["logs", &id, "--follow"]).await;
    followed.expect(8);
    assert!(followed.stderr.contains("cancelled"), "{followed:#?}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_restarted_once_and_why_says_it_is_not_waiting() {
    let system = start(Kind::Sqlite).await;
    let failed = system.cli(&["trigger", "probe-1", "--option", "exit_code=3", "--json"]).await;
    let id = failed.expect(0).json()["id"].as_str().expect("the run's id").to_owned();
    system.cli(&["logs", &id, "--follow"]).await.expect(8);

    let why = system.cli(&["why", &id]).await;
    assert!(why.expect(0).stdout.contains(&format!("Run {id} is not waiting: it is failed.")), "{why:#?}");
    assert_eq!(system.cli(&["why", &id, "--json"]).await.expect(0).json(), Value::Null);
    let resume = system.cli(&["resume", &id]).await;
    resume.expect(6);
    assert!(resume.stderr.contains("has no checkpoint to resume from"), "{resume:#?}");

    let restarted = system.cli(&["restart", &id, "--json"]).await;
    let restarted = restarted.expect(0).json();
    assert_eq!((restarted["follows"].as_str(), restarted["follows_as"].as_str()), (Some(id.as_str()), Some("restart")));
    let again = system.cli(&["restart", &id]).await;
    again.expect(6);
    assert!(again.stderr.contains("already restarted by run"), "{again:#?}");
    let new = restarted["id"].as_str().expect("the new run's id");
    system.cli(&["logs", new, "--follow"]).await.expect(8);
    let shown = system.cli(&["run", "show", new]).await;
    assert!(shown.expect(0).stdout.contains(&format!("run {id} (restart, from nothing)")), "{shown:#?}");
    system.cleanup().await;
}

/// A queued run says why it waits: the sentence and its code for people, the reason itself with `--json`. The
/// retry of a failed run waits out a two-minute backoff, whatever else the system does meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_prints_the_sentence_and_the_code_of_a_queued_run() {
    let system = start_with(Kind::Postgres, |mut probe| {
        probe.retry = Some(RetryPolicy {
            max_attempts: 2,
            initial_delay_seconds: 120.0,
            factor: 1.0,
            max_delay_seconds: 120.0,
            jitter: 0.0,
            on: vec![RetryOn::Failed],
            resume: false,
        });
        probe
    })
    .await;
    let failed = system.cli(&["trigger", "probe-1", "--option", "exit_code=3", "--json"]).await;
    let id = failed.expect(0).json()["id"].as_str().expect("the run's id").to_owned();
    let shown = system
        .cli_until(&["run", "show", &id, "--json"], "the retry in the chain", |o| {
            serde_json::from_str::<Value>(&o.stdout).is_ok_and(|d| d["chain"].as_array().is_some_and(|c| c.len() == 2))
        })
        .await;
    let retry = shown.json()["chain"][1]["id"].as_str().expect("the retry's id").to_owned();

    let why = system.cli(&["why", &retry]).await;
    let text = why.expect(0).stdout.trim_end();
    assert!(text.starts_with("It waits until ") && text.contains("the backoff before attempt 2."), "{why:#?}");
    assert!(text.ends_with("(not_before)"), "the code after the sentence: {why:#?}");
    let reason = system.cli(&["why", &retry, "--json"]).await.expect(0).json();
    assert_eq!(reason["code"], "not_before", "{reason}");
    assert!(reason["until"].is_string() && reason["message"].as_str().is_some_and(|m| text.starts_with(m)), "{reason}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_outputs_parse_as_json_and_tables_carry_no_colour_when_piped() {
    let system = start(Kind::Sqlite).await;
    let run = system.cli(&["trigger", "probe-1", "-o", "duration_ms=100", "--follow", "--json"]).await;
    let id = run.expect(0).json()["id"].as_str().expect("the run's id").to_owned();

    let workers = system.cli(&["workers", "--json"]).await.expect(0).json();
    assert_eq!(workers["workers"][0]["name"], "probe-1");
    let runs = system.cli(&["runs", "--json", "--worker", "probe-1", "--limit", "5"]).await.expect(0).json();
    assert_eq!(runs["runs"][0]["id"], id.as_str());
    let shown = system.cli(&["run", "show", &id, "--json"]).await.expect(0).json();
    assert_eq!((shown["id"].as_str(), shown["state"].as_str()), (Some(id.as_str()), Some("succeeded")));
    let daemons = system.cli(&["daemons", "--json"]).await.expect(0).json();
    assert_eq!(daemons["daemons"][0]["state"], "active");
    let health = system.cli(&["health", "--json"]).await.expect(0).json();
    assert_eq!(health["status"], "ok", "{health}");

    for args in [&["workers"][..], &["runs"], &["run", "show", &id], &["daemons"], &["health"]] {
        let table = system.cli(args).await;
        table.expect(0);
        assert!(!table.stdout.contains('\x1b'), "no colour on a pipe: {table:#?}");
    }
    let table = system.cli(&["runs"]).await;
    let lines: Vec<&str> = table.stdout.lines().collect();
    let column = |line: &str| line.find("probe-1").or_else(|| line.find("WORKER"));
    assert!(lines.len() >= 2 && lines.iter().all(|l| column(l) == column(lines[0])), "aligned: {table:#?}");
    system.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_have_their_documented_exit_codes() {
    let system = start(Kind::Sqlite).await;
    let viewer = system.cli_as(VIEWER, &["trigger", "probe-1"]).await;
    viewer.expect(4);
    assert!(viewer.stderr.contains("operator role"), "{viewer:#?}");
    system.cli_as("scr_not_a_token", &["workers"]).await.expect(4);
    let unknown = system.cli(&["trigger", "no-such-worker"]).await;
    unknown.expect(5);
    assert!(unknown.stderr.contains("no-such-worker"), "{unknown:#?}");
    system.cli(&["run", "show", "00000000-0000-0000-0000-000000000000"]).await.expect(5);
    let bad = system.cli(&["trigger", "probe-1", "--option", "duration_ms=slow"]).await;
    bad.expect(7);
    assert!(bad.stderr.contains("duration_ms"), "{bad:#?}");
    system.cli(&["run", "show", "not-a-uuid"]).await.expect(2);
    system.cli(&["runs", "--state", "finished"]).await.expect(2);
    system.cleanup().await;
}

#[tokio::test]
async fn an_unreachable_api_exits_3() {
    let api = format!("http://127.0.0.1:{}", free_port());
    let outcome = scrinalia(&["--api", &api, "workers"], &[], None).await;
    outcome.expect(3);
    assert!(outcome.stderr.contains("cannot reach the API"), "{outcome:#?}");
    scrinalia(&["runs"], &[("SCRINALIA_API", &api)], None).await.expect(3);
}

#[tokio::test]
async fn token_hash_prints_the_hash_the_api_checks() {
    let hashed = scrinalia(&["token", "hash"], &[], Some("scr_some_token\n")).await;
    let hash = hashed.expect(0).stdout.trim().to_owned();
    assert!(is_token_hash(&hash), "{hashed:#?}");
    assert_eq!(hash, hash_token("scr_some_token"));

    let new = scrinalia(&["token", "hash", "--new", "--json"], &[], None).await;
    let pair = new.expect(0).json();
    let (token, hash) = (pair["token"].as_str().expect("a token"), pair["hash"].as_str().expect("a hash"));
    assert!(is_token_hash(hash) && hash_token(token) == hash, "{new:#?}");

    scrinalia(&["token", "hash"], &[], Some("\n")).await.expect(2);
}

/// Behind a TLS-terminating proxy (here one of the test's own, with a certificate of a private authority, in front
/// of the real API), `--api https://…` with `--ca-file` reaches the API; without the authority the certificate is
/// refused, and the CLI says it could not reach the API (exit 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_api_behind_a_tls_proxy_is_reached_with_its_certificate_authority() {
    let system = start(Kind::Sqlite).await;
    let api_port: u16 = system.api_url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the API's port");
    let (proxy_port, authority) = tls::proxy_to(api_port).await;
    let ca_file = system.db.dir.path().join("authority.pem");
    std::fs::write(&ca_file, authority).expect("write the authority's certificate");
    let https = format!("https://localhost:{proxy_port}");
    let ca = ca_file.display().to_string();

    let env = [("SCRINALIA_API", https.as_str()), ("SCRINALIA_TOKEN", VIEWER)];
    let workers = scrinalia(&["--ca-file", &ca, "workers", "--json"], &env, None).await;
    assert_eq!(workers.expect(0).json()["workers"][0]["name"], "probe-1");
    let health = scrinalia(&["health"], &[env[0], env[1], ("SCRINALIA_CA_FILE", ca.as_str())], None).await;
    assert!(health.expect(0).stdout.contains("database"), "{health:#?}");

    let untrusted = scrinalia(&["workers"], &env, None).await;
    untrusted.expect(3);
    assert!(
        untrusted.stderr.to_lowercase().contains("certificate"),
        "the refusal names the certificate: {untrusted:#?}"
    );
    system.cleanup().await;
}

/// A TLS-terminating proxy of the test's own: a private certificate authority, a certificate for `localhost`
/// that it signs, and a listener that relays every decrypted connection to a local port.
mod tls {
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::{
        TlsAcceptor,
        rustls::{
            ServerConfig,
            crypto::ring,
            pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
        },
    };

    /// Starts the proxy in front of `127.0.0.1:<target>`; returns its port and the authority's certificate (PEM).
    pub async fn proxy_to(target: u16) -> (u16, String) {
        let mut authority = CertificateParams::new(Vec::new()).expect("authority parameters");
        authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        authority.distinguished_name.push(DnType::CommonName, "Scrinalia test authority");
        let authority_key = KeyPair::generate().expect("a key");
        let authority = authority.self_signed(&authority_key).expect("the authority's certificate");
        let leaf = CertificateParams::new(vec!["localhost".to_owned()]).expect("leaf parameters");
        let leaf_key = KeyPair::generate().expect("a key");
        let leaf = leaf.signed_by(&leaf_key, &authority, &authority_key).expect("the proxy's certificate");

        let chain = vec![CertificateDer::from(leaf.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a server configuration");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends its handshake: nothing to relay then.
                    let Ok(mut client) = acceptor.accept(client).await else { return };
                    let Ok(mut api) = TcpStream::connect(("127.0.0.1", target)).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut api).await;
                });
            }
        });
        (port, authority.pem())
    }
}
