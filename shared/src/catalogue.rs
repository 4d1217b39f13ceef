//! The worker catalogue: the single, declarative definition of every worker, its engine and options.
//!
//! It is loaded from configuration and validated once; nothing here starts a process or touches a database.

use std::collections::{BTreeMap, BTreeSet};

use scrinalia_wire::choice::{self, limits};
pub use scrinalia_wire::{Engine, OptionSpec, OptionType, RetryPolicy, choice::MemoryMax, resource::ResourceScope};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// One worker of the catalogue.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    /// Unique name (lowercase letters, digits, `-`, `_`).
    pub name: String,
    /// A short human title.
    #[serde(default)]
    pub title: Option<String>,
    /// The axis of the archive the worker works on.
    #[serde(default)]
    pub axis: String,
    /// Who governs its output (for curators).
    #[serde(default)]
    pub governance: String,
    /// The stamp it leaves on each processed unit.
    #[serde(default)]
    pub stamp: String,
    /// A sentence for people.
    #[serde(default)]
    pub description: Option<String>,
    /// The executable and its fixed arguments, speaking the worker protocol.
    pub command: Vec<String>,
    /// The default engine.
    #[serde(default)]
    pub engine: Option<String>,
    /// The default preset of that engine.
    #[serde(default)]
    pub preset: Option<String>,
    /// When set, the engine is not configurable here: this sentence says where it comes from.
    #[serde(default)]
    pub engine_source: Option<String>,
    /// A link to where the engine is configured, when it is not configurable here.
    #[serde(default)]
    pub engine_source_url: Option<String>,
    /// The options the worker accepts.
    #[serde(default)]
    pub options: Vec<OptionSpec>,
    /// How long one run may take before it is stopped and recorded `failed`.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Extra environment for the worker process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// When a run that failed or was interrupted is tried again (none: never).
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    /// The shared resources (`[[resources]]`) a run of it holds while it runs, one slot of each.
    #[serde(default)]
    pub resources: Vec<String>,
    /// The labels a daemon must advertise (`daemon.labels`, or its host name) to take its runs.
    #[serde(default)]
    pub labels: Vec<String>,
    /// After how many runs in a row that reported an item failed the item is quarantined: later runs are given
    /// it to skip (`SCRINALIA_ITEMS_SKIP`) until an operator releases it. None: no quarantine.
    #[serde(default)]
    pub quarantine_after: Option<u32>,
    /// The memory limit of each run, swap included: `"4GiB"`, `"512MiB"` (binary units B, KiB, MiB, GiB, TiB)
    /// or a whole number of bytes; at least 1 MiB. None: no limit. An audited override may change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub memory_max: Option<MemoryMax>,
    /// The CPU limit of each run, in cores (0.5 is half a core; more than 0, at most 1024). None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_max: Option<f64>,
    /// The stall watchdog: a run that reports no progress, item or checkpoint line for this many seconds (from
    /// its worker's start) is stopped and ends `interrupted` with the end reason `stalled`. At least 1. None: no
    /// watchdog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_seconds: Option<i64>,
    /// The priority of its runs, 0 to 100, higher first (50 when absent): among runs waiting for the same
    /// resource or a daemon's slots, the higher goes first. An audited override may change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// A queued request of it not claimed this many seconds after it is due ends `cancelled` (end reason
    /// `expired`). None: requests wait as long as it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after_seconds: Option<i64>,
    /// Whether a more urgent run waiting for a resource its run holds may preempt it: ask it to yield at its next
    /// checkpoint, then resume it when the resource is free. Only a worker whose code declares the `checkpoints`
    /// and `yield` capabilities is preempted, and only a run that has a checkpoint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// After this many of its runs in a row end `failed` (retries count; interrupted and cancelled runs neither
    /// count nor reset), the worker is paused until an operator resumes it. None: it never pauses by itself.
    /// An audited override may change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<i64>,
    /// The backlog trigger's threshold: when the worker's pending count (its last count, taken after its last
    /// run ended) is at least this and quiet (`quiet_seconds`), the daemons request one run of it. At least 1.
    /// None: no trigger. An audited override may change it, and each key below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_pending_at_least: Option<i64>,
    /// The trigger's debounce: the count must not have grown for this many seconds (the worker is then counted
    /// every min(`daemon.queue_count_interval_seconds`, quiet_seconds / 2)). At most `max_delay_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_seconds: Option<i64>,
    /// The trigger's longest wait: a run is requested this long after the count first reached the threshold,
    /// even while it still grows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_seconds: Option<i64>,
    /// The freshness target: the age of its oldest pending document (or, when its count does not say, the time
    /// since its last successful run while anything is pending) must stay under this many seconds; a breach
    /// shows on its card, in health and in metrics, with why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_within_seconds: Option<i64>,
}

/// A resource that runs of several workers share, such as one model server: at most `capacity` runs hold it
/// at once, across all daemons; or, of scope `daemon`, such as a GPU, at most as many on each daemon as that
/// daemon's `daemon.resources` gives.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// Unique name (lowercase letters, digits, `-`, `_`).
    pub name: String,
    /// How many runs may hold it at once (an audited override may change it). A global resource needs one of
    /// at least 1; a daemon-scoped one takes none (0, the default when absent): each daemon gives its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capacity: u32,
    /// A sentence for people.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether its capacity is shared by all daemons (`global`, the default) or each daemon's own (`daemon`).
    #[serde(default)]
    pub scope: ResourceScope,
    /// At most this many runs start holding it in any minute, across all daemons (a paid API's rate limit); at
    /// least 1. Only for a global resource. None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_per_minute: Option<i64>,
    /// A more urgent run that has waited this many seconds for it preempts a preemptible holder of lower priority
    /// (see [`WorkerSpec::preemptible`]). None: its holders are never preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_after_seconds: Option<i64>,
    /// How long a preempted holder has to yield before it is stopped as a cancel stops it. 60 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_grace_seconds: Option<i64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_timeout() -> u64 {
    6 * 3600
}

impl WorkerSpec {
    /// Whether the engine and preset may be chosen here (by an argument or an override).
    pub fn engine_configurable(&self) -> bool {
        self.engine_source.is_none()
    }

    /// The declared option called `name`.
    pub fn option(&self, name: &str) -> Option<&OptionSpec> {
        self.options.iter().find(|o| o.name == name)
    }
}

/// A pipeline: workers run one after the other as a unit, each step started when the one before succeeded.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// Unique name (lowercase letters, digits, `-`, `_`).
    pub name: String,
    /// A sentence for people.
    #[serde(default)]
    pub description: Option<String>,
    /// The workers, in order.
    pub steps: Vec<String>,
    /// Up to 10 short words every step's run carries (`collection:1921-letters`; see
    /// [`scrinalia_wire::tag`]), before those of whoever starts it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// The validated catalogue: workers in order, the engines they use, and the pipelines over them.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Catalogue {
    /// Workers in catalogue order.
    pub workers: Vec<WorkerSpec>,
    /// Engines by name.
    pub engines: BTreeMap<String, Engine>,
    /// Pipelines in catalogue order.
    pub pipelines: Vec<PipelineSpec>,
    /// Shared resources in catalogue order.
    pub resources: Vec<ResourceSpec>,
}

/// A problem found in the catalogue; `key` names the configuration key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueProblem {
    /// The configuration key, e.g. `workers[2].preset`.
    pub key: String,
    /// What is wrong, as a sentence.
    pub message: String,
}

impl Catalogue {
    /// Builds and validates a catalogue; every problem found is returned, not only the first.
    pub fn new(workers: Vec<WorkerSpec>, engines: BTreeMap<String, Engine>) -> Result<Self, Vec<CatalogueProblem>> {
        Self::with_pipelines(workers, engines, Vec::new())
    }

    /// As [`Catalogue::new`], with pipelines.
    pub fn with_pipelines(
        workers: Vec<WorkerSpec>,
        engines: BTreeMap<String, Engine>,
        pipelines: Vec<PipelineSpec>,
    ) -> Result<Self, Vec<CatalogueProblem>> {
        Self { workers, engines, pipelines, resources: Vec::new() }.checked()
    }

    /// As [`Catalogue::with_pipelines`], with shared resources (every worker's resources must be declared).
    pub fn with_resources(
        workers: Vec<WorkerSpec>,
        engines: BTreeMap<String, Engine>,
        pipelines: Vec<PipelineSpec>,
        resources: Vec<ResourceSpec>,
    ) -> Result<Self, Vec<CatalogueProblem>> {
        Self { workers, engines, pipelines, resources }.checked()
    }

    fn checked(self) -> Result<Self, Vec<CatalogueProblem>> {
        let problems = self.problems();
        if problems.is_empty() { Ok(self) } else { Err(problems) }
    }

    /// The resource called `name`.
    pub fn resource(&self, name: &str) -> Option<&ResourceSpec> {
        self.resources.iter().find(|r| r.name == name)
    }

    /// The pipeline called `name`.
    pub fn pipeline(&self, name: &str) -> Option<&PipelineSpec> {
        self.pipelines.iter().find(|p| p.name == name)
    }

    /// The worker called `name`.
    pub fn worker(&self, name: &str) -> Option<&WorkerSpec> {
        self.workers.iter().find(|w| w.name == name)
    }

    /// The model a preset of an engine resolves to.
    pub fn model(&self, engine: &str, preset: &str) -> Option<&str> {
        self.engines.get(engine)?.presets.get(preset).map(String::as_str)
    }

    fn problems(&self) -> Vec<CatalogueProblem> {
        let mut problems = Vec::new();
        let mut push = |key: String, message: String| problems.push(CatalogueProblem { key, message });
        for (name, engine) in &self.engines {
            if !is_identifier(name) {
                push(
                    format!("engines.{name}"),
                    format!("the engine name {name:?} must be lowercase letters, digits, '-' or '_'"),
                );
            }
            if engine.kind == "ollama" && engine.url.is_none() {
                push(format!("engines.{name}.url"), "an ollama engine needs the url of its server".to_owned());
            }
        }
        let mut resource_names = BTreeSet::new();
        for (i, resource) in self.resources.iter().enumerate() {
            let at = format!("resources[{i}]");
            if !is_identifier(&resource.name) {
                push(
                    format!("{at}.name"),
                    format!("the resource name {:?} must be lowercase letters, digits, '-' or '_'", resource.name),
                );
            }
            if !resource_names.insert(resource.name.as_str()) {
                push(format!("{at}.name"), format!("the resource name {:?} is declared twice", resource.name));
            }
            match resource.scope {
                ResourceScope::Global if resource.capacity == 0 => push(
                    format!("{at}.capacity"),
                    "a resource's capacity must be at least 1 (or give it scope = \"daemon\" for a capacity on \
                     each daemon)"
                        .to_owned(),
                ),
                ResourceScope::Daemon if resource.capacity != 0 => push(
                    format!("{at}.capacity"),
                    format!(
                        "the daemon-scoped resource {:?} takes no capacity here: each daemon gives its own in \
                         daemon.resources",
                        resource.name
                    ),
                ),
                _ => {}
            }
            for (key, value) in [
                ("preempt_after_seconds", resource.preempt_after_seconds),
                ("preempt_grace_seconds", resource.preempt_grace_seconds),
            ] {
                if let Some(n) = value.filter(|n| *n < 0) {
                    push(format!("{at}.{key}"), format!("{key} cannot be negative, not {n}"));
                }
            }
            match (resource.starts_per_minute, resource.scope) {
                (Some(n), _) if n < 1 => push(
                    format!("{at}.starts_per_minute"),
                    format!("starts_per_minute must be at least 1 (leave it out for no limit), not {n}"),
                ),
                (Some(_), ResourceScope::Daemon) => push(
                    format!("{at}.starts_per_minute"),
                    format!(
                        "starts_per_minute limits starts across all daemons, so only a global resource takes it, \
                         not the daemon-scoped {:?}",
                        resource.name
                    ),
                ),
                _ => {}
            }
        }
        let mut seen = BTreeSet::new();
        for (i, worker) in self.workers.iter().enumerate() {
            let at = format!("workers[{i}]");
            if !is_identifier(&worker.name) {
                push(
                    format!("{at}.name"),
                    format!("the worker name {:?} must be 1 to 63 lowercase letters, digits, '-' or '_'", worker.name),
                );
            }
            if !seen.insert(worker.name.as_str()) {
                push(format!("{at}.name"), format!("the worker name {:?} is declared twice", worker.name));
            }
            if worker.command.first().is_none_or(|c| c.trim().is_empty()) {
                push(format!("{at}.command"), format!("worker {:?} has an empty command", worker.name));
            }
            if worker.quarantine_after == Some(0) {
                push(
                    format!("{at}.quarantine_after"),
                    "must be at least 1 (leave it out for no quarantine)".to_owned(),
                );
            }
            if worker.timeout_seconds == 0 {
                push(format!("{at}.timeout_seconds"), "the timeout must be at least one second".to_owned());
            }
            match (&worker.engine, &worker.preset) {
                (Some(engine), preset) => match self.engines.get(engine) {
                    None => push(
                        format!("{at}.engine"),
                        format!("worker {:?} uses the unknown engine {engine:?}", worker.name),
                    ),
                    Some(e) => {
                        if let Some(p) = preset.as_ref().filter(|p| !e.presets.contains_key(p.as_str())) {
                            push(
                                format!("{at}.preset"),
                                format!("worker {:?} uses the unknown preset {p:?} of engine {engine:?}", worker.name),
                            );
                        }
                    }
                },
                (None, Some(p)) => push(
                    format!("{at}.preset"),
                    format!("worker {:?} names the preset {p:?} but no engine", worker.name),
                ),
                (None, None) => {}
            }
            for (j, resource) in worker.resources.iter().enumerate() {
                if self.resource(resource).is_none() {
                    push(
                        format!("{at}.resources[{j}]"),
                        format!("worker {:?} holds the undeclared resource {resource:?}", worker.name),
                    );
                }
            }
            if worker.resources.iter().collect::<BTreeSet<_>>().len() != worker.resources.len() {
                push(format!("{at}.resources"), format!("worker {:?} names a resource twice", worker.name));
            }
            let mut option_names = BTreeSet::new();
            for (j, option) in worker.options.iter().enumerate() {
                let key = format!("{at}.options[{j}]");
                if !is_identifier(&option.name) {
                    push(
                        format!("{key}.name"),
                        format!("the option name {:?} must be lowercase letters, digits, '-' or '_'", option.name),
                    );
                }
                if !option_names.insert(option.name.as_str()) {
                    push(format!("{key}.name"), format!("option {:?} is declared twice", option.name));
                }
                if let Some(default) = option.default.as_ref().filter(|d| !option.kind.admits(d)) {
                    push(
                        format!("{key}.default"),
                        format!("the default {default} of option {:?} is not {}", option.name, option.kind.noun()),
                    );
                }
                for choice in option.choices.iter().flatten().filter(|c| !option.kind.admits(c)) {
                    push(
                        format!("{key}.choices"),
                        format!("the choice {choice} of option {:?} is not {}", option.name, option.kind.noun()),
                    );
                }
                for problem in bound_problems(option) {
                    push(format!("{key}.{}", problem.0), problem.1);
                }
            }
            if let Some(problem) = worker.retry.as_ref().and_then(RetryPolicy::problem) {
                push(format!("{at}.retry"), problem);
            }
            for (key, problem) in limit_problems(worker) {
                push(format!("{at}.{key}"), problem);
            }
        }
        let mut pipeline_names = BTreeSet::new();
        for (i, pipeline) in self.pipelines.iter().enumerate() {
            let at = format!("pipelines[{i}]");
            if !is_identifier(&pipeline.name) {
                push(
                    format!("{at}.name"),
                    format!(
                        "the pipeline name {:?} must be 1 to 63 lowercase letters, digits, '-' or '_'",
                        pipeline.name
                    ),
                );
            }
            if !pipeline_names.insert(pipeline.name.as_str()) {
                push(format!("{at}.name"), format!("the pipeline name {:?} is declared twice", pipeline.name));
            }
            if pipeline.steps.is_empty() {
                push(format!("{at}.steps"), format!("pipeline {:?} has no steps", pipeline.name));
            }
            if let Err(problem) = scrinalia_wire::tag::check_tags(&pipeline.tags) {
                push(format!("{at}.tags"), problem);
            }
            for (j, step) in pipeline.steps.iter().enumerate() {
                if !seen.contains(step.as_str()) {
                    push(
                        format!("{at}.steps[{j}]"),
                        format!("pipeline {:?} names the unknown worker {step:?}", pipeline.name),
                    );
                }
            }
        }
        problems
    }
}

/// What is wrong with a worker's limits, as (key, sentence naming the key).
fn limit_problems(worker: &WorkerSpec) -> Vec<(&'static str, String)> {
    let memory = worker.memory_max.as_ref().and_then(|m| m.bytes().err()).map(|p| (limits::MEMORY_MAX, p));
    let cpu = worker.cpu_max.and_then(limits::cpu_problem).map(|p| (limits::CPU_MAX, p));
    let stall = worker.stall_seconds.and_then(limits::stall_problem).map(|p| (limits::STALL_SECONDS, p));
    let priority = worker.priority.and_then(|p| choice::priority(p).err()).map(|p| ("priority", p));
    let expires = worker
        .expires_after_seconds
        .and_then(|s| choice::expires_after_seconds(s).err())
        .map(|p| ("expires_after_seconds", p));
    let pause = worker
        .pause_after_failures
        .and_then(|k| choice::pause_after_failures(k).err())
        .map(|p| ("pause_after_failures", p));
    let trigger =
        scrinalia_wire::backlog::trigger(worker.when_pending_at_least, worker.quiet_seconds, worker.max_delay_seconds)
            .err();
    let fresh = worker
        .fresh_within_seconds
        .and_then(|s| scrinalia_wire::backlog::seconds(scrinalia_wire::backlog::FRESH_WITHIN_SECONDS, s).err())
        .map(|p| (scrinalia_wire::backlog::FRESH_WITHIN_SECONDS, p));
    [memory, cpu, stall, priority, expires, pause, trigger, fresh].into_iter().flatten().collect()
}

/// What is wrong with an option's bounds, as (key, sentence): bounds only on numbers, the minimum not above the
/// maximum, the default and the choices within them. Used for the catalogue and for what a worker's code declares.
pub fn bound_problems(option: &OptionSpec) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let numeric = matches!(option.kind, OptionType::Integer | OptionType::Number);
    for (key, bound) in [("minimum", &option.minimum), ("maximum", &option.maximum)] {
        if let Some(bound) = bound {
            if !numeric {
                problems.push((
                    key,
                    format!("option {:?} is {}, so it cannot have a {key}", option.name, option.kind.noun()),
                ));
            } else if option.kind == OptionType::Integer && !(bound.is_i64() || bound.is_u64()) {
                problems.push((key, format!("the {key} {bound} of option {:?} is not a whole number", option.name)));
            }
        }
    }
    if !numeric {
        return problems;
    }
    let as_f64 = |n: &Option<serde_json::Number>| n.as_ref().and_then(serde_json::Number::as_f64);
    if let (Some(min), Some(max)) = (as_f64(&option.minimum), as_f64(&option.maximum))
        && min > max
    {
        problems.push(("minimum", format!("option {:?} has a minimum above its maximum", option.name)));
    }
    if let Some(default) = option.default.as_ref().filter(|d| out_of_bounds(option, d).is_some()) {
        problems.push(("default", format!("the default {default} of option {:?} is out of its bounds", option.name)));
    }
    for choice in option.choices.iter().flatten().filter(|c| out_of_bounds(option, c).is_some()) {
        problems.push(("choices", format!("the choice {choice} of option {:?} is out of its bounds", option.name)));
    }
    problems
}

/// The bound `value` breaks, as ("minimum" or "maximum", the bound), if it breaks one.
pub fn out_of_bounds<'a>(option: &'a OptionSpec, value: &Value) -> Option<(&'static str, &'a serde_json::Number)> {
    let v = value.as_f64()?;
    if let Some(min) = option.minimum.as_ref().filter(|m| m.as_f64().is_some_and(|m| v < m)) {
        return Some(("minimum", min));
    }
    option.maximum.as_ref().filter(|m| m.as_f64().is_some_and(|m| v > m)).map(|m| ("maximum", m))
}

/// Names that end up in paths, log keys and arguments are kept to a safe alphabet.
pub fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric()
}
