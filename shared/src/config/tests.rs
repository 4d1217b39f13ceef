//! Loading and validating the configuration: layers, errors that name the file and key, secrets kept out.

use super::*;

fn load(toml: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("scrinalia.toml");
    std::fs::write(&path, toml).expect("write");
    Settings::load_from(Some(&path), env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
}

const WORKER: &str = r#"
    [engines.ollama]
    url = "http://127.0.0.1:11434"
    presets = { fast = "llama3.2:1b" }

    [[workers]]
    name = "summarize"
    command = ["demo", "summarize"]
    engine = "ollama"
    preset = "fast"
    options = [{ name = "batch_size", type = "integer", default = 10 }]
"#;

#[test]
fn defaults_file_and_environment_layer_in_that_order() {
    let settings = load(
        &format!("[daemon]\ncapacity = 5\nlease_seconds = 20\n{WORKER}"),
        &[("SCRINALIA__DAEMON__CAPACITY", "7"), ("SCRINALIA__DATABASE__URL", "postgres://app:hunter2@db/scrinalia")],
    )
    .expect("loads");
    assert_eq!(settings.daemon.capacity, 7, "the environment wins over the file");
    assert_eq!(settings.daemon.lease_seconds, 20, "the file wins over the default");
    assert_eq!(settings.daemon.drain_seconds, 60, "the default stays");
    assert_eq!(settings.catalogue.workers[0].options[0].default, Some(serde_json::json!(10)));
    let printed = format!("{settings:?}");
    assert!(!printed.contains("hunter2") && printed.contains("app:***@db"), "secrets are never printed");
}

#[test]
fn a_wrong_type_names_the_file_and_the_key() {
    let err = load("[daemon]\ncapacity = \"many\"\n", &[]).expect_err("a string is not a capacity").to_string();
    assert!(err.contains("scrinalia.toml") && err.contains("daemon.capacity"), "{err}");
}

#[test]
fn an_unknown_key_is_named() {
    let err = load("[daemon]\ncapasity = 3\n", &[]).expect_err("typo").to_string();
    assert!(err.contains("capasity") && err.contains("scrinalia.toml"), "{err}");
}

#[test]
fn catalogue_mistakes_are_each_named_by_key() {
    let toml = format!(
        "{WORKER}
        [[workers]]
        name = \"summarize\"
        command = []
        engine = \"ollama\"
        preset = \"slow\"
        options = [{{ name = \"depth\", type = \"integer\", default = \"deep\" }}]
        "
    );
    let err = load(&toml, &[]).expect_err("four mistakes").to_string();
    for expected in [
        "`workers[1].name`: the worker name \"summarize\" is declared twice",
        "`workers[1].command`: worker \"summarize\" has an empty command",
        "`workers[1].preset`: worker \"summarize\" uses the unknown preset \"slow\" of engine \"ollama\"",
        "`workers[1].options[0].default`: the default \"deep\" of option \"depth\" is not a whole number",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
}

#[test]
fn worker_limits_are_read_and_each_bad_one_is_named_by_key() {
    let fine = "
        [[workers]]
        name = \"tagger\"
        command = [\"tag\"]
        memory_max = \"4GiB\"
        cpu_max = 0.5
        stall_seconds = 600
        [[workers]]
        name = \"embed\"
        command = [\"embed\"]
        memory_max = 536870912
        cpu_max = 2
        ";
    let settings = load(fine, &[]).expect("valid");
    let tagger = settings.catalogue.worker("tagger").expect("tagger");
    assert_eq!(tagger.memory_max.as_ref().map(|m| m.bytes()), Some(Ok(4 << 30)));
    assert_eq!((tagger.cpu_max, tagger.stall_seconds), (Some(0.5), Some(600)));
    let embed = settings.catalogue.worker("embed").expect("embed");
    assert_eq!(embed.memory_max.as_ref().map(|m| m.bytes()), Some(Ok(512 << 20)));
    assert_eq!((embed.cpu_max, embed.stall_seconds), (Some(2.0), None), "a whole number of cores is a number");

    let bad = "
        [[workers]]
        name = \"a\"
        command = [\"a\"]
        memory_max = \"lots\"
        cpu_max = 0
        stall_seconds = 0
        [[workers]]
        name = \"b\"
        command = [\"b\"]
        memory_max = \"0\"
        cpu_max = 1024.5
        [[workers]]
        name = \"c\"
        command = [\"c\"]
        memory_max = -1
        cpu_max = -2
        stall_seconds = -5
        ";
    let err = load(bad, &[]).expect_err("bad limits").to_string();
    for expected in [
        "`workers[0].memory_max`: memory_max must be a whole number and a binary unit (B, KiB, MiB, GiB, TiB)",
        "`workers[0].cpu_max`: cpu_max must be more than 0 cores",
        "`workers[0].stall_seconds`: stall_seconds must be at least 1 second, not 0.",
        "`workers[1].memory_max`: memory_max must be at least 1MiB, not \"0\".",
        "`workers[1].cpu_max`: cpu_max must be at most 1024 cores, not 1024.5.",
        "`workers[2].memory_max`: memory_max cannot be negative, not -1.",
        "`workers[2].cpu_max`: cpu_max must be more than 0 cores (0.5 is half a core), not -2.",
        "`workers[2].stall_seconds`: stall_seconds must be at least 1 second, not -5.",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
}

#[test]
fn resource_mistakes_are_each_named_by_key() {
    let toml = "
        [[resources]]
        name = \"model-server\"
        capacity = 0
        [[resources]]
        name = \"model-server\"
        capacity = 1
        [[workers]]
        name = \"tagger\"
        command = [\"tag\"]
        resources = [\"model-server\", \"gpu-box\"]
        labels = [\"gpu\"]
        ";
    let err = load(toml, &[]).expect_err("three mistakes").to_string();
    for expected in [
        "`resources[0].capacity`: a resource's capacity must be at least 1",
        "`resources[1].name`: the resource name \"model-server\" is declared twice",
        "`workers[0].resources[1]`: worker \"tagger\" holds the undeclared resource \"gpu-box\"",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
    let fine = "
        [[resources]]
        name = \"model-server\"
        capacity = 2
        [[workers]]
        name = \"tagger\"
        command = [\"tag\"]
        resources = [\"model-server\"]
        labels = [\"gpu\"]
        ";
    let settings = load(fine, &[]).expect("valid");
    assert_eq!(settings.catalogue.resource("model-server").map(|r| r.capacity), Some(2));
    assert_eq!(settings.catalogue.worker("tagger").map(|w| w.labels.clone()), Some(vec!["gpu".to_owned()]));
}

#[test]
fn settings_that_do_not_fit_together_are_refused() {
    let err = load("[database]\nurl = \"mysql://x\"\n[daemon]\nlease_seconds = 1\nworkers = [\"nope\"]\n", &[])
        .expect_err("invalid")
        .to_string();
    for key in ["database.url", "daemon.lease_seconds", "daemon.workers"] {
        assert!(err.contains(key), "{key} not named in {err}");
    }
    let plain_token = "[[auth.tokens]]\nname = \"ci\"\nrole = \"admin\"\nhash = \"scr_secret\"\n";
    let err = load(plain_token, &[]).expect_err("a plain token").to_string();
    assert!(err.contains("auth.tokens[0].hash") && !err.contains("scr_secret"), "{err}");
}

#[test]
fn s3_settings_are_checked_by_key_without_printing_secrets() {
    let s3 = "[object_store]\nkind = \"s3\"\n";
    let err = load(s3, &[]).expect_err("no bucket").to_string();
    assert!(err.contains("`object_store.bucket`: an s3 object store needs a bucket"), "{err}");

    let toml = format!(
        "{s3}bucket = \"logs/run\"\nendpoint = \"minio:9000\"\nregion = \"\"\naccess_key_id = \"AKIDSECRETISH\"\n"
    );
    let err = load(&toml, &[]).expect_err("four mistakes").to_string();
    for key in ["object_store.bucket", "object_store.endpoint", "object_store.region", "object_store.secret_access_key"]
    {
        assert!(err.contains(&format!("`{key}`")), "{key} not named in {err}");
    }
    assert!(err.contains("\"minio:9000\" is not an http:// or https:// URL"), "{err}");
    assert!(!err.contains("AKIDSECRETISH"), "a key is never printed: {err}");

    let with_password = format!("{s3}bucket = \"b\"\nendpoint = \"https://u:hunter2@s3.example.com\"\n");
    let err = load(&with_password, &[]).expect_err("credentials in the URL").to_string();
    assert!(err.contains("`object_store.endpoint`") && !err.contains("hunter2"), "{err}");

    let good = format!(
        "{s3}bucket = \"run-logs\"\nendpoint = \"http://127.0.0.1:9000/\"\nsecret_access_key = \"wJalrSECRET\"\n"
    );
    let settings = load(&good, &[("SCRINALIA__OBJECT_STORE__ACCESS_KEY_ID", "AKIDSECRETISH")]).expect("valid");
    let printed = format!("{settings:?}");
    assert!(!printed.contains("AKIDSECRETISH") && !printed.contains("wJalrSECRET"), "{printed}");
}

#[test]
fn a_missing_file_is_named() {
    let err = Settings::load_from(Some(Path::new("/nonexistent/scrinalia.toml")), Vec::new()).expect_err("missing");
    assert!(err.to_string().contains("/nonexistent/scrinalia.toml"), "{err}");
}

#[test]
fn the_log_cap_has_a_default_an_environment_override_and_a_floor() {
    assert_eq!(load("", &[]).expect("loads").logs.max_bytes_per_run, 64 * 1024 * 1024);
    let settings = load("[logs]\nmax_bytes_per_run = 1048576\n", &[("SCRINALIA__LOGS__MAX_BYTES_PER_RUN", "262144")])
        .expect("loads");
    assert_eq!(settings.logs.max_bytes_per_run, 262_144, "the environment wins over the file");
    let message = load("[logs]\nmax_bytes_per_run = 1000\n", &[]).expect_err("too small").to_string();
    assert!(message.contains("`logs.max_bytes_per_run`: must be at least 65536 (64 KiB)"), "{message}");
}

#[test]
fn the_pooler_settings_load_and_a_listen_url_needs_the_pooler() {
    let pooled = "[database]\nurl = \"postgres://s@pgbouncer:6432/s\"\npooler = \"transaction\"\n\
                  listen_url = \"postgres://s:pw@db:5432/s\"\n";
    let settings = load(pooled, &[]).expect("a pooled configuration");
    assert_eq!(settings.database.pooler, Pooler::Transaction);
    assert_eq!(settings.database.listen_url.as_deref(), Some("postgres://s:pw@db:5432/s"));
    assert!(!format!("{:?}", settings.database).contains("pw@"), "the listen URL's password is redacted");
    let from_env = load("", &[("SCRINALIA__DATABASE__POOLER", "transaction")]).expect("from the environment");
    assert_eq!(from_env.database.pooler, Pooler::Transaction);
    assert_eq!(load("", &[]).expect("defaults").database.pooler, Pooler::None);

    let unpooled = "[database]\nurl = \"postgres://s@db/s\"\nlisten_url = \"postgres://s@db/s\"\n";
    let err = load(unpooled, &[]).expect_err("a listen URL without a pooler").to_string();
    assert!(err.contains("database.listen_url") && err.contains("pooler"), "{err}");
    let not_pg = "[database]\npooler = \"transaction\"\nlisten_url = \"sqlite://x\"\n";
    let err = load(not_pg, &[]).expect_err("a listen URL that is not PostgreSQL").to_string();
    assert!(err.contains("database.listen_url"), "{err}");
    let err = load("[database]\npooler = \"session\"\n", &[]).expect_err("an unknown pooler").to_string();
    assert!(err.contains("pooler"), "{err}");
}

#[test]
fn browser_settings_that_would_open_the_api_to_every_site_are_refused() {
    let err = load("[api]\ncors_origins = [\"*\"]\n", &[]).expect_err("a wildcard").to_string();
    assert!(err.contains("api.cors_origins") && err.contains("\"*\" is refused"), "{err}");
    let err = load("[api]\ncors_origins = [\"https://x.example/path\"]\n", &[]).expect_err("a path").to_string();
    assert!(err.contains("api.cors_origins") && err.contains("without a path"), "{err}");
    let err = load("[api]\npublic_origin = \"scheduler.example.org\"\n", &[]).expect_err("no scheme").to_string();
    assert!(err.contains("api.public_origin"), "{err}");
    let err = load("[api]\nallowed_hosts = [\"https://x.example\"]\n", &[]).expect_err("not a host").to_string();
    assert!(err.contains("api.allowed_hosts"), "{err}");
    let ok = load(
        "[api]\ncors_origins = [\"https://panel.example\"]\npublic_origin = \"https://sched.example\"\nallowed_hosts = [\"sched.internal\"]\n",
        &[],
    )
    .expect("valid");
    assert_eq!(ok.api.allowed_hosts, ["sched.internal"]);
    let env =
        load("", &[("SCRINALIA__API__ALLOWED_HOSTS", "a.example,b.example")]).expect("a list from the environment");
    assert_eq!(env.api.allowed_hosts, ["a.example", "b.example"]);
}

#[test]
fn anonymous_access_is_loopback_only_unless_said_otherwise() {
    let settings = load("[auth]\nanonymous_role = \"viewer\"\n", &[]).expect("loads");
    assert!(settings.auth.anonymous_loopback_only, "the safe default");
    let open = load("[auth]\nanonymous_role = \"viewer\"\nanonymous_loopback_only = false\n", &[]).expect("loads");
    assert!(!open.auth.anonymous_loopback_only);
}

const GROUPS: &str = "[auth.groups]\n\"admins\" = \"admin\"\n";

#[test]
fn a_proxy_trusted_from_too_wide_a_network_or_with_half_a_secret_is_refused() {
    let err = load(&format!("[auth.proxy]\ntrusted = [\"0.0.0.0/0\"]\n{GROUPS}"), &[]).expect_err("wide").to_string();
    assert!(err.contains("auth.proxy.trusted") && err.contains("\"0.0.0.0/0\" is wider than a /8"), "{err}");
    let err = load(&format!("[auth.proxy]\ntrusted = [\"::/4\"]\n{GROUPS}"), &[]).expect_err("wide v6").to_string();
    assert!(err.contains("wider than a /8"), "{err}");
    load(&format!("[auth.proxy]\ntrusted = [\"10.0.0.0/8\"]\n{GROUPS}"), &[]).expect("a /8 is accepted");
    load(&format!("[auth.proxy]\ntrusted = [\"0.0.0.0/0\"]\nallow_wide_trust = true\n{GROUPS}"), &[])
        .expect("accepted when asked for");
    let err = load(&format!("[auth.proxy]\ntrusted = [\"127.0.0.1\"]\nsecret_header = \"X-S\"\n{GROUPS}"), &[])
        .expect_err("a header without its hash")
        .to_string();
    assert!(err.contains("auth.proxy.secret_hash"), "{err}");
    let err = load(
        &format!(
            "[auth.proxy]\ntrusted = [\"127.0.0.1\"]\nsecret_header = \"X-S\"\nsecret_hash = \"hunter2\"\n{GROUPS}"
        ),
        &[],
    )
    .expect_err("the secret itself")
    .to_string();
    assert!(err.contains("auth.proxy.secret_hash") && !err.contains("hunter2"), "{err}");
}

#[test]
fn a_plain_http_jwks_url_to_another_host_and_a_long_leeway_are_refused() {
    let oidc = |url: &str, leeway: u64| {
        format!(
            "[auth.oidc]\nissuer = \"https://idp.example\"\naudience = \"a\"\njwks_url = \"{url}\"\nleeway_seconds = {leeway}\n{GROUPS}"
        )
    };
    let err = load(&oidc("http://idp.example/keys", 30), &[]).expect_err("plain http").to_string();
    assert!(err.contains("auth.oidc.jwks_url") && err.contains("plain http to another host"), "{err}");
    load(&oidc("http://127.0.0.1:9000/keys", 30), &[]).expect("loopback http is accepted (a local issuer)");
    load(&oidc("http://localhost:9000/keys", 300), &[]).expect("localhost too, and 300 s");
    let err = load(&oidc("https://idp.example/keys", 301), &[]).expect_err("a long leeway").to_string();
    assert!(err.contains("auth.oidc.leeway_seconds") && err.contains("at most 300"), "{err}");
}

#[test]
fn a_configured_token_name_with_a_bidi_control_is_refused() {
    let hash = crate::auth::hash_token("x");
    let err =
        load(&format!("[[auth.tokens]]\nname = \"ops\u{202E}nimda\"\nrole = \"admin\"\nhash = \"{hash}\"\n"), &[])
            .expect_err("a bidi control")
            .to_string();
    assert!(err.contains("auth.tokens[0].name") && err.contains("U+202E"), "{err}");
}

#[test]
fn a_daemon_gives_its_own_capacity_of_a_daemon_scoped_resource() {
    let toml = "
        [daemon]
        resources = { gpu = 2 }
        [[resources]]
        name = \"gpu\"
        scope = \"daemon\"
        [[workers]]
        name = \"embed\"
        command = [\"embed\"]
        resources = [\"gpu\"]
        ";
    let settings = load(toml, &[]).expect("loads");
    assert_eq!(settings.daemon.resources.get("gpu"), Some(&2));
    assert_eq!(settings.catalogue.resources[0].scope, crate::ResourceScope::Daemon);
    let env = load(toml, &[("SCRINALIA__DAEMON__RESOURCES__GPU", "4")]).expect("loads");
    assert_eq!(env.daemon.resources.get("gpu"), Some(&4), "the environment overrides it like other settings");

    let capacity = toml.replace("scope = \"daemon\"", "scope = \"daemon\"\ncapacity = 2");
    let err = load(&capacity, &[]).expect_err("a capacity on a daemon-scoped resource").to_string();
    assert!(
        err.contains("`resources[0].capacity`: the daemon-scoped resource \"gpu\" takes no capacity here"),
        "{err}"
    );
    let global = toml.replace("scope = \"daemon\"", "capacity = 1");
    let err = load(&global, &[]).expect_err("a global resource in daemon.resources").to_string();
    assert!(err.contains("`daemon.resources.gpu`: \"gpu\" is a global resource"), "{err}");
    let missing = toml.replace("scope = \"daemon\"", "");
    let err = load(&missing, &[]).expect_err("a global resource without a capacity").to_string();
    assert!(err.contains("`resources[0].capacity`: a resource's capacity must be at least 1"), "{err}");
}

#[test]
fn a_priority_an_expiry_and_starts_per_minute_out_of_range_are_each_named_by_key() {
    let fine = "
        [[resources]]
        name = \"llm-api\"
        capacity = 4
        starts_per_minute = 6
        [[workers]]
        name = \"tagger\"
        command = [\"tag\"]
        priority = 80
        expires_after_seconds = 3600
        ";
    let settings = load(fine, &[]).expect("valid");
    let tagger = settings.catalogue.worker("tagger").expect("tagger");
    assert_eq!((tagger.priority, tagger.expires_after_seconds), (Some(80), Some(3600)));
    assert_eq!(settings.catalogue.resource("llm-api").and_then(|r| r.starts_per_minute), Some(6));

    let bad = "
        [[resources]]
        name = \"llm-api\"
        capacity = 4
        starts_per_minute = 0
        [[resources]]
        name = \"gpu\"
        scope = \"daemon\"
        starts_per_minute = 2
        [[workers]]
        name = \"a\"
        command = [\"a\"]
        priority = 101
        expires_after_seconds = 0
        [[workers]]
        name = \"b\"
        command = [\"b\"]
        priority = -1
        expires_after_seconds = -60
        ";
    let err = load(bad, &[]).expect_err("out of range").to_string();
    for expected in [
        "`resources[0].starts_per_minute`: starts_per_minute must be at least 1 (leave it out for no limit), not 0",
        "`resources[1].starts_per_minute`: starts_per_minute limits starts across all daemons, so only a global",
        "`workers[0].priority`: priority must be a whole number from 0 to 100 (higher goes first), not 101.",
        "`workers[0].expires_after_seconds`: expires_after_seconds must be at least 1",
        "`workers[1].priority`: priority must be a whole number from 0 to 100 (higher goes first), not -1.",
        "`workers[1].expires_after_seconds`: expires_after_seconds must be at least 1 (a queued request not claimed \
         by then is cancelled), not -60.",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
}

#[test]
fn pause_after_failures_is_at_least_1_named_by_key_at_load() {
    let fine = "
        [[workers]]
        name = \"embed\"
        command = [\"embed\"]
        pause_after_failures = 3
        ";
    let settings = load(fine, &[]).expect("valid");
    assert_eq!(settings.catalogue.worker("embed").and_then(|w| w.pause_after_failures), Some(3));
    let bad = "
        [[workers]]
        name = \"a\"
        command = [\"a\"]
        pause_after_failures = 0
        [[workers]]
        name = \"b\"
        command = [\"b\"]
        pause_after_failures = 5000
        ";
    let err = load(bad, &[]).expect_err("out of range").to_string();
    for expected in [
        "`workers[0].pause_after_failures`: pause_after_failures must be at least 1 (the worker is paused after that \
         many failed runs in a row), not 0.",
        "`workers[1].pause_after_failures`: pause_after_failures must be at most 1000, not 5000.",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
}

#[test]
fn backlog_triggers_and_freshness_targets_are_checked_at_load_with_a_sentence_naming_the_key() {
    let good = "
        [[workers]]
        name = \"digest\"
        command = [\"d\"]
        when_pending_at_least = 50
        quiet_seconds = 30
        max_delay_seconds = 600
        fresh_within_seconds = 86400
        ";
    let settings = load(good, &[]).expect("a valid trigger");
    let digest = &settings.catalogue.workers[0];
    assert_eq!(
        (digest.when_pending_at_least, digest.quiet_seconds, digest.max_delay_seconds, digest.fresh_within_seconds),
        (Some(50), Some(30), Some(600), Some(86_400))
    );
    let bad = "
        [[workers]]
        name = \"a\"
        command = [\"a\"]
        when_pending_at_least = 5
        quiet_seconds = 700
        max_delay_seconds = 600
        fresh_within_seconds = 0
        [[workers]]
        name = \"b\"
        command = [\"b\"]
        when_pending_at_least = 0
        fresh_within_seconds = -3
        [[workers]]
        name = \"c\"
        command = [\"c\"]
        quiet_seconds = 30
        ";
    let err = load(bad, &[]).expect_err("bad triggers").to_string();
    for expected in [
        "`workers[0].quiet_seconds`: quiet_seconds (700) cannot be longer than max_delay_seconds (600)",
        "`workers[0].fresh_within_seconds`: fresh_within_seconds must be at least 1 second, not 0.",
        "`workers[1].when_pending_at_least`: when_pending_at_least must be at least 1",
        "`workers[1].fresh_within_seconds`: fresh_within_seconds must be at least 1 second, not -3.",
        "`workers[2].quiet_seconds`: quiet_seconds needs when_pending_at_least",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
}

#[test]
fn a_pipelines_tags_are_read_and_each_bad_one_is_named_by_key() {
    let pipeline =
        |tags: &str| format!("{WORKER}\n[[pipelines]]\nname = \"p\"\nsteps = [\"summarize\"]\ntags = {tags}\n");
    let settings = load(&pipeline("[\"collection:1921-letters\", \"nightly\"]"), &[]).expect("loads");
    assert_eq!(settings.catalogue.pipelines[0].tags, ["collection:1921-letters", "nightly"]);
    let err = load(&pipeline("[\"a b\"]"), &[]).expect_err("a space").to_string();
    assert!(err.contains("`pipelines[0].tags`: Tag \"a b\" is not a short word (it has a space)"), "{err}");
    let eleven: Vec<String> = (0..11).map(|i| format!("\"t{i}\"")).collect();
    let err = load(&pipeline(&format!("[{}]", eleven.join(", "))), &[]).expect_err("eleven").to_string();
    assert!(err.contains("`pipelines[0].tags`: A run takes at most 10 tags, 11 given."), "{err}");
}
