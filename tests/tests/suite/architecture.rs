//! The layering the compiler cannot see, read off the sources: the database layer's macros yield SQL text or
//! dispatch on the dialect and never compose a workflow; the database layer depends on no domain crate; the SQL
//! texts live in the database layer only; and each process reaches the database through the store made for
//! its role (the API never names the daemon's store, the daemon never the API's, and neither names the database
//! layer or sqlx).

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = fs::read_dir(dir).expect("a source folder").flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path).expect("a source file");
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), &mut out);
    assert!(!out.is_empty(), "no sources under {dir}");
    out
}

/// The text of `source` without its comments (line comments, doc comments included), so that a comment that
/// names something is not taken for code that does.
fn code_of(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string literal (a URL) is kept: only lines whose `//` starts the comment are cut.
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each `macro_rules!` of `source`: its name and its body (the braces matched).
fn macros(source: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("macro_rules!") {
        let after = &rest[at + "macro_rules!".len()..];
        let name: String = after.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let open = after.find('{').expect("a macro body");
        let mut depth = 0;
        let mut end = open;
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((name, after[open..=end].to_owned()));
        rest = &after[end..];
    }
    found
}

/// `code` with the contents of its string literals blanked, so that SQL text is not taken for Rust.
fn without_strings(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in code.chars() {
        match (in_string, c) {
            (true, _) if escaped => escaped = false,
            (true, '\\') => escaped = true,
            (true, '"') => {
                in_string = false;
                out.push(c);
            }
            (true, _) => {}
            (false, '"') => {
                in_string = true;
                out.push(c);
            }
            (false, _) => out.push(c),
        }
    }
    out
}

/// The names of the database layer's statement functions (its `pub async fn`s).
fn statement_functions(db: &[(PathBuf, String)]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, text) in db {
        for piece in text.split("pub async fn ").skip(1) {
            names.insert(piece.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    names
}

/// Whether `code` calls `name` (as a whole word followed by `(`).
fn calls(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + name.len()..];
        before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) && after.starts_with('(')
    })
}

#[test]
fn no_macro_of_the_database_layer_composes_a_workflow() {
    let db = sources("db/src");
    let statements = statement_functions(&db);
    assert!(statements.contains("insert") && statements.contains("finish"), "found {statements:?}");
    let mut found = 0;
    let mut offences = Vec::new();
    for (path, text) in &db {
        for (name, body) in macros(&code_of(text)) {
            found += 1;
            let body = without_strings(&body);
            let mut why = Vec::new();
            for word in [".await", "begin_write", "begin_read", "begin(", "commit(", "rollback("] {
                if body.contains(word) {
                    why.push(word.to_owned());
                }
            }
            why.extend(statements.iter().filter(|s| calls(&body, s)).map(|s| format!("calls {s}()")));
            if !why.is_empty() {
                offences.push(format!("{}: macro {name}! {}", path.display(), why.join(", ")));
            }
        }
    }
    assert!(found >= 10, "the layer's macros were not found ({found})");
    assert!(offences.is_empty(), "macros that compose a workflow:\n{}", offences.join("\n"));
}

#[test]
fn the_checks_above_catch_a_macro_that_composes_a_workflow() {
    let statements: BTreeSet<String> = ["insert".to_owned(), "release".to_owned()].into();
    let source = "macro_rules! follow_in_tx {\n ($tx:ident) => {{ insert(&mut *$tx).await?; release($tx); }};\n}\n";
    let (name, body) = macros(source).pop().expect("one macro");
    assert_eq!(name, "follow_in_tx");
    assert!(body.contains(".await"));
    assert!(statements.iter().all(|s| calls(&body, s)));
    let harmless = "macro_rules! run_columns { ($d:ident;) => { \"id, worker, released_at\" }; }";
    let (_, body) = macros(harmless).pop().expect("one macro");
    assert!(!body.contains(".await") && !statements.iter().any(|s| calls(&body, s)));
    assert_eq!(
        code_of("let a = 1; // insert(x).await\nlet url = \"http://x\";"),
        "let a = 1; \nlet url = \"http://x\";"
    );
    assert_eq!(without_strings(r#"f("select now()", "a\"b") + g()"#), r#"f("", "") + g()"#);
}

/// The `[dependencies]` of a crate's manifest, by name.
fn dependencies(krate: &str) -> BTreeSet<String> {
    let manifest = fs::read_to_string(root().join(krate).join("Cargo.toml")).expect("a manifest");
    let mut names = BTreeSet::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            names.insert(name.to_owned());
        }
    }
    names
}

#[test]
fn the_database_layer_depends_on_no_domain_crate() {
    let deps = dependencies("db");
    assert!(deps.contains("sqlx") && deps.contains("scrinalia-wire"), "{deps:?}");
    let domain: Vec<_> = deps.iter().filter(|d| d.starts_with("scrinalia-") && *d != "scrinalia-wire").collect();
    assert!(domain.is_empty(), "scrinalia-db depends on {domain:?}: it may depend on scrinalia-wire only");
    for (path, text) in sources("db/src") {
        assert!(!code_of(&text).contains("scrinalia_shared"), "{} names scrinalia_shared", path.display());
    }
}

#[test]
fn sql_texts_live_in_the_database_layer_only() {
    let statements = ["\"select ", "\"insert into ", "\"update ", "\"delete from "];
    for krate in ["shared/src", "api/src", "daemon/src", "cli/src"] {
        for (path, text) in sources(krate) {
            let code = code_of(&text);
            for statement in statements {
                assert!(!code.contains(statement), "{} holds SQL text ({statement}…)", path.display());
            }
        }
    }
}

#[test]
fn each_process_reaches_the_database_through_its_own_store_only() {
    let rules: [(&str, &[&str]); 3] = [
        ("api", &["DaemonStore", "scrinalia_db", "sqlx"]),
        ("daemon", &["ApiStore", "scrinalia_db", "sqlx"]),
        ("cli", &["ApiStore", "DaemonStore", "scrinalia_db", "sqlx"]),
    ];
    for (krate, forbidden) in rules {
        let deps = dependencies(krate);
        for name in ["scrinalia-db", "sqlx"] {
            assert!(!deps.contains(name), "{krate}/Cargo.toml depends on {name}");
        }
        for (path, text) in sources(&format!("{krate}/src")) {
            let code = code_of(&text);
            for word in forbidden {
                assert!(!code.contains(word), "{} names {word}", path.display());
            }
        }
    }
    // And each does hold its own.
    let holds = |krate: &str, store: &str| sources(krate).iter().any(|(_, text)| code_of(text).contains(store));
    assert!(holds("api/src", "ApiStore"), "the API holds an ApiStore");
    assert!(holds("daemon/src", "DaemonStore"), "the daemon holds a DaemonStore");
}
