//! The demo documents: small letters in five languages, each generated from its number, the same text on every
//! machine every time. Document `n` is what arrives in staging `n`-th (`staging.rs` says when); the archive keeps
//! a copy of each one transferred (`archive/doc-NNNN.json`).
//!
//! Two of them are **poison documents** for the summaries: [`EMPTY_LETTER`] (`doc-0024`), whose scan gave no OCR
//! text (an empty body), and [`LONG_LETTER`] (`doc-0027`), a letter of [`LONG_LETTER_PAGES`] pages, longer than
//! the summaries' model can read at once. `summarize` fails them on every run (`ocr_empty`, `ctx_overflow`; see
//! `task.rs`), so they stay pending for it; every other worker handles them like any letter. They arrive after
//! the twenty documents there at first (80 and 140 seconds into the demo), so a run over those twenty has none.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The environment variable naming the data folder.
pub const DATA_ENV: &str = "SCRINALIA_DEMO_DATA";

/// The data folder: `$SCRINALIA_DEMO_DATA`, or `data/demo` relative to the working directory.
pub fn data_dir() -> PathBuf {
    std::env::var_os(DATA_ENV).filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from("data/demo"), PathBuf::from)
}

/// The number of the letter whose OCR text is empty: the summaries fail it with `ocr_empty`.
pub const EMPTY_LETTER: usize = 24;
/// The number of the letter too long for the summaries' model: they fail it with `ctx_overflow`.
pub const LONG_LETTER: usize = 27;
/// How many pages the long letter has (four sentences a page).
pub const LONG_LETTER_PAGES: usize = 150;

/// The id of document `n` (1-based): `doc-0007`.
pub fn id(n: usize) -> String {
    format!("doc-{n:04}")
}

/// One document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// `doc-0001`, `doc-0002`, …
    pub id: String,
    /// A short title.
    pub title: String,
    /// A few sentences.
    pub body: String,
    /// When it arrived in staging, in seconds since the Unix epoch.
    #[serde(default)]
    pub arrived_at: u64,
}

impl Document {
    /// Title and body, as one text to analyse.
    pub fn text(&self) -> String {
        format!("{}. {}", self.title, self.body)
    }
}

const PEOPLE: [&str; 8] = [
    "Maria Ortega",
    "Johann Keller",
    "Ada Whitmore",
    "Luc Fontaine",
    "Giulia Ferri",
    "Tomas Lindqvist",
    "Helena Sousa",
    "Pieter Vos",
];
const PLACES: [&str; 7] = ["Lisbon", "Bergen", "Trieste", "Lyon", "Porto Novo", "Antwerp", "Valletta"];
const ORGS: [&str; 6] = [
    "Harbour Commission",
    "Royal Society",
    "Northern Railway Company",
    "City Council",
    "Abbey Chapter",
    "Merchant Guild",
];
const TOPICS: [&str; 8] =
    ["harbour", "railway", "vineyard", "printing press", "monastery", "observatory", "lighthouse", "granary"];
const THINGS: [&str; 6] = ["timber", "copper", "lanterns", "ledgers", "bricks", "maps"];

/// Sentence templates per language; `{p}` person, `{l}` place, `{o}` organisation, `{t}` topic, `{x}` thing,
/// `{y}` year.
const TEMPLATES: [(&str, [&str; 4]); 5] = [
    (
        "en",
        [
            "In {y} {p} wrote to the {o} about the {t} near {l}.",
            "The letter describes how the {t} of {l} was repaired with {x} and why the work took so long.",
            "{p} kept a careful list of the {x} that arrived at the {t} during the winter.",
            "It is one of the few documents in the collection that mention the {t} and its {x}.",
        ],
    ),
    (
        "fr",
        [
            "En {y}, {p} a écrit à la {o} au sujet du {t} près de {l}.",
            "La lettre décrit comment le {t} de {l} a été réparé avec des {x} et pourquoi le travail a duré si longtemps.",
            "{p} a tenu une liste des {x} qui sont arrivés au {t} pendant l'hiver.",
            "C'est un des rares documents de la collection qui parlent du {t} et de ses {x}.",
        ],
    ),
    (
        "de",
        [
            "Im Jahr {y} schrieb {p} an die {o} über den {t} bei {l}.",
            "Der Brief beschreibt, wie der {t} von {l} mit {x} repariert wurde und warum die Arbeit so lange dauerte.",
            "{p} führte eine Liste der {x}, die im Winter an dem {t} ankamen.",
            "Es ist eines der wenigen Dokumente der Sammlung, die den {t} und die {x} erwähnen.",
        ],
    ),
    (
        "es",
        [
            "En {y}, {p} escribió a la {o} sobre el {t} cerca de {l}.",
            "La carta describe cómo el {t} de {l} fue reparado con {x} y por qué el trabajo duró tanto.",
            "{p} llevó una lista de los {x} que llegaron al {t} durante el invierno.",
            "Es uno de los pocos documentos de la colección que mencionan el {t} y sus {x}.",
        ],
    ),
    (
        "it",
        [
            "Nel {y} {p} scrisse alla {o} del {t} vicino a {l}.",
            "La lettera descrive come il {t} di {l} è stato riparato con {x} e perché il lavoro è durato tanto.",
            "{p} teneva una lista dei {x} che sono arrivati al {t} durante l'inverno.",
            "È uno dei pochi documenti della collezione che parlano del {t} e dei suoi {x}.",
        ],
    ),
];

/// Document number `n` (1-based): the same text on every machine, every time.
pub fn generate(n: usize) -> Document {
    let mut seed = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED;
    let mut pick = |len: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % len as u64) as usize
    };
    // Three letters in five are in English; the rest cycle through the other languages.
    let language = if n % 5 < 3 { 0 } else { 1 + (n / 5) % 4 };
    let (_, sentences) = TEMPLATES[language];
    let (p, l, o) = (PEOPLE[pick(PEOPLE.len())], PLACES[pick(PLACES.len())], ORGS[pick(ORGS.len())]);
    let (t, x, y) = (TOPICS[pick(TOPICS.len())], THINGS[pick(THINGS.len())], 1820 + pick(90));
    let fill = |s: &str, x: &str, y: usize| {
        s.replace("{p}", p)
            .replace("{l}", l)
            .replace("{o}", o)
            .replace("{t}", t)
            .replace("{x}", x)
            .replace("{y}", &y.to_string())
    };
    // Every thirteenth letter is a fragment of one sentence, which the quality validator flags.
    let count = if n.is_multiple_of(13) { 1 } else { 2 + pick(3) };
    let mut body: Vec<String> = sentences.iter().take(count).map(|s| fill(s, x, y)).collect();
    if n == EMPTY_LETTER {
        // The scan gave no text: only the catalogue's title is known.
        body.clear();
    } else if n == LONG_LETTER {
        // Page after page about the same place, each page about another delivery in another year.
        body.clear();
        for _ in 0..LONG_LETTER_PAGES {
            let (x, y) = (THINGS[pick(THINGS.len())], 1820 + pick(90));
            body.extend(sentences.iter().map(|s| fill(s, x, y)));
        }
    }
    let mut title: String = t.to_owned();
    if let Some(first) = title.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    Document { id: id(n), title: format!("{title} of {l}, {y}"), body: body.join(" "), arrived_at: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_varied() {
        assert_eq!(generate(7), generate(7));
        assert_ne!(generate(7).body, generate(8).body);
        assert_eq!(generate(13).body.matches('.').count(), 1);
        assert_eq!(generate(60).id, "doc-0060");
    }

    #[test]
    fn the_poison_letters_are_one_without_text_and_one_of_many_pages() {
        let empty = generate(EMPTY_LETTER);
        assert_eq!((empty.id.as_str(), empty.body.as_str()), ("doc-0024", ""));
        assert!(!empty.title.is_empty(), "the catalogue still knows its title");
        let long = generate(LONG_LETTER);
        assert_eq!(long.id, "doc-0027");
        assert_eq!(long.body.matches(['.', '!', '?']).count(), 4 * LONG_LETTER_PAGES);
        assert!(crate::text::words(&long.body).len() > 5_000, "{} words", crate::text::words(&long.body).len());
        let neighbours = [generate(LONG_LETTER - 1), generate(LONG_LETTER + 1)];
        assert!(neighbours.iter().all(|d| d.body.len() < 1_000), "the others are short letters");
    }
}
