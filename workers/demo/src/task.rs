//! The nine archive workers as tasks over one document each: their names, their stamps, which earlier
//! workers' stamps each one reads (its inputs), and what it records. The loop that feeds them documents is in
//! `archive.rs`; their declared options and engines are in `registry.rs`.
//!
//! A task fails a document it cannot handle with a [`Failure`]: a class and a sentence, which the run reports as
//! a failed item. The summaries fail a letter whose OCR text is empty (`ocr_empty`) and one longer than their
//! model's context (`ctx_overflow`); the corpus's two poison documents (`corpus.rs`) are such letters, so they
//! fail on every run.

use std::{fmt, fs, path::PathBuf};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::{config::EngineConfig, corpus::Document, options::Options, pipeline::Item, stamps::write_atomically, text};

/// One of the nine archive workers, in pipeline order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Task {
    /// Copies staged documents into the archive folder.
    Transfer,
    /// Detects each document's language by stopword counts.
    LanguageDetect,
    /// Finds capitalised word sequences.
    EntityExtract,
    /// Suggests the most frequent words that are not part of a name as tags.
    TagSuggest,
    /// Groups documents by their leading tag.
    TopicCluster,
    /// Keeps the first sentence.
    Summarize,
    /// Computes a hashed bag-of-words vector.
    Embed,
    /// Compares the tags with the entities and judges whether they agree.
    ConflictJudge,
    /// Checks each document against simple quality rules.
    QualityValidator,
}

/// What a task found in one document.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Recorded in the worker's stamp for the document.
    pub record: Value,
    /// The bucket the document is counted in for the run's result (a language, a verdict, a cluster, …).
    pub tally: String,
}

/// Why a task could not handle a document: a short machine word (`ocr_empty`) and a sentence. The same document
/// fails the same way on every run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Matches `^[a-z][a-z0-9_]{0,31}$`, by which failures are counted.
    pub class: &'static str,
    /// What went wrong, as a sentence.
    pub sentence: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sentence)
    }
}

impl std::error::Error for Failure {}

/// How many words of a letter the summaries' model reads at once (its context, a word counted as a token): a
/// longer letter cannot be summarised whole, and the summaries fail it rather than summarise a part of it.
pub const CONTEXT_WORDS: usize = 4_096;

/// What a task needs besides the document.
#[derive(Debug, Clone)]
pub struct Context {
    /// The data folder.
    pub data: PathBuf,
    /// The worker's options.
    pub options: Options,
    /// The engine configuration of the run, recorded with results that a model would produce.
    pub config: EngineConfig,
    /// The time of the run (Unix seconds).
    pub now: u64,
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

    /// The workers whose stamps it reads: a document is pending for it once all of them have stamped it.
    /// Every worker but the transfer sees only archived documents.
    pub fn inputs(self) -> &'static [Self] {
        match self {
            Self::Transfer => &[],
            Self::LanguageDetect => &[Self::Transfer],
            Self::EntityExtract | Self::Summarize | Self::Embed | Self::QualityValidator => &[Self::LanguageDetect],
            Self::TagSuggest => &[Self::EntityExtract],
            Self::TopicCluster | Self::ConflictJudge => &[Self::EntityExtract, Self::TagSuggest],
        }
    }

    /// `describe`'s `capabilities`. Every archive worker goes through the same loop (`archive.rs`), which
    /// reports an item line per document, processes only its scope (`SCRINALIA_ITEMS_ONLY`), leaves the
    /// quarantined documents (`SCRINALIA_ITEMS_SKIP`) untouched, processes only the documents of its shard
    /// (`SCRINALIA_SHARD`), prints a checkpoint after each batch (given a run id, as the daemon always gives
    /// one), and yields at the end of its batch when asked (SIGUSR1).
    pub fn capabilities(self) -> Value {
        json!({ "items": true, "scope": true, "shards": true, "checkpoints": true, "yield": true })
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
    pub fn process(self, item: &Item, context: &Context) -> anyhow::Result<Outcome> {
        let document = &item.document;
        let text = document.text();
        let options = &context.options;
        let model = &context.config.model;
        let language = item.input(Self::LanguageDetect)["language"].clone();
        let outcome = |record: Value, tally: String| Ok(Outcome { record, tally });
        match self {
            Self::Transfer => transfer(document, context),
            Self::LanguageDetect => {
                let min = options.number("min_confidence");
                let (code, confidence) = text::language(&text).filter(|l| l.1 >= min).unwrap_or(("und", 0.0));
                let confidence = (confidence * 1000.0).round() / 1000.0;
                outcome(json!({ "language": code, "confidence": confidence }), code.to_owned())
            }
            Self::EntityExtract => {
                let mut entities = text::entities(&text);
                entities.truncate(options.count("max_entities"));
                let tally = entities.len().to_string();
                outcome(json!({ "entities": entities, "language": language, "model": model }), tally)
            }
            Self::TagSuggest => {
                // A word that is part of a name the entity extraction found is not a subject.
                let names: Vec<String> =
                    strings(item.input(Self::EntityExtract), "entities").iter().flat_map(|e| text::words(e)).collect();
                let mut tags = text::tags(&text, usize::MAX);
                tags.retain(|t| !names.contains(t));
                tags.truncate(options.count("max_tags"));
                let tally = tags.len().to_string();
                outcome(json!({ "tags": tags, "model": model }), tally)
            }
            Self::TopicCluster => {
                let tags = strings(item.input(Self::TagSuggest), "tags");
                let cluster = tags.first().cloned().unwrap_or_else(|| "unclustered".to_owned());
                let entities = strings(item.input(Self::EntityExtract), "entities");
                outcome(json!({ "cluster": cluster, "entities": entities, "model": model }), cluster)
            }
            Self::Summarize => {
                summarizable(document)?;
                let summary = text::summary(&document.body, options.count("max_chars"));
                let tally = if summary.ends_with('…') { "shortened" } else { "whole sentence" };
                outcome(json!({ "summary": summary, "language": language, "model": model }), tally.to_owned())
            }
            Self::Embed => {
                let vector = text::embedding(&text, options.count("dimensions"));
                let tally = vector.len().to_string();
                outcome(json!({ "vector": vector, "language": language, "model": model }), tally)
            }
            Self::ConflictJudge => judge(item, options.number("threshold"), model),
            Self::QualityValidator => validate(item, options.count("min_words"), &context.config),
        }
    }
}

/// Whether the summaries' model can read `document` whole: it has an OCR text, and one that fits its context.
fn summarizable(document: &Document) -> Result<(), Failure> {
    if document.body.trim().is_empty() {
        return Err(Failure {
            class: "ocr_empty",
            sentence: format!("The OCR text of {} is empty, so there is nothing to summarise.", document.id),
        });
    }
    let words = text::words(&document.body).len();
    if words > CONTEXT_WORDS {
        return Err(Failure {
            class: "ctx_overflow",
            sentence: format!(
                "{} has {words} words, more than the {CONTEXT_WORDS} the model's context holds, so it cannot be \
                 summarised whole.",
                document.id
            ),
        });
    }
    Ok(())
}

/// The strings of the array `key` of a stamp's record.
fn strings(record: &Value, key: &str) -> Vec<String> {
    record[key].as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default()
}

/// Copies the staged document into `<data>/archive/`, and reads it back when `verify` is on.
fn transfer(document: &Document, context: &Context) -> anyhow::Result<Outcome> {
    let target = context.data.join("archive").join(format!("{}.json", document.id));
    let bytes = serde_json::to_vec_pretty(document).context("encode the document")?;
    write_atomically(&target, &bytes)?;
    if context.options.boolean("verify") {
        let copy = fs::read(&target).with_context(|| format!("read back {}", target.display()))?;
        anyhow::ensure!(copy == bytes, "the archived copy {} differs from the staged document", target.display());
    }
    let record = json!({
        "archived_to": format!("archive/{}.json", document.id),
        "bytes": bytes.len(),
        "arrived_at": document.arrived_at,
        "waited_seconds": context.now.saturating_sub(document.arrived_at),
    });
    Ok(Outcome { record, tally: "archived".to_owned() })
}

/// Compares every tag with every entity by character trigrams (the pair product that makes this queue too
/// costly to count on a real collection), both as the earlier workers recorded them. A tag that is nearly an
/// entity's name is a conflict: the same thing is described once as a subject and once as a name.
fn judge(item: &Item, threshold: f64, model: &Option<String>) -> anyhow::Result<Outcome> {
    let tags = strings(item.input(Task::TagSuggest), "tags");
    let entities = strings(item.input(Task::EntityExtract), "entities");
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

/// Simple quality rules: a title, enough words, a language the detection determined, a finished last
/// sentence; judged with the model of the active LLM_CHECK rule, which the record names.
fn validate(item: &Item, min_words: usize, config: &EngineConfig) -> anyhow::Result<Outcome> {
    let document = &item.document;
    let mut issues = Vec::new();
    if document.title.trim().is_empty() {
        issues.push("the title is empty".to_owned());
    }
    let words = text::words(&document.body).len();
    if words < min_words {
        issues.push(format!("the body has {words} words, fewer than {min_words}"));
    }
    if item.input(Task::LanguageDetect)["language"].as_str().is_none_or(|l| l == "und") {
        issues.push("the language was not determined".to_owned());
    }
    if !document.body.trim_end().ends_with(['.', '!', '?']) {
        issues.push("the last sentence is unfinished".to_owned());
    }
    let tally = if issues.is_empty() { "passed" } else { "flagged" };
    let rule = config.source.as_ref().and_then(|s| s.reference.clone());
    Ok(Outcome {
        record: json!({ "passed": issues.is_empty(), "issues": issues, "model": config.model, "rule": rule }),
        tally: tally.to_owned(),
    })
}
