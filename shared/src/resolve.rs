//! Configuration resolution: explicit argument > persisted override > the worker's default (its code's, else the
//! catalogue's; see `crate::effective`), each resolved field carrying its source. The read-only "effective configuration" view and every run use this one function, so
//! the panel cannot describe a configuration a run would not use.

use std::collections::BTreeMap;

use serde_json::Value;

use scrinalia_wire::choice::limits::{self, CPU_MAX, MEMORY_MAX, STALL_SECONDS};

mod backlog;
mod pause;
mod priority;
mod shards;

pub use pause::PAUSE_AFTER_FAILURES;
use pause::pause_of;
pub use priority::worker_priority;
use priority::{expires_of, priority_of};
use shards::shards_of;

use crate::{
    ExplicitArgs, OverrideValues, Resolved, ResolvedConfig, Source,
    catalogue::{WorkerSpec, out_of_bounds},
    effective::EffectiveWorker,
};

/// Why arguments or an override cannot be resolved; each displays as a sentence for people.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResolveError {
    /// The worker has no such option.
    #[error("Worker {worker:?} has no option {option:?}; it accepts: {known}.")]
    UnknownOption {
        /// The worker.
        worker: String,
        /// The option given.
        option: String,
        /// The options it accepts.
        known: String,
    },
    /// The value has the wrong type.
    #[error("Option {option:?} must be {expected}, not {got}.")]
    WrongType {
        /// The option.
        option: String,
        /// What it must be.
        expected: &'static str,
        /// What was given.
        got: String,
    },
    /// The value is not one of the choices.
    #[error("Option {option:?} must be one of {choices}, not {got}.")]
    NotAChoice {
        /// The option.
        option: String,
        /// The allowed values.
        choices: String,
        /// What was given.
        got: String,
    },
    /// The value is below the option's minimum or above its maximum.
    #[error("Option {option:?} must be {bound} {limit}, not {got}.")]
    OutOfBounds {
        /// The option.
        option: String,
        /// "at least" or "at most".
        bound: &'static str,
        /// The bound.
        limit: String,
        /// What was given.
        got: String,
    },
    /// No such engine.
    #[error("There is no engine {engine:?}; the engines are: {known}.")]
    UnknownEngine {
        /// The engine given.
        engine: String,
        /// The engines declared.
        known: String,
    },
    /// No such preset for the engine.
    #[error("Engine {engine:?} has no preset {preset:?}; its presets are: {known}.")]
    UnknownPreset {
        /// The engine.
        engine: String,
        /// The preset given.
        preset: String,
        /// Its presets.
        known: String,
    },
    /// A preset without any engine.
    #[error("Worker {worker:?} uses no engine, so a preset cannot be chosen.")]
    NoEngine {
        /// The worker.
        worker: String,
    },
    /// The engine comes from elsewhere.
    #[error("The engine of worker {worker:?} is not configurable here: {source_sentence}")]
    EngineNotConfigurable {
        /// The worker.
        worker: String,
        /// Where it comes from.
        source_sentence: String,
    },
    /// The retry policy is not valid.
    #[error("The retry policy is not valid: {problem}")]
    InvalidRetry {
        /// What is wrong, as a sentence.
        problem: String,
    },
    /// A limit (`memory_max`, `cpu_max`, `stall_seconds`) is not valid.
    #[error("{problem}")]
    InvalidLimit {
        /// The limit's key.
        key: &'static str,
        /// What is wrong, as a sentence naming the key.
        problem: String,
    },
    /// A run's arguments name a limit, which only the catalogue and an override set.
    #[error(
        "{key} is a limit of the worker, not an argument of one run: set it in the catalogue or with an override \
         (audited)."
    )]
    LimitInArguments {
        /// The limit's key.
        key: &'static str,
    },
    /// A per-run setting (`priority`, `expires_after_seconds`) is not valid.
    #[error("{problem}")]
    InvalidSetting {
        /// The setting's key.
        key: &'static str,
        /// What is wrong, as a sentence naming the key.
        problem: String,
    },
    /// A run's arguments name a worker setting (a backlog trigger's key, the freshness target).
    #[error(
        "{key} is a setting of the worker, not an argument of one run: set it in the catalogue or with an override \
         (audited)."
    )]
    WorkerSettingInArguments {
        /// The setting's key.
        key: &'static str,
    },
    /// `shards` is not a number of shards (below 1, above the maximum).
    #[error("{problem}")]
    InvalidShards {
        /// What is wrong, as a sentence naming `shards`.
        problem: String,
    },
    /// More than one shard for a worker whose code does not declare that it takes a shard.
    #[error(
        "Worker {worker:?} cannot be split into shards: its code {why}. Run it with shards = 1, or declare the \
         `shards` capability (docs/worker-protocol.md)."
    )]
    ShardsNotTaken {
        /// The worker.
        worker: String,
        /// Why not, as the end of a sentence.
        why: &'static str,
    },
    /// A value holds a NUL character (`\u0000`, which JSON allows): a worker receives its options as
    /// command-line arguments, which cannot hold one, and PostgreSQL cannot store one in text or JSON.
    #[error(
        "Option {option:?} contains a NUL character (\\u0000), which a worker's command-line arguments cannot hold."
    )]
    Nul {
        /// The option.
        option: String,
    },
}

/// Resolves the configuration of `worker` for a run (or for the view, with no explicit arguments).
pub fn resolve(
    worker: &EffectiveWorker,
    explicit: &ExplicitArgs,
    overrides: Option<&OverrideValues>,
) -> Result<ResolvedConfig, ResolveError> {
    let empty = OverrideValues::default();
    let overrides = overrides.unwrap_or(&empty);
    let spec = &worker.spec;
    refuse_engine_choice(worker, explicit)?;
    refuse_limits(explicit)?;
    backlog::refuse_in_arguments(explicit)?;
    let external = worker.engine_source.is_some();
    let described = worker.described.as_ref().filter(|d| external && d.source.is_some());
    let pick = |explicit: &Option<String>, overridden: &Option<String>, default: &Option<String>| {
        if external {
            return default.clone().map(|value| Resolved { value, source: Source::External });
        }
        match (explicit, overridden, default) {
            (Some(v), _, _) => Some(Resolved { value: v.clone(), source: Source::Explicit }),
            (None, Some(v), _) => Some(Resolved { value: v.clone(), source: Source::Override }),
            (None, None, Some(v)) => Some(Resolved { value: v.clone(), source: Source::Default }),
            (None, None, None) => None,
        }
    };
    let (engine, preset, model, endpoint) = match described {
        // The engine comes from elsewhere and the code said what it is: what it said, as of its description.
        Some(d) => (pick(&None, &None, &d.engine), pick(&None, &None, &d.preset), d.model.clone(), d.endpoint.clone()),
        None => {
            let engine = pick(&explicit.engine, &overrides.engine, &spec.engine);
            let preset = pick(&explicit.preset, &overrides.preset, &spec.preset);
            let (model, endpoint) = model_of(worker, engine.as_ref(), preset.as_ref())?;
            (engine, preset, model, endpoint)
        }
    };
    let mut options = BTreeMap::new();
    for (name, value) in explicit.options.iter().chain(&overrides.options) {
        check_option(worker, name, value)?;
    }
    for option in &spec.options {
        let chosen = match (explicit.options.get(&option.name), overrides.options.get(&option.name), &option.default) {
            (Some(v), _, _) => Some(Resolved { value: v.clone(), source: Source::Explicit }),
            (None, Some(v), _) => Some(Resolved { value: v.clone(), source: Source::Override }),
            (None, None, Some(v)) => Some(Resolved { value: v.clone(), source: Source::Default }),
            (None, None, None) => None,
        };
        if let Some(chosen) = chosen {
            options.insert(option.name.clone(), chosen);
        }
    }
    for policy in explicit.retry.iter().chain(&overrides.retry) {
        if let Some(problem) = policy.problem() {
            return Err(ResolveError::InvalidRetry { problem });
        }
    }
    let retry = match (&explicit.retry, &overrides.retry, &spec.retry) {
        (Some(v), _, _) => Some(Resolved { value: v.clone(), source: Source::Explicit }),
        (None, Some(v), _) => Some(Resolved { value: v.clone(), source: Source::Override }),
        (None, None, Some(v)) => Some(Resolved { value: v.clone(), source: Source::Default }),
        (None, None, None) => None,
    };
    let (memory_max_bytes, cpu_max, stall_seconds) = limits_of(spec, overrides)?;
    let shards = shards_of(worker, explicit, overrides)?;
    let priority = priority_of(spec, explicit, overrides)?;
    let expires_after_seconds = expires_of(spec, explicit, overrides)?;
    let pause_after_failures = pause_of(spec, overrides)?;
    let backlog = backlog::trigger_of(spec, overrides)?;
    let fresh_within_seconds = backlog::fresh_of(spec, overrides)?;
    Ok(ResolvedConfig {
        engine,
        preset,
        model,
        endpoint,
        engine_configurable: worker.engine_configurable(),
        engine_source: worker.engine_source.clone(),
        options,
        timeout_seconds: spec.timeout_seconds,
        retry,
        memory_max_bytes,
        cpu_max,
        stall_seconds,
        shards,
        priority,
        expires_after_seconds,
        pause_after_failures,
        backlog,
        fresh_within_seconds,
    })
}

/// The resolved limits: memory in bytes, CPU in cores, the stall watchdog in seconds.
type Limits = (Option<Resolved<u64>>, Option<Resolved<f64>>, Option<Resolved<u64>>);

/// Each limit from the override, else from the catalogue, checked (the catalogue's were checked at load).
fn limits_of(spec: &WorkerSpec, overrides: &OverrideValues) -> Result<Limits, ResolveError> {
    fn layered<T: Clone, U>(
        key: &'static str,
        (overridden, default): (&Option<T>, &Option<T>),
        check: impl Fn(&T) -> Result<U, String>,
    ) -> Result<Option<Resolved<U>>, ResolveError> {
        let chosen = match (overridden, default) {
            (Some(v), _) => (v, Source::Override),
            (None, Some(v)) => (v, Source::Default),
            (None, None) => return Ok(None),
        };
        let value = check(chosen.0).map_err(|problem| ResolveError::InvalidLimit { key, problem })?;
        Ok(Some(Resolved { value, source: chosen.1 }))
    }
    let memory = layered(MEMORY_MAX, (&overrides.memory_max, &spec.memory_max), limits::MemoryMax::bytes)?;
    let cpu = layered(CPU_MAX, (&overrides.cpu_max, &spec.cpu_max), |&c| limits::cpu_max(c))?;
    let stall = layered(STALL_SECONDS, (&overrides.stall_seconds, &spec.stall_seconds), |&s| limits::stall_seconds(s))?;
    Ok((memory, cpu, stall))
}

/// A run's arguments may not set a limit: only the catalogue and an audited override do.
fn refuse_limits(explicit: &ExplicitArgs) -> Result<(), ResolveError> {
    let given = [
        (MEMORY_MAX, explicit.memory_max.is_some()),
        (CPU_MAX, explicit.cpu_max.is_some()),
        (STALL_SECONDS, explicit.stall_seconds.is_some()),
        (PAUSE_AFTER_FAILURES, explicit.pause_after_failures.is_some()),
    ];
    match given.into_iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(ResolveError::LimitInArguments { key }),
        None => Ok(()),
    }
}

/// The model and endpoint of a resolved engine and preset, from the engines the worker can use.
fn model_of(
    worker: &EffectiveWorker,
    engine: Option<&Resolved<String>>,
    preset: Option<&Resolved<String>>,
) -> Result<(Option<String>, Option<String>), ResolveError> {
    match (engine, preset) {
        (Some(e), preset) => {
            let declared = worker.engines.get(&e.value).ok_or_else(|| ResolveError::UnknownEngine {
                engine: e.value.clone(),
                known: join(worker.engines.keys()),
            })?;
            let model = match preset {
                Some(p) => {
                    Some(declared.presets.get(&p.value).cloned().ok_or_else(|| ResolveError::UnknownPreset {
                        engine: e.value.clone(),
                        preset: p.value.clone(),
                        known: join(declared.presets.keys()),
                    })?)
                }
                None => None,
            };
            Ok((model, declared.url.clone()))
        }
        (None, Some(_)) => Err(ResolveError::NoEngine { worker: worker.spec.name.clone() }),
        (None, None) => Ok((None, None)),
    }
}

fn refuse_engine_choice(worker: &EffectiveWorker, values: &OverrideValues) -> Result<(), ResolveError> {
    if let Some(sentence) = &worker.spec.engine_source
        && (values.engine.is_some() || values.preset.is_some())
    {
        return Err(ResolveError::EngineNotConfigurable {
            worker: worker.spec.name.clone(),
            source_sentence: sentence.clone(),
        });
    }
    Ok(())
}

/// Checks an override before it is stored: the same rules as explicit arguments.
pub fn check_override(worker: &EffectiveWorker, values: &OverrideValues) -> Result<(), ResolveError> {
    refuse_engine_choice(worker, values)?;
    // An override is checked as if it were a run's explicit arguments; its limits, which arguments cannot set,
    // as the override they are.
    let arguments = OverrideValues {
        memory_max: None,
        cpu_max: None,
        stall_seconds: None,
        pause_after_failures: None,
        when_pending_at_least: None,
        quiet_seconds: None,
        max_delay_seconds: None,
        fresh_within_seconds: None,
        ..values.clone()
    };
    resolve(worker, &arguments, None)?;
    limits_of(&worker.spec, values)?;
    pause_of(&worker.spec, values)?;
    backlog::trigger_of(&worker.spec, values)?;
    backlog::fresh_of(&worker.spec, values).map(drop)
}

fn check_option(worker: &EffectiveWorker, name: &str, value: &Value) -> Result<(), ResolveError> {
    let spec = &worker.spec;
    let option = spec.option(name).ok_or_else(|| ResolveError::UnknownOption {
        worker: spec.name.clone(),
        option: name.to_owned(),
        known: match (spec.options.is_empty(), &worker.described) {
            (true, None) => "none known yet (its catalogue entry declares none and its code has not described \
                             itself)"
                .to_owned(),
            (true, Some(_)) => "none".to_owned(),
            (false, _) => join(spec.options.iter().map(|o| &o.name)),
        },
    })?;
    if !option.kind.admits(value) {
        return Err(ResolveError::WrongType {
            option: name.to_owned(),
            expected: option.kind.noun(),
            got: describe(value),
        });
    }
    if let Some(choices) = option.choices.as_ref().filter(|c| !c.contains(value)) {
        return Err(ResolveError::NotAChoice {
            option: name.to_owned(),
            choices: choices.iter().map(Value::to_string).collect::<Vec<_>>().join(", "),
            got: describe(value),
        });
    }
    if let Some((bound, limit)) = out_of_bounds(option, value) {
        return Err(ResolveError::OutOfBounds {
            option: name.to_owned(),
            bound: if bound == "minimum" { "at least" } else { "at most" },
            limit: limit.to_string(),
            got: value.to_string(),
        });
    }
    if value.as_str().is_some_and(|s| s.contains('\0')) {
        return Err(ResolveError::Nul { option: name.to_owned() });
    }
    Ok(())
}

fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".to_owned(),
        Value::Bool(_) => "true/false",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    };
    let text = value.to_string();
    // Cut by characters, not bytes: a cut inside a multi-byte character would panic.
    let text =
        if text.chars().count() > 40 { format!("{}...", text.chars().take(37).collect::<String>()) } else { text };
    format!("{kind} {text}")
}

fn join<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// The freshness target of `spec` with its override `overrides`, checked (see `fresh_within_seconds`).
pub fn fresh_within(spec: &WorkerSpec, overrides: &OverrideValues) -> Result<Option<Resolved<u64>>, ResolveError> {
    backlog::fresh_of(spec, overrides)
}

/// The backlog trigger of `spec` with its override `overrides`, checked (see `when_pending_at_least`).
pub fn backlog_trigger(
    spec: &WorkerSpec,
    overrides: &OverrideValues,
) -> Result<Option<Resolved<scrinalia_wire::BacklogTrigger>>, ResolveError> {
    backlog::trigger_of(spec, overrides)
}

#[cfg(test)]
mod tests;
