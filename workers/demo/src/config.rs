//! The engine configuration a worker uses, as `describe` reports it and as `run` announces it on its first
//! line: engine, preset, model, endpoint, and where they come from when not from this program's own choice.
//! An archive worker takes what its flags (or the `SCRINALIA_*` environment) say and its declared defaults
//! for the rest; the quality validator takes the active LLM_CHECK cleaning rule instead, whatever it is given.

use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};

use crate::{invocation::EngineChoice, registry, rules, task::Task};

/// Where an engine configuration comes from, when it is not chosen here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// A sentence naming where the engine comes from.
    pub description: String,
    /// Which record it is, if there is one (`LLM_CHECK rule 3`).
    pub reference: Option<String>,
}

/// The engine configuration of one execution.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EngineConfig {
    /// The engine.
    pub engine: Option<String>,
    /// Its preset.
    pub preset: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// Where the engine is called.
    pub endpoint: Option<String>,
    /// Where all of this comes from, when not from the flags and the code's defaults.
    pub source: Option<Source>,
}

impl EngineConfig {
    /// Exactly what the flags say (the probes, which have no defaults).
    pub fn from_flags(flags: &EngineChoice) -> Self {
        Self {
            engine: flags.engine.clone(),
            preset: flags.preset.clone(),
            model: flags.model.clone(),
            endpoint: flags.endpoint.clone(),
            source: None,
        }
    }

    /// The flags, completed by `default` (engine and preset) and by what the code declares of that engine:
    /// the preset's model and the engine's endpoint.
    pub fn with_defaults(flags: &EngineChoice, default: Option<(&str, &str)>) -> Self {
        let engine = flags.engine.clone().or_else(|| default.map(|(e, _)| e.to_owned()));
        // The default preset belongs to the default engine; another engine given alone has no preset.
        let preset = flags
            .preset
            .clone()
            .or_else(|| default.filter(|(e, _)| engine.as_deref() == Some(*e)).map(|(_, p)| p.to_owned()));
        let model = flags.model.clone().or_else(|| match (&engine, &preset) {
            (Some(e), Some(p)) => registry::model(e, p).map(str::to_owned),
            _ => None,
        });
        let endpoint = flags
            .endpoint
            .clone()
            .or_else(|| engine.as_deref().and_then(registry::engine).and_then(|e| e.endpoint).map(str::to_owned));
        Self { engine, preset, model, endpoint, source: None }
    }

    /// What `rule` says (nothing, with no rule): a model the rule leaves out is its preset's, and an endpoint
    /// it leaves out is the flag's, or the engine's.
    pub fn from_rule(rule: Option<&rules::Rule>, flags: &EngineChoice) -> Self {
        let source =
            Some(Source { description: rules::SOURCE.to_owned(), reference: rule.map(rules::Rule::reference) });
        let Some(rule) = rule else { return Self { source, ..Self::default() } };
        let model = rule.model.clone().or_else(|| match (&rule.engine, &rule.preset) {
            (Some(e), Some(p)) => registry::model(e, p).map(str::to_owned),
            _ => None,
        });
        let endpoint =
            rule.endpoint.clone().or_else(|| flags.endpoint.clone()).or_else(|| {
                rule.engine.as_deref().and_then(registry::engine).and_then(|e| e.endpoint).map(str::to_owned)
            });
        Self { engine: rule.engine.clone(), preset: rule.preset.clone(), model, endpoint, source }
    }

    /// The configuration of an archive worker: the validator's from its rule, the others' from flags and
    /// defaults. An unreadable rules file is an error; a missing rule is not (the fields are then null).
    pub fn of_task(task: Task, flags: &EngineChoice, data: &Path) -> anyhow::Result<Self> {
        if task == Task::QualityValidator {
            let book = rules::RuleBook::load(data)?;
            return Ok(Self::from_rule(book.active_check(), flags));
        }
        Ok(Self::with_defaults(flags, task.default_engine()))
    }

    /// As a JSON object.
    pub fn json(&self) -> Value {
        json!(self)
    }

    /// `describe`'s answer: this configuration, and what the code declares.
    pub fn described(&self, declared: Value) -> Value {
        let mut object = self.json();
        object["declared"] = declared;
        object
    }

    /// How a log line names the model (`qwen2.5:14b`, or `no model`).
    pub fn model_name(&self) -> &str {
        self.model.as_deref().unwrap_or("no model")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(engine: Option<&str>, preset: Option<&str>) -> EngineChoice {
        EngineChoice { engine: engine.map(Into::into), preset: preset.map(Into::into), ..EngineChoice::default() }
    }

    #[test]
    fn defaults_fill_in_what_the_flags_leave_out() {
        let none = EngineConfig::with_defaults(&flags(None, None), Some(("ollama", "fast")));
        assert_eq!(
            none.json(),
            json!({"engine": "ollama", "preset": "fast", "model": "llama3.2:1b", "endpoint": "http://127.0.0.1:11434",
                   "source": null})
        );
        let preset = EngineConfig::with_defaults(&flags(None, Some("thorough")), Some(("ollama", "fast")));
        assert_eq!(preset.model.as_deref(), Some("qwen2.5:14b"));
        let other = EngineConfig::with_defaults(&flags(Some("spacy"), None), Some(("ollama", "fast")));
        assert_eq!((other.preset, other.model, other.endpoint), (None, None, None));
        let nothing = EngineConfig::with_defaults(&flags(None, None), None);
        assert_eq!(nothing, EngineConfig::default());
    }

    #[test]
    fn the_rule_wins_over_the_flags() {
        let rule = rules::Rule {
            id: 3,
            kind: rules::LLM_CHECK.into(),
            active: true,
            engine: Some("ollama".into()),
            preset: Some("balanced".into()),
            model: None,
            endpoint: None,
        };
        let config = EngineConfig::from_rule(Some(&rule), &flags(Some("spacy"), Some("small")));
        assert_eq!((config.engine.as_deref(), config.model.as_deref()), (Some("ollama"), Some("qwen2.5:7b")));
        assert_eq!(config.source.and_then(|s| s.reference).as_deref(), Some("LLM_CHECK rule 3"));
        let none = EngineConfig::from_rule(None, &flags(Some("spacy"), None));
        assert_eq!(
            none.json(),
            json!({"engine": null, "preset": null, "model": null, "endpoint": null,
                   "source": {"description": "the active LLM_CHECK cleaning rule", "reference": null}})
        );
    }
}
