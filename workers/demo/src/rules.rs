//! The archive's cleaning rules, as the demo keeps them: `$SCRINALIA_DEMO_DATA/rules.json`. The quality
//! validator does not choose its engine; it takes the engine, preset and model of the active `LLM_CHECK` rule
//! (the newest, by id, if several are active), as the archive's validator does from its cleaning-rules table.
//! A test changes the file to change the validator's engine, or to leave it without one.
//!
//! ```json
//! {"rules": [
//!   {"id": 1, "kind": "LLM_CHECK", "active": false, "engine": "ollama", "preset": "balanced", "model": "qwen2.5:7b"},
//!   {"id": 2, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "thorough", "model": "qwen2.5:14b"}
//! ]}
//! ```
//!
//! `id` and `kind` are required; a rule is active only with `"active": true`; `model` may be left out when the
//! preset is one the code declares; `endpoint` is optional; other keys are ignored. A missing file holds no rule.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::stamps::write_new;

/// The file's name in the data folder.
pub const FILE: &str = "rules.json";

/// The kind of rule the quality validator takes its engine from.
pub const LLM_CHECK: &str = "LLM_CHECK";

/// What `describe` says the validator's engine comes from.
pub const SOURCE: &str = "the active LLM_CHECK cleaning rule";

/// One cleaning rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Its number.
    pub id: u64,
    /// `LLM_CHECK`, or another kind the demo does not use.
    pub kind: String,
    /// Whether it applies.
    #[serde(default)]
    pub active: bool,
    /// The engine it names.
    #[serde(default)]
    pub engine: Option<String>,
    /// The preset it names.
    #[serde(default)]
    pub preset: Option<String>,
    /// The model it names.
    #[serde(default)]
    pub model: Option<String>,
    /// Where its engine is called.
    #[serde(default)]
    pub endpoint: Option<String>,
}

impl Rule {
    /// How the rule is named to people (`LLM_CHECK rule 3`).
    pub fn reference(&self) -> String {
        format!("{} rule {}", self.kind, self.id)
    }
}

/// The rules file of a data folder.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RuleBook {
    /// Every rule, active or not.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// The path of the rules file under `data`.
pub fn path(data: &Path) -> PathBuf {
    data.join(FILE)
}

impl RuleBook {
    /// Reads the rules under `data`; none when the file does not exist.
    pub fn load(data: &Path) -> anyhow::Result<Self> {
        let path = path(data);
        match fs::read_to_string(&path) {
            Ok(text) => {
                serde_json::from_str(&text).with_context(|| format!("parse the cleaning rules {}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("read the cleaning rules {}", path.display())),
        }
    }

    /// The newest active LLM_CHECK rule.
    pub fn active_check(&self) -> Option<&Rule> {
        self.rules.iter().filter(|r| r.active && r.kind == LLM_CHECK).max_by_key(|r| r.id)
    }
}

/// The sentence for a data folder whose rules leave the validator without an engine.
pub fn no_rule_sentence(data: &Path) -> String {
    format!(
        "There is no active {LLM_CHECK} cleaning rule in {}, so the quality validator has no engine to use.",
        path(data).display()
    )
}

/// The rule the validator takes its engine from, or the sentence saying why there is none to take.
pub fn usable(data: &Path) -> anyhow::Result<Result<Rule, String>> {
    let book = RuleBook::load(data)?;
    Ok(match book.active_check() {
        None => Err(no_rule_sentence(data)),
        Some(rule) if rule.engine.is_none() => Err(format!(
            "The active {} in {} names no engine, so the quality validator has no engine to use.",
            rule.reference(),
            path(data).display()
        )),
        Some(rule) => Ok(rule.clone()),
    })
}

/// Writes the demo's first rules (one active LLM_CHECK rule and an older inactive one) unless the file exists:
/// a test that wrote its own rules before the first use keeps them.
pub fn seed(data: &Path) -> anyhow::Result<()> {
    let rules = json!({ "rules": [
        {"id": 1, "kind": LLM_CHECK, "active": false, "engine": "ollama", "preset": "balanced", "model": "qwen2.5:7b"},
        {"id": 2, "kind": LLM_CHECK, "active": true, "engine": "ollama", "preset": "thorough", "model": "qwen2.5:14b"},
    ]});
    let text = serde_json::to_string_pretty(&rules).context("encode the cleaning rules")?;
    write_new(&path(data), text.as_bytes()).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(data: &Path, text: &str) {
        fs::write(path(data), text).expect("write the rules");
    }

    #[test]
    fn the_newest_active_llm_check_rule_is_taken() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        seed(dir.path()).expect("seed");
        let rule = usable(dir.path()).expect("readable").expect("a rule");
        assert_eq!((rule.reference(), rule.model.as_deref()), ("LLM_CHECK rule 2".to_owned(), Some("qwen2.5:14b")));
        write(
            dir.path(),
            r#"{"rules": [{"id": 9, "kind": "LLM_CHECK", "active": true, "engine": "ollama", "preset": "fast"},
                          {"id": 4, "kind": "LLM_CHECK", "active": true, "engine": "ollama"},
                          {"id": 12, "kind": "MIN_WORDS", "active": true, "min_words": 3}]}"#,
        );
        assert_eq!(usable(dir.path()).expect("readable").expect("a rule").id, 9);
        seed(dir.path()).expect("seeding again keeps the file");
        assert_eq!(usable(dir.path()).expect("readable").expect("a rule").id, 9);
    }

    #[test]
    fn no_active_rule_and_no_file_say_why_in_a_sentence() {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let why = usable(dir.path()).expect("a missing file holds no rule").expect_err("no rule");
        assert!(why.starts_with("There is no active LLM_CHECK cleaning rule in ") && why.ends_with("to use."), "{why}");
        write(dir.path(), r#"{"rules": [{"id": 3, "kind": "LLM_CHECK", "active": false, "engine": "ollama"}]}"#);
        assert!(usable(dir.path()).expect("readable").is_err());
        write(dir.path(), r#"{"rules": [{"id": 3, "kind": "LLM_CHECK", "active": true}]}"#);
        assert!(usable(dir.path()).expect("readable").expect_err("no engine").contains("names no engine"));
        write(dir.path(), "{not json");
        assert!(usable(dir.path()).is_err(), "a broken file is an error, not an empty rule book");
    }
}
