//! What the archive workers' code declares, in one place: the engines with their presets (preset → model) and
//! default endpoints, each worker's default engine and preset, and each worker's options with their types,
//! defaults, bounds and descriptions. `describe` reports all of it, so the catalogue (deploy/demo.toml) repeats
//! none of it.

use serde_json::{Map, Value, json};

use crate::{
    options::{self, Literal, OptionSpec},
    task::Task,
};

/// A model engine the archive workers know.
#[derive(Debug, Clone, Copy)]
pub struct Engine {
    /// Its name (`ollama`).
    pub name: &'static str,
    /// Where it is called unless the daemon says otherwise (none for in-process engines).
    pub endpoint: Option<&'static str>,
    /// Preset → model.
    pub presets: &'static [(&'static str, &'static str)],
}

/// Every engine, with its presets.
pub const ENGINES: [Engine; 2] = [
    Engine {
        name: "ollama",
        endpoint: Some("http://127.0.0.1:11434"),
        presets: &[
            ("fast", "llama3.2:1b"),
            ("balanced", "qwen2.5:7b"),
            ("thorough", "qwen2.5:14b"),
            ("embed", "nomic-embed-text"),
        ],
    },
    Engine { name: "spacy", endpoint: None, presets: &[("small", "en_core_web_sm"), ("large", "en_core_web_lg")] },
];

/// The engine called `name`.
pub fn engine(name: &str) -> Option<&'static Engine> {
    ENGINES.iter().find(|e| e.name == name)
}

/// The model `preset` of `engine` stands for.
pub fn model(engine_name: &str, preset: &str) -> Option<&'static str> {
    engine(engine_name)?.presets.iter().find(|(p, _)| *p == preset).map(|(_, m)| *m)
}

/// `declared.presets`: engine → preset → model.
pub fn presets() -> Value {
    let engines: Map<String, Value> = ENGINES
        .iter()
        .map(|e| {
            let presets: Map<String, Value> = e.presets.iter().map(|(p, m)| ((*p).to_owned(), json!(m))).collect();
            (e.name.to_owned(), Value::Object(presets))
        })
        .collect();
    Value::Object(engines)
}

const fn int(v: i64) -> Option<Literal> {
    Some(Literal::Integer(v))
}

const fn num(v: f64) -> Option<Literal> {
    Some(Literal::Number(v))
}

const BATCH_SIZE: OptionSpec = OptionSpec::integer("batch_size")
    .default(Literal::Integer(10))
    .range(int(1), int(1000))
    .about("Documents per batch; stamps are saved and progress reported after each batch.");
/// Long enough that a run of the twenty documents that are there at first can be watched in the panel.
const DELAY_MS: OptionSpec = OptionSpec::integer("delay_ms")
    .default(Literal::Integer(200))
    .range(int(0), int(60_000))
    .about("Pause after each document, in milliseconds (demo pacing, so a run can be watched in the panel).");
const LIMIT: OptionSpec = OptionSpec::integer("limit")
    .range(int(0), None)
    .about("Process at most this many documents in one run; 0 or unset means all pending.");
const JUDGE_LIMIT: OptionSpec = OptionSpec::integer("limit")
    .range(int(0), None)
    .about("Judge at most this many documents in one run; 0 or unset means all not yet judged.");

const TRANSFER: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::boolean("verify")
        .default(Literal::Boolean(true))
        .about("Read every archived copy back and compare it with the staged document."),
];
const LANGUAGE_DETECT: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::number("min_confidence")
        .default(Literal::Number(0.05))
        .range(num(0.0), num(1.0))
        .about("Below this share of stopwords the language is recorded as undetermined (und)."),
];
const ENTITY_EXTRACT: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::integer("max_entities")
        .default(Literal::Integer(10))
        .range(int(1), int(100))
        .about("Keep at most this many entities per document."),
];
const TAG_SUGGEST: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::integer("max_tags")
        .default(Literal::Integer(5))
        .choices(&[Literal::Integer(3), Literal::Integer(5), Literal::Integer(8)])
        .about("Tags suggested per document."),
];
const TOPIC_CLUSTER: &[OptionSpec] = &[BATCH_SIZE, DELAY_MS, LIMIT];
const SUMMARIZE: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::integer("max_chars")
        .default(Literal::Integer(160))
        .range(int(20), int(2000))
        .about("Longest summary, in characters; a longer first sentence is cut at a word."),
];
const EMBED: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::integer("dimensions")
        .default(Literal::Integer(32))
        .range(int(2), int(4096))
        .about("Length of each vector."),
];
const CONFLICT_JUDGE: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    JUDGE_LIMIT,
    OptionSpec::number("threshold")
        .default(Literal::Number(0.3))
        .range(num(0.0), num(1.0))
        .about("Trigram similarity from which a tag and an entity are judged to name the same thing."),
];
const QUALITY_VALIDATOR: &[OptionSpec] = &[
    BATCH_SIZE,
    DELAY_MS,
    LIMIT,
    OptionSpec::integer("min_words")
        .default(Literal::Integer(20))
        .range(int(0), int(10_000))
        .about("A document body with fewer words is flagged."),
];

impl Task {
    /// The options it accepts: `batch_size`, `delay_ms`, `limit`, and its own.
    pub fn options(self) -> &'static [OptionSpec] {
        match self {
            Self::Transfer => TRANSFER,
            Self::LanguageDetect => LANGUAGE_DETECT,
            Self::EntityExtract => ENTITY_EXTRACT,
            Self::TagSuggest => TAG_SUGGEST,
            Self::TopicCluster => TOPIC_CLUSTER,
            Self::Summarize => SUMMARIZE,
            Self::Embed => EMBED,
            Self::ConflictJudge => CONFLICT_JUDGE,
            Self::QualityValidator => QUALITY_VALIDATOR,
        }
    }

    /// The engine and preset it uses unless told otherwise; `None` for a worker without a model, and for the
    /// quality validator, whose engine is not chosen here but by the active LLM_CHECK cleaning rule.
    pub fn default_engine(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Transfer | Self::LanguageDetect | Self::QualityValidator => None,
            Self::EntityExtract => Some(("spacy", "small")),
            Self::TagSuggest => Some(("ollama", "fast")),
            Self::TopicCluster | Self::Summarize => Some(("ollama", "balanced")),
            Self::Embed => Some(("ollama", "embed")),
            Self::ConflictJudge => Some(("ollama", "thorough")),
        }
    }

    /// `describe`'s `declared` section: the options, the default engine and preset, and every engine's presets.
    pub fn declared(self) -> Value {
        let (engine, preset) = self.default_engine().unzip();
        json!({
            "options": options::declared(self.options()),
            "engine": engine,
            "preset": preset,
            "presets": presets(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_engine_and_preset_is_declared() {
        for task in Task::ALL {
            if let Some((engine, preset)) = task.default_engine() {
                assert!(model(engine, preset).is_some(), "{}: {engine}/{preset}", task.name());
            }
        }
    }

    #[test]
    fn the_declared_section_has_types_defaults_and_bounds() {
        let declared = Task::TagSuggest.declared();
        assert_eq!((declared["engine"].as_str(), declared["preset"].as_str()), (Some("ollama"), Some("fast")));
        assert_eq!(declared["presets"]["ollama"]["thorough"], "qwen2.5:14b");
        assert_eq!(declared["presets"]["spacy"]["small"], "en_core_web_sm");
        let options = declared["options"].as_array().expect("options");
        let named = |name: &str| options.iter().find(|o| o["name"] == name).cloned().expect(name);
        assert_eq!(
            named("batch_size"),
            json!({"name": "batch_size", "type": "integer", "default": 10, "minimum": 1, "maximum": 1000,
                   "description": "Documents per batch; stamps are saved and progress reported after each batch."})
        );
        assert_eq!(
            (named("delay_ms")["minimum"].clone(), named("delay_ms")["maximum"].clone()),
            (json!(0), json!(60000))
        );
        assert_eq!(named("limit").get("default"), None, "limit has no default");
        assert_eq!(named("limit")["minimum"], 0);
        assert_eq!(named("max_tags")["choices"], json!([3, 5, 8]));

        let judge = Task::ConflictJudge.declared();
        let threshold = judge["options"].as_array().and_then(|o| o.iter().find(|o| o["name"] == "threshold"));
        assert_eq!(threshold.map(|t| (t["type"].clone(), t["default"].clone())), Some((json!("number"), json!(0.3))));
        let verify = Task::Transfer.declared()["options"][3].clone();
        assert_eq!((verify["type"].clone(), verify["default"].clone()), (json!("boolean"), json!(true)));

        let validator = Task::QualityValidator.declared();
        assert_eq!((validator["engine"].clone(), validator["preset"].clone()), (Value::Null, Value::Null));
    }
}
