use serde_json::json;

use super::*;
use crate::{OptionType, catalogue::Engine};

fn option(name: &str, kind: OptionType, default: Option<Value>) -> OptionSpec {
    OptionSpec { name: name.into(), kind, default, choices: None, minimum: None, maximum: None, description: None }
}

fn catalogue() -> (Catalogue, WorkerSpec) {
    let engine = Engine {
        kind: "ollama".into(),
        url: Some("http://models:11434".into()),
        presets: [("fast".into(), "small:1b".into())].into(),
        description: None,
    };
    let mut described = option("batch_size", OptionType::Integer, Some(json!(10)));
    described.description = Some("Documents per batch.".into());
    let worker = WorkerSpec {
        name: "tag-suggest".into(),
        title: None,
        axis: "enrichment".into(),
        governance: "curated".into(),
        stamp: "tags_v1".into(),
        description: None,
        command: vec!["worker".into()],
        engine: Some("ollama".into()),
        preset: Some("fast".into()),
        engine_source: None,
        engine_source_url: None,
        options: vec![described, option("legacy", OptionType::String, None)],
        timeout_seconds: 600,
        env: Default::default(),
        retry: None,
        resources: Vec::new(),
        labels: Vec::new(),
        quarantine_after: None,
        memory_max: None,
        cpu_max: None,
        stall_seconds: None,
        priority: None,
        expires_after_seconds: None,
        preemptible: false,
        pause_after_failures: None,
        when_pending_at_least: None,
        quiet_seconds: None,
        max_delay_seconds: None,
        fresh_within_seconds: None,
    };
    let catalogue = Catalogue::new(vec![worker.clone()], [("ollama".into(), engine)].into()).expect("valid");
    (catalogue, worker)
}

fn code() -> Description {
    let mut batch = option("batch_size", OptionType::Integer, Some(json!(20)));
    batch.minimum = Some(1.into());
    batch.maximum = Some(500.into());
    Description {
        declared: Some(Declared {
            options: vec![batch, option("max_tags", OptionType::Integer, Some(json!(5)))],
            engine: Some("ollama".into()),
            preset: Some("balanced".into()),
            presets: [(
                "ollama".into(),
                [("fast".into(), "small:3b".into()), ("balanced".into(), "mid:7b".into())].into(),
            )]
            .into(),
        }),
        ..Default::default()
    }
}

#[test]
fn the_code_wins_and_each_disagreement_is_a_sentence() {
    let (catalogue, spec) = catalogue();
    let merged = EffectiveWorker::of(&catalogue, &spec, Some(&code()));
    let batch = merged.spec.option("batch_size").expect("batch_size");
    assert_eq!(batch.default, Some(json!(20)), "the code's default");
    assert_eq!(batch.minimum, Some(1.into()), "the code's bound");
    assert_eq!(batch.description.as_deref(), Some("Documents per batch."), "the catalogue's words for people");
    assert_eq!(merged.spec.option("max_tags").and_then(|o| o.default.clone()), Some(json!(5)), "only in the code");
    assert!(merged.spec.option("legacy").is_none(), "an option the code does not have is not passed");
    assert_eq!(merged.spec.preset.as_deref(), Some("balanced"));
    assert_eq!(merged.engines["ollama"].presets["balanced"], "mid:7b");
    assert_eq!(merged.engines["ollama"].url.as_deref(), Some("http://models:11434"), "the catalogue's server");
    assert_eq!(
        merged.disagreements,
        [
            "catalogue says preset fast of ollama is small:1b, code says small:3b; runs use small:3b",
            "catalogue says batch_size 10, code says 20; runs use 20",
            "catalogue declares option legacy, code has no such option; it is not passed",
            "catalogue says preset fast, code says balanced; runs use balanced",
        ]
    );
}

#[test]
fn without_a_description_the_catalogue_stands_alone() {
    let (catalogue, spec) = catalogue();
    let alone = EffectiveWorker::from_catalogue(&catalogue, &spec);
    assert_eq!(alone.spec.option("batch_size").and_then(|o| o.default.clone()), Some(json!(10)));
    assert!(alone.disagreements.is_empty());
    assert!(alone.engine_configurable());
}

#[test]
fn an_engine_from_elsewhere_replaces_the_catalogue_engine() {
    let (catalogue, spec) = catalogue();
    let described = Description {
        engine: Some("ollama".into()),
        preset: Some("thorough".into()),
        model: Some("big:14b".into()),
        source: Some(EngineSource {
            description: "the active LLM_CHECK cleaning rule".into(),
            reference: Some("LLM_CHECK rule 3".into()),
        }),
        declared: Some(Declared { options: vec![], ..Default::default() }),
        ..Default::default()
    };
    let merged = EffectiveWorker::of(&catalogue, &spec, Some(&described));
    assert!(!merged.engine_configurable());
    assert_eq!(merged.spec.engine, None);
    assert_eq!(
        merged.spec.engine_source.as_deref(),
        Some("It comes from the active LLM_CHECK cleaning rule (LLM_CHECK rule 3).")
    );
    assert!(merged.disagreements.iter().any(|d| d.starts_with("catalogue says engine ollama, code says the engine")));
}
