//! The nine archive workers as tasks over one document each: what options each accepts and what it records in
//! its stamp. The loop that feeds them documents is in `archive.rs`.

use std::{fs, path::PathBuf};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::{
    corpus::Document,
    invocation::{EngineChoice, Kind, OptionSpec, Options, opt},
    stamps::write_atomically,
    text,
};

/// One of the nine archive workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Copies staged documents into the archive folder.
    Transfer,
    /// Detects each document's language by stopword counts.
    LanguageDetect,
    /// Finds capitalised word sequences.
    EntityExtract,
    /// Suggests the most frequent non-stopwords as tags.
    TagSuggest,
    /// Groups documents by their top tag.
    TopicCluster,
    /// Keeps the first sentence.
    Summarize,
    /// Computes a hashed bag-of-words vector.
    Embed,
    /// Compares tags with entities and judges whether they agree.
    ConflictJudge,
    /// Checks each document against simple quality rules.
    QualityValidator,
}

const COMMON: [OptionSpec; 3] =
    [opt("batch_size", Kind::Integer), opt("delay_ms", Kind::Integer), opt("limit", Kind::Integer)];

macro_rules! options {
    ($($name:literal: $kind:ident),*) => {{
        const OPTIONS: &[OptionSpec] = &[COMMON[0], COMMON[1], COMMON[2], $(opt($name, Kind::$kind)),*];
        OPTIONS
    }};
}

/// What a task found in one document.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Recorded in the worker's stamp for the document.
    pub record: Value,
    /// The bucket the document is counted in for the run's result (a language, a verdict, a cluster, …).
    pub tally: String,
}

/// What a task needs besides the document.
#[derive(Debug, Clone)]
pub struct Context {
    /// The data folder.
    pub data: PathBuf,
    /// The worker's options.
    pub options: Options,
    /// The resolved engine, recorded with results that a model would produce.
    pub engine: EngineChoice,
}

impl Task {
    /// All of them, in catalogue order.
    pub const ALL: [Self; 9] = [
        Self::Transfer,
        Self::LanguageDetect,
        Self::EntityExtract,
        Self::TagSuggest,
        Self::TopicCluster,
        Self::Summarize,
        Self::Embed,
        Self::ConflictJudge,
        Self::QualityValidator,
    ];

    /// The worker's name in the catalogue.
    pub fn name(self) -> &'static str {
        match self {
            Self::Transfer => "transfer",
            Self::LanguageDetect => "language-detect",
            Self::EntityExtract => "entity-extract",
            Self::TagSuggest => "tag-suggest",
            Self::TopicCluster => "topic-cluster",
            Self::Summarize => "summarize",
            Self::Embed => "embed",
            Self::ConflictJudge => "conflict-judge",
            Self::QualityValidator => "quality-validator",
        }
    }

    /// The task called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The stamp it leaves on each document it processed (the catalogue's `stamp`).
    pub fn stamp(self) -> &'static str {
        match self {
            Self::Transfer => "archived_v1",
            Self::LanguageDetect => "language_v1",
            Self::EntityExtract => "entities_v1",
            Self::TagSuggest => "tags_v1",
            Self::TopicCluster => "topics_v1",
            Self::Summarize => "summary_v1",
            Self::Embed => "embedding_v1",
            Self::ConflictJudge => "conflicts_v1",
            Self::QualityValidator => "quality_v1",
        }
    }

    /// The options it accepts: `batch_size`, `delay_ms`, `limit`, and its own.
    pub fn options(self) -> &'static [OptionSpec] {
        match self {
            Self::Transfer => options!("verify": Boolean),
            Self::LanguageDetect => options!("min_confidence": Number),
            Self::EntityExtract => options!("max_entities": Integer),
            Self::TagSuggest => options!("max_tags": Integer),
            Self::TopicCluster => options!(),
            Self::Summarize => options!("max_chars": Integer),
            Self::Embed => options!("dimensions": Integer),
            Self::ConflictJudge => options!("threshold": Number),
            Self::QualityValidator => options!("min_words": Integer),
        }
    }

    /// The name of the result field that counts documents by their [`Outcome::tally`].
    pub fn tally_name(self) -> &'static str {
        match self {
            Self::Transfer => "archived",
            Self::LanguageDetect => "languages",
            Self::EntityExtract | Self::TagSuggest => "sizes",
            Self::TopicCluster => "clusters",
            Self::Summarize => "lengths",
            Self::Embed => "dimensions",
            Self::ConflictJudge => "verdicts",
            Self::QualityValidator => "checks",
        }
    }

    /// Processes one document.
    pub fn process(self, document: &Document, context: &Context) -> anyhow::Result<Outcome> {
        let text = document.text();
        let options = &context.options;
        let model = &context.engine.model;
        let outcome = |record: Value, tally: String| Ok(Outcome { record, tally });
        match self {
            Self::Transfer => transfer(document, context),
            Self::LanguageDetect => {
                let min = options.number("min_confidence", 0.05);
                let (code, confidence) = text::language(&text).filter(|l| l.1 >= min).unwrap_or(("und", 0.0));
                let confidence = (confidence * 1000.0).round() / 1000.0;
                outcome(json!({ "language": code, "confidence": confidence }), code.to_owned())
            }
            Self::EntityExtract => {
                let mut entities = text::entities(&text);
                entities.truncate(usize_option(options, "max_entities", 10));
                let tally = entities.len().to_string();
                outcome(json!({ "entities": entities, "model": model }), tally)
            }
            Self::TagSuggest => {
                let tags = text::tags(&text, usize_option(options, "max_tags", 5));
                let tally = tags.len().to_string();
                outcome(json!({ "tags": tags, "model": model }), tally)
            }
            Self::TopicCluster => {
                let cluster = text::tags(&document.body, 1).pop().unwrap_or_else(|| "unclustered".to_owned());
                outcome(json!({ "cluster": cluster, "model": model }), cluster)
            }
            Self::Summarize => {
                let summary = text::summary(&document.body, usize_option(options, "max_chars", 160));
                let tally = if summary.ends_with('…') { "shortened" } else { "whole sentence" };
                outcome(json!({ "summary": summary, "model": model }), tally.to_owned())
            }
            Self::Embed => {
                let vector = text::embedding(&text, usize_option(options, "dimensions", 32));
                let tally = vector.len().to_string();
                outcome(json!({ "vector": vector, "model": model }), tally)
            }
            Self::ConflictJudge => judge(&text, options.number("threshold", 0.3), model),
            Self::QualityValidator => validate(document, usize_option(options, "min_words", 20), model),
        }
    }
}

fn usize_option(options: &Options, name: &str, default: i64) -> usize {
    usize::try_from(options.integer(name, default)).unwrap_or(0)
}

/// Copies the staged document into `<data>/archive/`, and reads it back when `verify` is on.
fn transfer(document: &Document, context: &Context) -> anyhow::Result<Outcome> {
    let target = context.data.join("archive").join(format!("{}.json", document.id));
    let bytes = serde_json::to_vec_pretty(document).context("encode the document")?;
    write_atomically(&target, &bytes)?;
    if context.options.boolean("verify", true) {
        let copy = fs::read(&target).with_context(|| format!("read back {}", target.display()))?;
        anyhow::ensure!(copy == bytes, "the archived copy {} differs from the staged document", target.display());
    }
    let record = json!({ "archived_to": format!("archive/{}.json", document.id), "bytes": bytes.len() });
    Ok(Outcome { record, tally: "archived".to_owned() })
}

/// Compares every tag with every entity by character trigrams (the pair product that makes this queue too
/// costly to count on a real collection). A tag that is nearly an entity's name is a conflict: the same thing
/// is described once as a subject and once as a name.
fn judge(text: &str, threshold: f64, model: &Option<String>) -> anyhow::Result<Outcome> {
    let tags = text::tags(text, 5);
    let entities = text::entities(text);
    let mut closest: Option<(f64, &str, &str)> = None;
    for tag in &tags {
        let tag_grams = text::trigrams(tag);
        for entity in &entities {
            let score = text::similarity(&tag_grams, &text::trigrams(entity));
            if closest.is_none_or(|(best, _, _)| score > best) {
                closest = Some((score, tag, entity));
            }
        }
    }
    let (score, verdict, pair) = match closest {
        None => (0.0, "nothing to compare", None),
        Some((score, tag, entity)) if score >= threshold => (score, "conflict", Some([tag, entity])),
        Some((score, _, _)) => (score, "consistent", None),
    };
    let score = (score * 1000.0).round() / 1000.0;
    let record =
        json!({ "verdict": verdict, "score": score, "pair": pair, "tags": tags, "entities": entities, "model": model });
    Ok(Outcome { record, tally: verdict.to_owned() })
}

/// Simple quality rules: a title, enough words, a detectable language, a finished last sentence.
fn validate(document: &Document, min_words: usize, model: &Option<String>) -> anyhow::Result<Outcome> {
    let mut issues = Vec::new();
    if document.title.trim().is_empty() {
        issues.push("the title is empty".to_owned());
    }
    let words = text::words(&document.body).len();
    if words < min_words {
        issues.push(format!("the body has {words} words, fewer than {min_words}"));
    }
    if text::language(&document.body).is_none() {
        issues.push("the language cannot be detected".to_owned());
    }
    if !document.body.trim_end().ends_with(['.', '!', '?']) {
        issues.push("the last sentence is unfinished".to_owned());
    }
    let tally = if issues.is_empty() { "passed" } else { "flagged" };
    Ok(Outcome {
        record: json!({ "passed": issues.is_empty(), "issues": issues, "model": model }),
        tally: tally.to_owned(),
    })
}
