//! Tags: short words a run request carries (`collection:1921-letters`) so that people find its runs again. They
//! are request metadata, not configuration: they resolve nothing and change nothing a worker sees. The rule of a
//! short word lives here so that the API, the catalogue's loader and the CLI give the same sentence.

use serde::{Deserialize, Deserializer, Serialize, de::Error as _};
use serde_json::Value;

use crate::ExplicitArgs;

/// The most tags one run (a request, a schedule, a pipeline) carries.
pub const MAX_TAGS: usize = 10;
/// The longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;

/// What a short word is, for the sentences that refuse one.
pub const SHORT_WORD: &str = "a tag is 1 to 64 lowercase letters a-z, digits and the characters : - _ . /, \
                              starting with a letter or a digit";

/// Why `tag` is not a short word, if it is not one.
fn problem(tag: &str) -> Option<&'static str> {
    let count = tag.chars().count();
    let first = tag.chars().next();
    if count == 0 {
        Some("it is empty")
    } else if count > MAX_TAG_CHARS {
        Some("it is longer than 64 characters")
    } else if tag.chars().any(char::is_whitespace) {
        Some("it has a space")
    } else if tag.chars().any(|c| c.is_uppercase()) {
        Some("it has a capital letter")
    } else if !tag
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, ':' | '-' | '_' | '.' | '/'))
    {
        Some("it has a character other than a-z, 0-9 and : - _ . /")
    } else if !first.is_some_and(|c| c.is_ascii_alphanumeric()) {
        Some("it does not start with a letter or a digit")
    } else {
        None
    }
}

/// Checks one tag: a sentence naming it and saying what a short word is when it is not one.
pub fn check_tag(tag: &str) -> Result<(), String> {
    match problem(tag) {
        None => Ok(()),
        Some(why) => {
            let shown: String = tag.chars().take(80).collect();
            let shown = if shown.len() < tag.len() { format!("{shown}…") } else { shown };
            Err(format!("Tag {shown:?} is not a short word ({why}): {SHORT_WORD}."))
        }
    }
}

/// Checks the tags of one request (at most [`MAX_TAGS`], each a short word) and keeps each once, in the order
/// given; otherwise the sentence that refuses them.
pub fn check_tags(tags: &[String]) -> Result<Vec<String>, String> {
    if tags.len() > MAX_TAGS {
        return Err(format!("A run takes at most {MAX_TAGS} tags, {} given.", tags.len()));
    }
    let mut kept: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        check_tag(tag)?;
        if !kept.contains(tag) {
            kept.push(tag.clone());
        }
    }
    Ok(kept)
}

/// The tags of a run that two sources give (a schedule's, then its pipeline's): each once, those of `first`
/// first, at most [`MAX_TAGS`] (the rest are left off).
pub fn merged(first: &[String], then: &[String]) -> Vec<String> {
    let mut tags: Vec<String> = Vec::with_capacity(MAX_TAGS);
    for tag in first.iter().chain(then) {
        if tags.len() == MAX_TAGS {
            break;
        }
        if !tags.contains(tag) {
            tags.push(tag.clone());
        }
    }
    tags
}

/// The body of `POST /api/workers/{name}/runs`: the run's explicit arguments, and its tags beside them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TriggerBody {
    /// The explicit arguments (engine, preset, options, retry, shards, priority, expiry).
    #[serde(flatten)]
    pub arguments: ExplicitArgs,
    /// Up to 10 short words the run carries (`collection:1921-letters`): request metadata, shown in the ledger
    /// and filtered on (`GET /api/runs?tag=`), kept by its retries, resumes and shards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// Read by hand: the arguments refuse fields they do not know, which `flatten` would not let them do.
impl<'de> Deserialize<'de> for TriggerBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut fields = serde_json::Map::<String, Value>::deserialize(deserializer)?;
        let tags = match fields.remove("tags") {
            None | Some(Value::Null) => Vec::new(),
            Some(tags) => serde_json::from_value(tags)
                .map_err(|e| D::Error::custom(format!("`tags` must be a list of strings ({e})")))?,
        };
        let arguments = ExplicitArgs::deserialize(Value::Object(fields)).map_err(D::Error::custom)?;
        Ok(Self { arguments, tags })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn short_words_pass_and_anything_else_is_named_with_why() {
        for good in ["collection:1921-letters", "a", "2026", "batch_7/part.2", &"x".repeat(64)] {
            assert_eq!(check_tag(good), Ok(()), "{good:?}");
        }
        let why = |tag: &str| check_tag(tag).expect_err(tag);
        assert!(why("a b").starts_with("Tag \"a b\" is not a short word (it has a space): a tag is 1 to 64"));
        assert!(why("").contains("(it is empty)"));
        assert!(why(&"x".repeat(65)).contains("(it is longer than 64 characters)"));
        assert!(why("Letters").contains("(it has a capital letter)"));
        assert!(why("a,b").contains("(it has a character other than"));
        assert!(why("-a").contains("(it does not start with a letter or a digit)"));
        assert!(why("é").contains("(it has a character other than"));
    }

    #[test]
    fn a_request_takes_ten_tags_each_kept_once() {
        let tags = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
        assert_eq!(check_tags(&tags(10)).expect("ten"), tags(10));
        assert_eq!(check_tags(&tags(12)).expect_err("twelve"), "A run takes at most 10 tags, 12 given.");
        let twice = vec!["b".to_owned(), "a".to_owned(), "b".to_owned()];
        assert_eq!(check_tags(&twice).expect("repeated"), vec!["b".to_owned(), "a".to_owned()]);
        assert_eq!(merged(&tags(8), &[tags(2), vec!["z".into(), "y".into(), "w".into()]].concat()).len(), 10);
        assert_eq!(merged(&["a".into()], &["a".into(), "b".into()]), vec!["a".to_owned(), "b".to_owned()]);
    }

    #[test]
    fn the_body_takes_tags_beside_the_arguments_and_refuses_strangers() {
        let body: TriggerBody = serde_json::from_value(json!({"preset": "fast", "tags": ["a", "b"]})).expect("a body");
        assert_eq!(body.arguments.preset.as_deref(), Some("fast"));
        assert_eq!(body.tags, vec!["a".to_owned(), "b".to_owned()]);
        let plain: TriggerBody = serde_json::from_value(json!({"options": {"n": 1}})).expect("no tags");
        assert!(plain.tags.is_empty());
        assert!(serde_json::from_value::<TriggerBody>(json!({"tag": ["a"]})).is_err(), "an unknown field");
        assert!(serde_json::from_value::<TriggerBody>(json!({"tags": "a"})).is_err(), "not a list");
        let back = serde_json::to_value(&body).expect("json");
        assert_eq!(back, json!({"preset": "fast", "tags": ["a", "b"]}));
    }
}
