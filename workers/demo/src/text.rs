//! The tiny, real text analysis the demo workers do: language by stopword counts, entities as capitalised word
//! sequences, tags as frequent non-stopwords, a first-sentence summary, a hashed bag-of-words vector, and
//! character trigrams for comparing tags with entities.

use std::collections::{BTreeMap, BTreeSet};

/// Stopwords per language code, separated by spaces: function words, plus the words every demo letter uses,
/// which say nothing about its subject.
const STOPWORDS: [(&str, &str); 5] = [
    (
        "en",
        "the of and to in a is it that was with about near how why so at its one few during took long \
         kept wrote work this for on by letter describes repaired careful list arrived documents \
         collection mention winter",
    ),
    (
        "fr",
        "le la les de des du et à au en un une qui a été avec pour est c'est si ses près sujet comment \
         pourquoi pendant sont rares lettre décrit réparé travail duré longtemps tenu liste arrivés \
         l'hiver documents collection parlent écrit",
    ),
    (
        "de",
        "der die das den dem und im an über bei von mit wie wurde warum so es ist eines eine ein wenigen \
         jahr schrieb lange dauerte brief beschreibt repariert arbeit führte liste winter ankamen \
         dokumente sammlung erwähnen",
    ),
    (
        "es",
        "el la los las de del en y a al sobre cerca cómo fue con por qué es uno pocos que sus una \
         durante tanto llevó escribió carta describe reparado trabajo duró lista llegaron invierno \
         documentos colección mencionan",
    ),
    (
        "it",
        "il lo la le di del dei della alla al e è a nel vicino come stato con perché uno pochi che suoi \
         una sono durante tanto scrisse lettera descrive riparato lavoro durato teneva lista arrivati \
         l'inverno documenti collezione parlano",
    ),
];

/// The words of `text`, lowercased, without surrounding punctuation.
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

fn is_stopword(word: &str) -> bool {
    STOPWORDS.iter().any(|(_, list)| list.split_whitespace().any(|w| w == word))
}

/// The most likely language of `text` and the share of its words that are that language's stopwords; `None`
/// when no stopword of any language occurs.
pub fn language(text: &str) -> Option<(&'static str, f64)> {
    let words = words(text);
    let mut best: Option<(&'static str, usize)> = None;
    for (code, list) in STOPWORDS {
        let hits = words.iter().filter(|w| list.split_whitespace().any(|s| s == w.as_str())).count();
        if hits > 0 && best.is_none_or(|(_, most)| hits > most) {
            best = Some((code, hits));
        }
    }
    best.map(|(code, hits)| (code, hits as f64 / words.len().max(1) as f64))
}

/// Sequences of capitalised words (`Maria Ortega`, `Harbour Commission`), without leading stopwords (`The`,
/// `Der`). A single capitalised word that opens a sentence is not taken: it is capitalised because of where it
/// stands.
pub fn entities(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut opens_sentence = false;
    let mut sentence_start = true;
    let mut flush = |current: &mut Vec<&str>, opens: bool| {
        let lone_opener = opens && current.len() == 1;
        let skip = current.iter().take_while(|w| is_stopword(&w.to_lowercase())).count();
        if !lone_opener && skip < current.len() {
            let name = current[skip..].join(" ");
            if !found.contains(&name) {
                found.push(name);
            }
        }
        current.clear();
    };
    for raw in text.split_whitespace() {
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric());
        if word.chars().next().is_some_and(char::is_uppercase) {
            if current.is_empty() {
                opens_sentence = sentence_start;
            }
            current.push(word);
        } else {
            flush(&mut current, opens_sentence);
        }
        if raw.ends_with(['.', ',', ';', ':', '!', '?']) {
            flush(&mut current, opens_sentence);
        }
        sentence_start = raw.ends_with(['.', '!', '?']);
    }
    flush(&mut current, opens_sentence);
    found
}

/// The `count` most frequent words written in lowercase (names are entities, not tags) that are not stopwords,
/// numbers or very short, most frequent first (ties alphabetically).
pub fn tags(text: &str, count: usize) -> Vec<String> {
    let mut frequency: BTreeMap<String, usize> = BTreeMap::new();
    let lowercase = text.split_whitespace().filter(|w| !w.chars().next().is_some_and(char::is_uppercase));
    for word in words(&lowercase.collect::<Vec<_>>().join(" ")) {
        if word.chars().count() >= 4 && !is_stopword(&word) && !word.chars().all(|c| c.is_ascii_digit()) {
            *frequency.entry(word).or_default() += 1;
        }
    }
    let mut ranked: Vec<(String, usize)> = frequency.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.into_iter().take(count).map(|(word, _)| word).collect()
}

/// The first sentence of `text`, cut at a word boundary to at most `max_chars` characters.
pub fn summary(text: &str, max_chars: usize) -> String {
    let first = text.split_inclusive(['.', '!', '?']).next().unwrap_or(text).trim();
    if first.chars().count() <= max_chars {
        return first.to_owned();
    }
    let mut cut = String::new();
    for word in first.split_whitespace() {
        if cut.chars().count() + word.chars().count() + 2 > max_chars {
            break;
        }
        if !cut.is_empty() {
            cut.push(' ');
        }
        cut.push_str(word);
    }
    cut.push('…');
    cut
}

/// A hashed bag-of-words vector of `dimensions` numbers (FNV-1a of each word), normalised to length one and
/// rounded to four decimals.
pub fn embedding(text: &str, dimensions: usize) -> Vec<f64> {
    let mut vector = vec![0.0_f64; dimensions.max(1)];
    for word in words(text) {
        let hash =
            word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let slot = (hash % vector.len() as u64) as usize;
        vector[slot] += if hash >> 63 == 0 { 1.0 } else { -1.0 };
    }
    let norm = vector.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v = (*v / norm * 10_000.0).round() / 10_000.0);
    }
    vector
}

/// The character trigrams of `word`, lowercased and padded with spaces.
pub fn trigrams(word: &str) -> BTreeSet<String> {
    let padded: Vec<char> = format!("  {} ", word.to_lowercase()).chars().collect();
    padded.windows(3).map(|w| w.iter().collect()).collect()
}

/// The Jaccard similarity of two trigram sets.
pub fn similarity(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 { 0.0 } else { a.intersection(b).count() as f64 / union as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_languages() {
        assert_eq!(language("The letter was about the harbour and the ships.").map(|l| l.0), Some("en"));
        assert_eq!(language("La lettre décrit comment le port a été réparé.").map(|l| l.0), Some("fr"));
        assert_eq!(language("Der Brief beschreibt, wie der Hafen repariert wurde.").map(|l| l.0), Some("de"));
        assert_eq!(language("xyz qwv"), None);
    }

    #[test]
    fn finds_capitalised_sequences_but_not_sentence_openers() {
        let found = entities("In 1843 Maria Ortega wrote to The Harbour Commission about Lisbon. The end. Der Hafen.");
        assert_eq!(found, vec!["Maria Ortega", "Harbour Commission", "Lisbon", "Hafen"]);
    }

    #[test]
    fn tags_summary_and_embedding() {
        let text =
            "The harbour was repaired. The harbour had timber, and timber is heavy; harbour work. Lisbon Lisbon.";
        assert_eq!(tags(text, 2), vec!["harbour", "timber"]);
        assert_eq!(summary(text, 200), "The harbour was repaired.");
        assert_eq!(summary("One two three four five six.", 12), "One two…");
        let v = embedding(text, 16);
        assert_eq!(v.len(), 16);
        let norm: f64 = v.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-3);
        assert!(similarity(&trigrams("harbour"), &trigrams("Harbour Commission")) > 0.3);
    }
}
