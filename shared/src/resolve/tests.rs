use serde_json::json;

use super::*;
use crate::catalogue::{Catalogue, Engine, OptionSpec, OptionType, WorkerSpec};

fn catalogue() -> Catalogue {
    let engine = Engine {
        kind: "ollama".into(),
        url: Some("http://models:11434".into()),
        presets: [("fast".into(), "small:1b".into()), ("thorough".into(), "big:14b".into())].into(),
        description: None,
    };
    let option = |name: &str, kind, default: Option<Value>| OptionSpec {
        name: name.into(),
        kind,
        default,
        choices: None,
        minimum: (name == "batch_size").then(|| 1.into()),
        maximum: (name == "batch_size").then(|| 500.into()),
        description: None,
    };
    let worker = |name: &str, engine_source: Option<&str>| WorkerSpec {
        name: name.into(),
        title: None,
        axis: "enrichment".into(),
        governance: "curated".into(),
        stamp: format!("{name}_v1"),
        description: None,
        command: vec!["worker".into()],
        engine: Some("ollama".into()),
        preset: Some("fast".into()),
        engine_source: engine_source.map(Into::into),
        engine_source_url: None,
        options: vec![
            option("batch_size", OptionType::Integer, Some(json!(50))),
            option("language", OptionType::String, Some(json!("en"))),
            option("dry_run", OptionType::Boolean, None),
        ],
        timeout_seconds: 600,
        env: Default::default(),
        retry: None,
        resources: Vec::new(),
        labels: Vec::new(),
        quarantine_after: None,
        memory_max: (name == "tag-suggest").then(|| "4GiB".into()),
        cpu_max: None,
        stall_seconds: (name == "tag-suggest").then_some(600),
        priority: None,
        expires_after_seconds: None,
        preemptible: false,
        pause_after_failures: None,
        when_pending_at_least: None,
        quiet_seconds: None,
        max_delay_seconds: None,
        fresh_within_seconds: None,
    };
    Catalogue::new(
        vec![worker("tag-suggest", None), worker("quality-validator", Some("It comes from the LLM_CHECK rule."))],
        [("ollama".into(), engine)].into(),
    )
    .expect("a valid catalogue")
}

#[test]
fn explicit_beats_override_beats_default_and_a_partial_override_follows_the_default() {
    let cat = catalogue();
    let worker = &EffectiveWorker::from_catalogue(&cat, cat.worker("tag-suggest").expect("worker"));
    let overrides = OverrideValues {
        engine: None,
        preset: Some("thorough".into()),
        options: [("batch_size".into(), json!(8)), ("language".into(), json!("pt"))].into(),
        ..Default::default()
    };
    let explicit = ExplicitArgs { options: [("language".into(), json!("fr"))].into(), ..Default::default() };
    let resolved = resolve(worker, &explicit, Some(&overrides)).expect("resolves");
    assert_eq!(resolved.engine, Some(Resolved { value: "ollama".into(), source: Source::Default }));
    assert_eq!(resolved.preset, Some(Resolved { value: "thorough".into(), source: Source::Override }));
    assert_eq!(resolved.model.as_deref(), Some("big:14b"), "the model follows the resolved preset");
    assert_eq!(resolved.endpoint.as_deref(), Some("http://models:11434"));
    assert_eq!(resolved.options["batch_size"], Resolved { value: json!(8), source: Source::Override });
    assert_eq!(resolved.options["language"], Resolved { value: json!("fr"), source: Source::Explicit });
    assert!(!resolved.options.contains_key("dry_run"), "no default and no value: nothing is passed");

    let view = resolve(worker, &ExplicitArgs::default(), None).expect("resolves");
    assert_eq!(view.preset, Some(Resolved { value: "fast".into(), source: Source::Default }));
    assert_eq!(view.options["batch_size"], Resolved { value: json!(50), source: Source::Default });
}

#[test]
fn bad_explicit_arguments_are_rejected_with_a_sentence() {
    let cat = catalogue();
    let worker = &EffectiveWorker::from_catalogue(&cat, cat.worker("tag-suggest").expect("worker"));
    let with = |options: Value| ExplicitArgs {
        options: serde_json::from_value(options).expect("options"),
        ..Default::default()
    };
    let unknown = resolve(worker, &with(json!({"batchsize": 3})), None).expect_err("unknown option");
    assert_eq!(
        unknown.to_string(),
        "Worker \"tag-suggest\" has no option \"batchsize\"; it accepts: batch_size, language, dry_run."
    );
    let wrong = resolve(worker, &with(json!({"batch_size": "ten"})), None).expect_err("wrong type");
    assert_eq!(wrong.to_string(), "Option \"batch_size\" must be a whole number, not string \"ten\".");
    let fraction = resolve(worker, &with(json!({"batch_size": 2.5})), None).expect_err("not whole");
    assert!(matches!(fraction, ResolveError::WrongType { .. }));
    // A long value is cut by characters: a cut inside a multi-byte character used to panic.
    let long = resolve(worker, &with(json!({"batch_size": "é".repeat(50)})), None).expect_err("wrong type");
    assert!(long.to_string().contains(&format!("not string \"{}...", "é".repeat(36))), "{long}");
    let negative = resolve(worker, &with(json!({"batch_size": -5})), None);
    assert_eq!(negative.expect_err("below").to_string(), "Option \"batch_size\" must be at least 1, not -5.");
    let huge = resolve(worker, &with(json!({"batch_size": 501})), None);
    assert_eq!(huge.expect_err("above").to_string(), "Option \"batch_size\" must be at most 500, not 501.");
    let preset = ExplicitArgs { preset: Some("huge".into()), ..Default::default() };
    assert_eq!(
        resolve(worker, &preset, None).expect_err("unknown preset").to_string(),
        "Engine \"ollama\" has no preset \"huge\"; its presets are: fast, thorough."
    );
    let engine = ExplicitArgs { engine: Some("openai".into()), ..Default::default() };
    assert!(matches!(resolve(worker, &engine, None), Err(ResolveError::UnknownEngine { .. })));
}

#[test]
fn an_engine_from_elsewhere_cannot_be_chosen_here() {
    let cat = catalogue();
    let worker = &EffectiveWorker::from_catalogue(&cat, cat.worker("quality-validator").expect("worker"));
    let explicit = ExplicitArgs { preset: Some("thorough".into()), ..Default::default() };
    let refused = resolve(worker, &explicit, None).expect_err("not configurable");
    assert_eq!(
        refused.to_string(),
        "The engine of worker \"quality-validator\" is not configurable here: It comes from the LLM_CHECK rule."
    );
    let overrides = OverrideValues { engine: Some("ollama".into()), ..Default::default() };
    assert!(check_override(worker, &overrides).is_err());
    let view = resolve(worker, &ExplicitArgs::default(), None).expect("the view still resolves");
    assert_eq!(view.engine.map(|e| e.source), Some(Source::External));
    assert!(!view.engine_configurable);
}

#[test]
fn limits_come_from_the_override_else_the_catalogue_and_never_from_a_run() {
    let cat = catalogue();
    let worker = &EffectiveWorker::from_catalogue(&cat, cat.worker("tag-suggest").expect("worker"));
    let view = resolve(worker, &ExplicitArgs::default(), None).expect("resolves");
    assert_eq!(view.memory_max_bytes, Some(Resolved { value: 4 << 30, source: Source::Default }));
    assert_eq!(view.stall_seconds, Some(Resolved { value: 600, source: Source::Default }));
    assert_eq!(view.cpu_max, None, "no limit, none resolved");
    let overrides = OverrideValues {
        memory_max: Some("512MiB".into()),
        cpu_max: Some(0.5),
        stall_seconds: Some(30),
        ..Default::default()
    };
    check_override(worker, &overrides).expect("a valid override");
    let resolved = resolve(worker, &ExplicitArgs::default(), Some(&overrides)).expect("resolves");
    assert_eq!(resolved.memory_max_bytes, Some(Resolved { value: 512 << 20, source: Source::Override }));
    assert_eq!(resolved.cpu_max, Some(Resolved { value: 0.5, source: Source::Override }));
    assert_eq!(resolved.stall_seconds, Some(Resolved { value: 30, source: Source::Override }));

    let bad = |values: OverrideValues| check_override(worker, &values).expect_err("refused").to_string();
    assert!(bad(OverrideValues { memory_max: Some("lots".into()), ..Default::default() }).starts_with("memory_max"));
    assert_eq!(
        bad(OverrideValues { cpu_max: Some(0.0), ..Default::default() }),
        "cpu_max must be more than 0 cores (0.5 is half a core), not 0."
    );
    assert_eq!(
        bad(OverrideValues { stall_seconds: Some(0), ..Default::default() }),
        "stall_seconds must be at least 1 second, not 0."
    );
    let arguments = ExplicitArgs { stall_seconds: Some(5), ..Default::default() };
    let refused = resolve(worker, &arguments, None).expect_err("a run cannot set a limit");
    assert_eq!(refused, ResolveError::LimitInArguments { key: "stall_seconds" });
    assert!(refused.to_string().starts_with("stall_seconds is a limit of the worker"), "{refused}");
}
