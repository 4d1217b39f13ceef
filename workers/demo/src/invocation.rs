//! The command line of one worker execution: `<worker> <verb> [--flag value]...`, parsed by hand and checked
//! against the options the worker declares, so a typo fails loudly (exit 2) instead of being ignored.

use std::{collections::BTreeMap, fmt};

/// A mistake in the command line; the program prints it and exits with status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Builds a [`UsageError`] from a sentence.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// What the daemon asks the worker to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Print the resolved engine, preset, model and endpoint.
    Describe,
    /// Print how much work is pending.
    CountPending,
    /// Do the work.
    Run,
}

impl Verb {
    fn parse(word: &str) -> Option<Self> {
        match word {
            "describe" => Some(Self::Describe),
            "count-pending" => Some(Self::CountPending),
            "run" => Some(Self::Run),
            _ => None,
        }
    }
}

/// The type of an option's value, which decides how its text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// Any text, kept verbatim.
    Text,
}

/// One option a worker accepts.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The option's name (`--name value`).
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
}

/// Shorthand for declaring an option.
pub const fn opt(name: &'static str, kind: Kind) -> OptionSpec {
    OptionSpec { name, kind }
}

/// A parsed option value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// From [`Kind::Integer`].
    Integer(i64),
    /// From [`Kind::Number`].
    Number(f64),
    /// From [`Kind::Boolean`].
    Boolean(bool),
    /// From [`Kind::Text`].
    Text(String),
}

/// The option values given on the command line; a missing one takes the worker's own default.
#[derive(Debug, Clone, Default)]
pub struct Options(BTreeMap<String, Value>);

impl Options {
    /// The whole number `name`, or `default`.
    pub fn integer(&self, name: &str, default: i64) -> i64 {
        match self.0.get(name) {
            Some(Value::Integer(v)) => *v,
            _ => default,
        }
    }

    /// The number `name`, or `default`.
    pub fn number(&self, name: &str, default: f64) -> f64 {
        match self.0.get(name) {
            Some(Value::Number(v)) => *v,
            Some(Value::Integer(v)) => *v as f64,
            _ => default,
        }
    }

    /// The boolean `name`, or `default`.
    pub fn boolean(&self, name: &str, default: bool) -> bool {
        match self.0.get(name) {
            Some(Value::Boolean(v)) => *v,
            _ => default,
        }
    }

    /// The text `name`, or `default`.
    pub fn text<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        match self.0.get(name) {
            Some(Value::Text(v)) => v,
            _ => default,
        }
    }
}

/// The engine configuration the daemon resolved, from the flags or else the `SCRINALIA_*` environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineChoice {
    /// `--engine`.
    pub engine: Option<String>,
    /// `--preset`.
    pub preset: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--endpoint`.
    pub endpoint: Option<String>,
}

/// One parsed execution of a worker.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The worker's name, as given.
    pub worker: String,
    /// The verb.
    pub verb: Verb,
    /// `--run-id` (or `SCRINALIA_RUN_ID`).
    pub run_id: Option<String>,
    /// Engine, preset, model and endpoint.
    pub engine: EngineChoice,
    /// The worker's own options.
    pub options: Options,
}

/// The flags every worker accepts besides its options.
const COMMON_FLAGS: [&str; 5] = ["run-id", "engine", "preset", "model", "endpoint"];

/// The first line of every usage message.
pub const USAGE: &str = "usage: scrinalia-demo-worker <worker> describe|count-pending|run [--run-id ID] [--engine E] \
[--preset P] [--model M] [--endpoint URL] [--<option> <value>]...";

impl Invocation {
    /// Parses `args` (without the program name); `accepts` returns the options of a known worker, or `None`
    /// for a name that is not a worker.
    pub fn parse(
        args: &[String],
        accepts: impl Fn(&str) -> Option<&'static [OptionSpec]>,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let [worker, verb, flags @ ..] = args else {
            return Err(usage(format!("a worker name and a verb are needed.\n{USAGE}")));
        };
        let Some(specs) = accepts(worker) else {
            return Err(usage(format!("there is no worker called {worker:?}.\n{USAGE}")));
        };
        let Some(verb) = Verb::parse(verb) else {
            return Err(usage(format!(
                "{verb:?} is not a verb of the worker protocol; use describe, count-pending or run.\n{USAGE}"
            )));
        };
        let mut common: BTreeMap<&str, String> = BTreeMap::new();
        let mut options = BTreeMap::new();
        let mut rest = flags.iter();
        while let Some(flag) = rest.next() {
            let Some(body) = flag.strip_prefix("--") else {
                return Err(usage(format!("{flag:?} is not a flag; flags look like --name value.")));
            };
            let (name, text) = match body.split_once('=') {
                Some((name, text)) => (name, text.to_owned()),
                None => match rest.next() {
                    Some(text) => (body, text.clone()),
                    None => return Err(usage(format!("the flag --{body} needs a value."))),
                },
            };
            if let Some(&known) = COMMON_FLAGS.iter().find(|&&c| c == name) {
                common.insert(known, text);
            } else if let Some(spec) = specs.iter().find(|s| s.name == name) {
                options.insert(spec.name.to_owned(), read_value(worker, spec, &text)?);
            } else {
                let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
                return Err(usage(format!(
                    "worker {worker:?} has no option {name:?}; it accepts: {}.",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                )));
            }
        }
        let mut pick = |flag: &str, var: &str| common.remove(flag).or_else(|| env(var)).filter(|v| !v.is_empty());
        Ok(Self {
            worker: worker.clone(),
            verb,
            run_id: pick("run-id", "SCRINALIA_RUN_ID"),
            engine: EngineChoice {
                engine: pick("engine", "SCRINALIA_ENGINE"),
                preset: pick("preset", "SCRINALIA_PRESET"),
                model: pick("model", "SCRINALIA_MODEL"),
                endpoint: pick("endpoint", "SCRINALIA_ENDPOINT"),
            },
            options: Options(options),
        })
    }
}

fn read_value(worker: &str, spec: &OptionSpec, text: &str) -> anyhow::Result<Value> {
    let bad = |noun: &str| usage(format!("option {:?} of worker {worker:?} must be {noun}, not {text:?}.", spec.name));
    match spec.kind {
        Kind::Integer => text.trim().parse().map(Value::Integer).map_err(|_| bad("a whole number")),
        Kind::Number => text.trim().parse().map(Value::Number).map_err(|_| bad("a number")),
        Kind::Boolean => match text.trim() {
            "true" => Ok(Value::Boolean(true)),
            "false" => Ok(Value::Boolean(false)),
            _ => Err(bad("true or false")),
        },
        Kind::Text => Ok(Value::Text(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[OptionSpec] =
        &[opt("batch_size", Kind::Integer), opt("note", Kind::Text), opt("crash", Kind::Boolean)];

    fn parse(args: &[&str]) -> anyhow::Result<Invocation> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        Invocation::parse(&args, |w| (w == "w").then_some(SPECS), |_| None)
    }

    fn usage_message(result: anyhow::Result<Invocation>) -> String {
        match result {
            Ok(i) => panic!("expected a usage error, got {i:?}"),
            Err(e) => e.downcast::<UsageError>().map(|u| u.0).unwrap_or_else(|e| panic!("not a usage error: {e}")),
        }
    }

    #[test]
    fn reads_typed_options_and_common_flags() {
        let i = parse(&["w", "run", "--run-id", "r1", "--batch_size=7", "--note", "--x; $(y)", "--crash", "true"])
            .expect("parses");
        assert_eq!(i.verb, Verb::Run);
        assert_eq!(i.run_id.as_deref(), Some("r1"));
        assert_eq!(i.options.integer("batch_size", 1), 7);
        assert_eq!(i.options.text("note", ""), "--x; $(y)");
        assert!(i.options.boolean("crash", false));
        assert_eq!(i.options.integer("missing", 9), 9);
    }

    #[test]
    fn rejects_unknown_workers_verbs_options_and_bad_values() {
        assert!(usage_message(parse(&["nope", "run"])).contains("no worker called"));
        assert!(usage_message(parse(&["w", "walk"])).contains("not a verb"));
        assert!(usage_message(parse(&["w", "run", "--colour", "red"])).contains("has no option \"colour\""));
        assert!(usage_message(parse(&["w", "run", "--batch_size", "ten"])).contains("whole number"));
        assert!(usage_message(parse(&["w", "run", "--crash", "yes"])).contains("true or false"));
        assert!(usage_message(parse(&["w", "run", "--note"])).contains("needs a value"));
        assert!(usage_message(parse(&["w"])).contains("a worker name and a verb"));
    }
}
