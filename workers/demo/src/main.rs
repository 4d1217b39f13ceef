//! `scrinalia-demo-worker <worker> <verb> [flags]`: the demo archive workers and the probe workers behind the
//! worker protocol (docs/worker-protocol.md). This file only parses the command line and dispatches; the
//! demo's data (staging arrivals, the pipeline over stamps, the cleaning rules, the runs' worklists, results
//! journals and checkpoints) is described in README.md.

mod archive;
mod config;
mod corpus;
mod invocation;
mod item_lists;
mod options;
mod pipeline;
mod probe;
mod probe_items;
mod probe_options;
mod probe_usage;
mod protocol;
mod registry;
mod rules;
mod staging;
mod stamps;
mod stop;
mod task;
mod text;
mod worklist;

use invocation::{Invocation, USAGE, UsageError, Verb};
use options::OptionSpec;
use protocol::Protocol;
use task::Task;

fn main() {
    let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let status = match dispatch(&args) {
        Ok(status) => status,
        Err(error) => match error.downcast_ref::<UsageError>() {
            Some(usage) => {
                eprintln!("scrinalia-demo-worker: {usage}");
                2
            }
            None => {
                let worker = args.first().map_or("scrinalia-demo-worker", String::as_str);
                eprintln!("{worker}: error: {error:#}");
                1
            }
        },
    };
    std::process::exit(status);
}

/// The options of the worker called `name`, or `None` if there is no such worker.
fn accepted_options(name: &str) -> Option<&'static [OptionSpec]> {
    match Task::named(name) {
        Some(task) => Some(task.options()),
        None => probe::is_probe(name).then_some(probe_options::OPTIONS),
    }
}

fn dispatch(args: &[String]) -> anyhow::Result<i32> {
    let mut out = Protocol::stdout();
    if matches!(args.first().map(String::as_str), Some("help" | "--help" | "-h")) {
        let workers: Vec<&str> = Task::ALL.iter().map(|t| t.name()).chain(probe::NAMES).collect();
        out.text(&format!("{USAGE}\nworkers: {}", workers.join(", ")))?;
        return Ok(0);
    }
    if let [verb, ms] = args
        && verb == probe_usage::BURN_CPU
    {
        probe_usage::burn_cpu(anyhow::Context::context(ms.parse::<u64>(), "burn-cpu takes milliseconds")?)?;
        return Ok(0);
    }
    let invocation = Invocation::parse(args, accepted_options, |var| std::env::var(var).ok())?;
    let Some(task) = Task::named(&invocation.worker) else {
        return probe::execute(&invocation, &mut out);
    };
    let data = corpus::data_dir();
    let now = staging::unix_now();
    match invocation.verb {
        Verb::Describe => archive::describe(task, &invocation, &data, now, &mut out),
        Verb::CountPending => archive::count_pending(task, &data, now, invocation.shard, &mut out),
        Verb::Check => archive::check(task, &data, now, &mut out),
        Verb::Run => {
            let stop = stop::Stop::on_sigterm()?;
            archive::run(task, &invocation, &data, now, &stop, &mut out)
        }
    }
}
