//! The options a probe accepts, each with its default, bounds and a sentence: what the tests and benches steer a
//! probe with (how long it runs, how it ends, what it prints and reports).

use crate::options::{Literal, OptionSpec};

const fn int(v: i64) -> Option<Literal> {
    Some(Literal::Integer(v))
}

/// The options a probe accepts; `note` is free text that only shows up in the recorded arguments.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::integer("duration_ms")
        .default(Literal::Integer(200))
        .range(int(0), int(86_400_000))
        .about("How long the run takes, in milliseconds."),
    OptionSpec::integer("exit_code")
        .default(Literal::Integer(0))
        .range(int(0), int(255))
        .about("The exit status at the end (0 means succeeded)."),
    OptionSpec::boolean("crash").default(Literal::Boolean(false)).about("Abort with SIGABRT halfway through."),
    OptionSpec::boolean("ignore_sigterm")
        .default(Literal::Boolean(false))
        .about("Ignore SIGTERM, so only SIGKILL stops the run early."),
    OptionSpec::integer("progress_steps")
        .default(Literal::Integer(4))
        .range(int(0), int(10_000))
        .about("Progress lines, spread over the duration."),
    OptionSpec::integer("output_lines")
        .default(Literal::Integer(2))
        .range(int(0), int(1_000_000))
        .about("Free-text lines written to stdout and to stderr at the start."),
    OptionSpec::text("note").about("Free text, recorded verbatim in the probe log's arguments."),
    OptionSpec::integer("checkpoints")
        .default(Literal::Integer(0))
        .range(int(0), int(10_000))
        .about("Checkpoint lines {\"checkpoint\": {\"step\": i}}, spread over the duration."),
    OptionSpec::boolean("oversized_checkpoint")
        .default(Literal::Boolean(false))
        .about("Also print one checkpoint just over 64 KiB of JSON at the end, which the daemon refuses."),
    OptionSpec::integer("items")
        .default(Literal::Integer(0))
        .range(int(0), int(10_000_000))
        .about("Item lines for documents item-000001…, at full speed: at the start, or spread before the checkpoints."),
    OptionSpec::integer("item_ms")
        .default(Literal::Integer(0))
        .range(int(0), int(60_000))
        .about("A pause after each item of its share, as a model call per document takes (the shards bench)."),
    OptionSpec::integer("failed_every")
        .default(Literal::Integer(0))
        .range(int(0), int(10_000_000))
        .about("Every n-th item fails, its class in turn ocr_empty, ctx_overflow, timeout (0: none fails)."),
    OptionSpec::boolean("item_text")
        .default(Literal::Boolean(false))
        .about("Print each item line as free text of the same length instead (the items benchmark's baseline)."),
    OptionSpec::integer("burn_cpu_ms")
        .default(Literal::Integer(0))
        .range(int(0), int(600_000))
        .about("CPU milliseconds to burn in a grandchild process at the start (the usage tests' tree)."),
    OptionSpec::integer("allocate_mb")
        .default(Literal::Integer(0))
        .range(int(0), int(65_536))
        .about("MiB to allocate, touch and hold until the end."),
    OptionSpec::boolean("report_usage")
        .default(Literal::Boolean(false))
        .about("Print usage lines (tokens, a cost in EUR), one of them refused by the daemon."),
    OptionSpec::integer("malformed_items")
        .default(Literal::Integer(0))
        .range(int(0), int(10_000_000))
        .about("Malformed item lines (an unknown outcome) at the start, which the daemon refuses and counts."),
    OptionSpec::integer("silent_after_ms")
        .default(Literal::Integer(0))
        .range(int(0), int(86_400_000))
        .about("No progress, item or checkpoint line after this many milliseconds (0: never silent)."),
];
