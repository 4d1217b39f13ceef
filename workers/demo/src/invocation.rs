//! The command line of one worker execution: `<worker> <verb> [--flag=value]...` (the daemon's spelling; `--flag
//! value` is read too), parsed by hand and checked
//! against the options the worker declares (`options.rs`), so a typo or a value out of bounds fails loudly
//! (exit 2) instead of being ignored. What a run continues comes from the environment only:
//! `SCRINALIA_CHECKPOINT` (a resume: the JSON text of the earlier run's last checkpoint) or `SCRINALIA_RESTART_OF`
//! (a restart: the earlier run's id); the worker decides what they mean. So do the item lists of a run:
//! `SCRINALIA_ITEMS_ONLY` (its scope) and `SCRINALIA_ITEMS_SKIP` (the quarantined items), each the path of a file of
//! one id per line (`item_lists.rs` reads them), and `SCRINALIA_SHARD` (`i/N`: the run processes only the documents
//! of shard `i` of `N`), read here, so a malformed value fails (exit 2) before any work.

use std::{collections::BTreeMap, fmt};

pub use scrinalia_wire::shard::SHARD_ENV;
use scrinalia_wire::shard::Shard;

use crate::options::{OptionSpec, Options};

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
    /// Print the engine configuration and what the code declares.
    Describe,
    /// Print how much work is pending.
    CountPending,
    /// Print whether the worker has what it needs to run.
    Check,
    /// Do the work.
    Run,
}

impl Verb {
    fn parse(word: &str) -> Option<Self> {
        match word {
            "describe" => Some(Self::Describe),
            "count-pending" => Some(Self::CountPending),
            "check" => Some(Self::Check),
            "run" => Some(Self::Run),
            _ => None,
        }
    }

    /// The verb as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Describe => "describe",
            Self::CountPending => "count-pending",
            Self::Check => "check",
            Self::Run => "run",
        }
    }
}

/// The engine configuration given on the command line, or else in the `SCRINALIA_*` environment (each field is
/// `None` when neither gives it; the worker then uses its own default).
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
    /// `SCRINALIA_CHECKPOINT`: the JSON text of the checkpoint a resumed run starts from (unparsed).
    pub checkpoint: Option<String>,
    /// `SCRINALIA_RESTART_OF`: the id of the run a restarted run starts over.
    pub restart_of: Option<String>,
    /// `SCRINALIA_ITEMS_ONLY`: the path of the file of the item ids a scoped run processes (unread).
    pub items_only: Option<String>,
    /// `SCRINALIA_ITEMS_SKIP`: the path of the file of the quarantined item ids a run must skip (unread).
    pub items_skip: Option<String>,
    /// `SCRINALIA_SHARD`: the shard of a sharded run, which processes only its share of the documents.
    pub shard: Option<Shard>,
}

/// The environment variable holding the checkpoint a resumed run starts from.
pub const CHECKPOINT_ENV: &str = "SCRINALIA_CHECKPOINT";

/// The environment variable naming the run a restarted run starts over.
pub const RESTART_OF_ENV: &str = "SCRINALIA_RESTART_OF";

/// The environment variable naming the file of a scoped run's item ids.
pub const ITEMS_ONLY_ENV: &str = "SCRINALIA_ITEMS_ONLY";

/// The environment variable naming the file of the item ids a run must skip (quarantined).
pub const ITEMS_SKIP_ENV: &str = "SCRINALIA_ITEMS_SKIP";

/// The flags every worker accepts besides its options.
const COMMON_FLAGS: [&str; 5] = ["run-id", "engine", "preset", "model", "endpoint"];

/// The first line of every usage message.
pub const USAGE: &str = "usage: scrinalia-demo-worker <worker> describe|count-pending|check|run [--run-id ID] \
[--engine E] [--preset P] [--model M] [--endpoint URL] [--<option>=<value>]...";

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
                "{verb:?} is not a verb of the worker protocol; use describe, count-pending, check or run.\n{USAGE}"
            )));
        };
        let mut common: BTreeMap<&str, String> = BTreeMap::new();
        let mut options = Options::new(specs);
        let mut rest = flags.iter();
        while let Some(flag) = rest.next() {
            let Some(body) = flag.strip_prefix("--") else {
                return Err(usage(format!("{flag:?} is not a flag; flags look like --name=value or --name value.")));
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
                options.give(spec, spec.read(worker, &text)?);
            } else {
                let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
                return Err(usage(format!(
                    "worker {worker:?} has no option {name:?}; it accepts: {}.",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                )));
            }
        }
        // Unset or empty: not a shard. Anything else must be one: a run that went on without knowing its share
        // would process every other shard's documents too.
        let shard =
            env(SHARD_ENV).filter(|v| !v.is_empty()).map(|text| Shard::parse(&text)).transpose().map_err(
                |sentence| usage(format!("{sentence} So this run's share of the documents cannot be known.")),
            )?;
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
            options,
            checkpoint: env(CHECKPOINT_ENV).filter(|v| !v.is_empty()),
            restart_of: env(RESTART_OF_ENV).filter(|v| !v.is_empty()),
            items_only: env(ITEMS_ONLY_ENV).filter(|v| !v.is_empty()),
            items_skip: env(ITEMS_SKIP_ENV).filter(|v| !v.is_empty()),
            shard,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Literal;

    const SPECS: &[OptionSpec] = &[
        OptionSpec::integer("batch_size").default(Literal::Integer(1)),
        OptionSpec::text("note"),
        OptionSpec::boolean("crash"),
    ];

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
        assert_eq!(i.options.integer("batch_size"), 7);
        assert_eq!(i.options.text("note"), "--x; $(y)");
        assert!(i.options.boolean("crash"));
        assert_eq!(parse(&["w", "check"]).expect("parses").options.integer("batch_size"), 1, "the default");
    }

    #[test]
    fn reads_the_daemons_name_equals_value_flags_with_values_starting_with_a_dash() {
        let i = parse(&["w", "run", "--run-id=r2", "--batch_size=-1", "--note=-x --y", "--engine=e"]).expect("parses");
        assert_eq!(i.run_id.as_deref(), Some("r2"));
        assert_eq!(i.options.integer("batch_size"), -1);
        assert_eq!(i.options.text("note"), "-x --y");
        assert_eq!(i.engine.engine.as_deref(), Some("e"));
        let spaced = parse(&["w", "run", "--batch_size", "-1", "--note", "-x"]).expect("parses");
        assert_eq!(spaced.options.integer("batch_size"), -1, "both spellings");
        assert_eq!(spaced.options.text("note"), "-x");
    }

    #[test]
    fn what_a_run_continues_comes_from_the_environment() {
        let args = ["w".to_owned(), "run".to_owned()];
        let env = |name: &str| match name {
            CHECKPOINT_ENV => Some("{\"done\": 4}".to_owned()),
            RESTART_OF_ENV => Some(String::new()),
            ITEMS_ONLY_ENV => Some("/tmp/only".to_owned()),
            ITEMS_SKIP_ENV => Some(String::new()),
            _ => None,
        };
        let i = Invocation::parse(&args, |_| Some(SPECS), env).expect("parses");
        assert_eq!((i.checkpoint.as_deref(), i.restart_of), (Some("{\"done\": 4}"), None), "empty is unset");
        assert_eq!((i.items_only.as_deref(), i.items_skip), (Some("/tmp/only"), None));
        let i = parse(&["w", "run"]).expect("parses");
        assert_eq!((i.checkpoint, i.restart_of), (None, None));
    }

    #[test]
    fn the_shard_comes_from_the_environment_and_a_malformed_one_is_refused() {
        let args = ["w".to_owned(), "run".to_owned()];
        let with = |value: &'static str| {
            Invocation::parse(&args, |_| Some(SPECS), move |name: &str| (name == SHARD_ENV).then(|| value.to_owned()))
        };
        assert_eq!(with("1/3").expect("parses").shard, Some(Shard { index: 1, count: 3 }));
        assert_eq!(with("").expect("parses").shard, None, "empty is unset");
        assert_eq!(parse(&["w", "run"]).expect("parses").shard, None);
        for malformed in ["3/3", "1/0", "+1/3", "1 /3", "one/three"] {
            let message = usage_message(with(malformed));
            assert!(message.starts_with(&format!("SCRINALIA_SHARD is {malformed:?}; it must be i/N")), "{message}");
            assert!(message.ends_with("So this run's share of the documents cannot be known."), "{message}");
        }
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
