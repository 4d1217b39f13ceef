//! A worker as runs see it: its catalogue entry merged with what its code last declared through `describe`.
//!
//! The code is the one source of what it can say (option types, defaults, choices and bounds, the engine and
//! preset defaults, each preset's model, where an engine chosen elsewhere comes from); the catalogue keeps what
//! the code cannot say (order, axis, governance, stamp, command, timeout, descriptions) and speaks for workers
//! that do not describe themselves. Where the two disagree the code wins, and the disagreement is kept as a
//! sentence for the panel and health. The worker view and every run resolve through this one merge.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{
    Declared, Description, EngineSource,
    catalogue::{Catalogue, Engine, OptionSpec, WorkerSpec, bound_problems},
};

/// A worker's catalogue entry with its code's declarations applied.
#[derive(Debug, Clone)]
pub struct EffectiveWorker {
    /// The entry runs use: the catalogue's, with the code's options, engine and preset.
    pub spec: WorkerSpec,
    /// The engines it can use: the catalogue's, with the presets its code declares.
    pub engines: BTreeMap<String, Engine>,
    /// Where its engine comes from when it is not chosen here (from the code, or the catalogue's sentence).
    pub engine_source: Option<EngineSource>,
    /// What its description said about the engine it uses by itself (for an engine from elsewhere).
    pub described: Option<Description>,
    /// Each place where the catalogue and the code disagree, as a sentence ("catalogue says batch_size 10,
    /// code says 20; runs use 20").
    pub disagreements: Vec<String>,
}

impl EffectiveWorker {
    /// The catalogue entry alone, for a worker whose code has not described itself (yet).
    pub fn from_catalogue(catalogue: &Catalogue, spec: &WorkerSpec) -> Self {
        Self::of(catalogue, spec, None)
    }

    /// `spec` merged with `description` (the code wins).
    pub fn of(catalogue: &Catalogue, spec: &WorkerSpec, description: Option<&Description>) -> Self {
        let mut merged = Self {
            spec: spec.clone(),
            engines: catalogue.engines.clone(),
            engine_source: spec.engine_source.clone().map(|description| EngineSource { description, reference: None }),
            described: description.cloned(),
            disagreements: Vec::new(),
        };
        let Some(description) = description else { return merged };
        if let Some(declared) = &description.declared {
            merged.apply_presets(declared);
            merged.apply_options(declared);
            if description.source.is_none() {
                merged.apply_engine(declared);
            }
        }
        if let Some(source) = &description.source {
            merged.apply_source(source);
        }
        merged
    }

    /// The worker's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether engine and preset may be chosen here.
    pub fn engine_configurable(&self) -> bool {
        self.engine_source.is_none()
    }

    fn disagree(&mut self, what: &str, catalogue: impl std::fmt::Display, code: impl std::fmt::Display) {
        self.disagreements.push(format!("catalogue says {what} {catalogue}, code says {code}; runs use {code}"));
    }

    fn apply_presets(&mut self, declared: &Declared) {
        for (engine, presets) in &declared.presets {
            let known = self.engines.entry(engine.clone()).or_insert_with(|| Engine {
                kind: "none".to_owned(),
                url: None,
                presets: BTreeMap::new(),
                description: None,
            });
            let mut disagreements = Vec::new();
            for (preset, model) in presets {
                match known.presets.insert(preset.clone(), model.clone()) {
                    Some(old) if &old != model => disagreements.push((preset, old, model)),
                    _ => {}
                }
            }
            for (preset, old, model) in disagreements {
                self.disagree(&format!("preset {preset} of {engine} is"), old, model);
            }
        }
    }

    fn apply_engine(&mut self, declared: &Declared) {
        for (what, catalogue, code) in [
            ("engine", self.spec.engine.clone(), declared.engine.clone()),
            ("preset", self.spec.preset.clone(), declared.preset.clone()),
        ] {
            let Some(code) = code else { continue };
            if let Some(catalogue) = catalogue.filter(|c| *c != code) {
                self.disagree(what, catalogue, &code);
            }
            if what == "engine" {
                self.spec.engine = Some(code);
            } else {
                self.spec.preset = Some(code);
            }
        }
    }

    fn apply_source(&mut self, source: &EngineSource) {
        let sentence = match &source.reference {
            Some(reference) => format!("It comes from {} ({reference}).", source.description),
            None => format!("It comes from {}, and there is none now.", source.description),
        };
        for (what, catalogue) in [("engine", self.spec.engine.take()), ("preset", self.spec.preset.take())] {
            if let Some(catalogue) = catalogue {
                self.disagreements.push(format!(
                    "catalogue says {what} {catalogue}, code says the engine comes from {}; runs use that",
                    source.description
                ));
            }
        }
        self.spec.engine_source = Some(sentence);
        self.engine_source = Some(source.clone());
    }

    fn apply_options(&mut self, declared: &Declared) {
        let mut options = Vec::with_capacity(declared.options.len());
        for code in &declared.options {
            let Some(catalogue) = self.spec.option(&code.name).cloned() else {
                options.push(code.clone());
                continue;
            };
            options.push(self.merge_option(catalogue, code));
        }
        for dropped in self.spec.options.iter().filter(|o| !declared.options.iter().any(|c| c.name == o.name)) {
            self.disagreements
                .push(format!("catalogue declares option {}, code has no such option; it is not passed", dropped.name));
        }
        self.spec.options = options;
    }

    /// One option declared by both: each field the code declares wins; the catalogue fills the rest (its
    /// description first: it is written for the people reading the panel).
    fn merge_option(&mut self, catalogue: OptionSpec, code: &OptionSpec) -> OptionSpec {
        let name = &code.name;
        if catalogue.kind != code.kind {
            self.disagree(&format!("{name} is"), catalogue.kind.name(), code.kind.name());
        }
        let mut merged = OptionSpec {
            name: name.clone(),
            kind: code.kind,
            default: pick(&mut self.disagreements, name, "", catalogue.default, code.default.clone()),
            choices: None,
            minimum: None,
            maximum: None,
            description: catalogue.description.or_else(|| code.description.clone()),
        };
        let choices = |c: &Option<Vec<Value>>| c.clone().map(Value::Array);
        merged.choices =
            pick(&mut self.disagreements, name, " choices", choices(&catalogue.choices), choices(&code.choices))
                .and_then(|c| match c {
                    Value::Array(items) => Some(items),
                    _ => None,
                });
        let number = |n: &Option<serde_json::Number>| n.clone().map(Value::Number);
        let bound = |v: Option<Value>| match v {
            Some(Value::Number(n)) => Some(n),
            _ => None,
        };
        merged.minimum =
            bound(pick(&mut self.disagreements, name, " minimum", number(&catalogue.minimum), number(&code.minimum)));
        merged.maximum =
            bound(pick(&mut self.disagreements, name, " maximum", number(&catalogue.maximum), number(&code.maximum)));
        // A catalogue bound or default that does not fit the code's type or bounds is dropped, not passed on.
        if !bound_problems(&merged).is_empty() || merged.default.as_ref().is_some_and(|d| !merged.kind.admits(d)) {
            merged.default = code.default.clone();
            merged.minimum = code.minimum.clone();
            merged.maximum = code.maximum.clone();
            merged.choices = code.choices.clone();
        }
        merged
    }
}

/// The code's value when it declares one (noting a different catalogue value), else the catalogue's.
fn pick(
    disagreements: &mut Vec<String>,
    name: &str,
    what: &str,
    catalogue: Option<Value>,
    code: Option<Value>,
) -> Option<Value> {
    match (catalogue, code) {
        (Some(catalogue), Some(code)) => {
            if catalogue != code {
                disagreements
                    .push(format!("catalogue says {name}{what} {catalogue}, code says {code}; runs use {code}"));
            }
            Some(code)
        }
        (catalogue, code) => code.or(catalogue),
    }
}

#[cfg(test)]
mod tests;
