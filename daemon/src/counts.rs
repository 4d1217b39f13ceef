//! Queue counts: every `daemon.queue_count_interval_seconds`, each worker this daemon takes runs its
//! `count-pending` (directly, no supervisor: it is read-only and short), with a timeout after which its whole
//! process group is killed, never twice at once for one worker. The API only reads the stored measurements.
//!
//! A round's counts start one after another, `COUNT_SPACING` apart (closer when the catalogue is so large that
//! the round would not fit in the interval) and never more than `MAX_COUNTING` at once: a catalogue of thousands
//! of workers must not start thousands of processes at the same instant.

use std::{
    collections::{HashSet, VecDeque},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use scrinalia_shared::{ExplicitArgs, Override, WorkerSpec, queue::NewQueueCount, resolve};
use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    process::Command,
    task::JoinSet,
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{Context, clock::far, invocation::Invocation};

/// Output beyond this is not read.
const MAX_OUTPUT: u64 = 1024 * 1024;
/// The longest gap between the starts of two counts of one round.
const COUNT_SPACING: Duration = Duration::from_millis(50);
/// At most this many `count-pending` processes at once.
const MAX_COUNTING: usize = 4;

/// What `count-pending` answered.
#[derive(Debug, PartialEq)]
enum Measured {
    Pending(i64),
    Unmeasurable { reason: String, done: Option<i64> },
}

/// Measures until `stop`; counts in progress are killed then.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let interval = Duration::from_secs(ctx.settings.daemon.queue_count_interval_seconds);
    let mut counting: JoinSet<String> = JoinSet::new();
    let mut busy: HashSet<String> = HashSet::new();
    let mut round: VecDeque<(WorkerSpec, Option<Override>)> = VecDeque::new();
    let (mut next_round, mut next_start, mut spacing) = (Instant::now(), far(), COUNT_SPACING);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = sleep_until(next_round) => {
                next_round = Instant::now() + interval;
                if !round.is_empty() {
                    tracing::warn!(skipped = round.len(), "the previous round of queue counts had not finished; its remaining counts are skipped");
                }
                round = plan_round(&ctx).await;
                spacing = COUNT_SPACING.min(interval / u32::try_from(round.len().max(1)).unwrap_or(u32::MAX));
                next_start = Instant::now();
            }
            () = sleep_until(next_start), if !round.is_empty() && counting.len() < MAX_COUNTING => {
                next_start = Instant::now() + spacing;
                let Some((spec, current)) = round.pop_front() else { continue };
                if !busy.insert(spec.name.clone()) {
                    tracing::debug!(worker = %spec.name, "the previous count-pending is still running; skipped");
                    continue;
                }
                let (ctx, stop) = (ctx.clone(), stop.clone());
                counting.spawn(
                    async move {
                        count(&ctx, &spec, current, &stop).await;
                        spec.name
                    }
                    .in_current_span(),
                );
            }
            Some(done) = counting.join_next() => {
                if let Ok(worker) = done {
                    busy.remove(&worker);
                }
            }
        }
    }
    while counting.join_next().await.is_some() {}
}

/// The workers this daemon counts, each with its current override.
async fn plan_round(ctx: &Context) -> VecDeque<(WorkerSpec, Option<Override>)> {
    let overrides = match ctx.db.list_overrides().await {
        Ok(overrides) => overrides,
        Err(e) => {
            tracing::warn!(error = %e, "could not read overrides; queue counts skipped this round");
            return VecDeque::new();
        }
    };
    let taken = &ctx.settings.daemon.workers;
    ctx.settings
        .catalogue
        .workers
        .iter()
        .filter(|w| taken.is_empty() || taken.contains(&w.name))
        .map(|spec| (spec.clone(), overrides.iter().find(|o| o.worker == spec.name).cloned()))
        .collect()
}

/// Measures one worker and stores the measurement (or the sentence saying why it failed).
async fn count(ctx: &Context, spec: &WorkerSpec, current: Option<Override>, stop: &CancellationToken) {
    let started = Instant::now();
    let explicit = ExplicitArgs::default();
    let measured = match resolve(&ctx.settings.catalogue, spec, &explicit, current.as_ref().map(|o| &o.values)) {
        Ok(config) => {
            let invocation = Invocation::count_pending(spec, &ctx.exe_dir, &ctx.settings.daemon.worker_env, &config);
            let limit = Duration::from_secs(ctx.settings.daemon.queue_count_timeout_seconds);
            tokio::select! {
                () = stop.cancelled() => return,
                measured = measure(&invocation, limit) => measured,
            }
        }
        Err(e) => Err(format!("the worker's configuration does not resolve: {e}")),
    };
    let mut row = NewQueueCount {
        worker: spec.name.clone(),
        pending: None,
        unmeasurable: None,
        done: None,
        error: None,
        took_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
        measured_by: ctx.daemon_id,
    };
    match measured {
        Ok(Measured::Pending(n)) => row.pending = Some(n),
        Ok(Measured::Unmeasurable { reason, done }) => (row.unmeasurable, row.done) = (Some(reason), done),
        Err(e) => {
            tracing::warn!(worker = %spec.name, error = %e, "count-pending failed");
            row.error = Some(e);
        }
    }
    if let Err(e) = ctx.db.store_queue_count(&row).await {
        tracing::warn!(worker = %spec.name, error = %e, "could not store the queue count");
    }
}

/// Runs `count-pending` in its own process group; on timeout (or when dropped) the group is killed.
async fn measure(invocation: &Invocation, limit: Duration) -> Result<Measured, String> {
    let mut cmd = Command::new(&invocation.program);
    cmd.args(&invocation.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.process_group(0).kill_on_drop(true);
    invocation.apply_env(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("could not start {}: {e}", invocation.program.display()))?;
    let group = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = tokio::time::timeout(limit, async {
        let (out, err) = tokio::join!(read_capped(stdout), read_capped(stderr));
        (child.wait().await, out, err)
    })
    .await;
    drop(group);
    let (status, out, err) =
        finished.map_err(|_| format!("count-pending did not answer within {} s", limit.as_secs()))?;
    let status = status.map_err(|e| format!("could not wait for count-pending: {e}"))?;
    if !status.success() {
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(format!(
            "count-pending failed ({status}){}",
            if last.is_empty() { String::new() } else { format!(": {last}") }
        ));
    }
    parse(&out)
}

/// Kills the process group when the measurement ends, however it ends (children of a count do not linger).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.filter(|&p| p > 1) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

async fn read_capped(reader: Option<impl AsyncRead + Unpin>) -> String {
    let mut buf = Vec::new();
    if let Some(reader) = reader {
        let _ = reader.take(MAX_OUTPUT).read_to_end(&mut buf).await;
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last JSON object of the output: `{"pending": N}` or `{"unmeasurable": "…", "done": N}`.
fn parse(out: &str) -> Result<Measured, String> {
    let answer = out.lines().rev().find_map(|l| serde_json::from_str::<Value>(l.trim()).ok().filter(Value::is_object));
    let Some(answer) = answer else {
        return Err("count-pending printed no JSON object".to_owned());
    };
    if let Some(pending) = answer.get("pending").and_then(Value::as_i64) {
        return Ok(Measured::Pending(pending));
    }
    if let Some(reason) = answer.get("unmeasurable").and_then(Value::as_str) {
        return Ok(Measured::Unmeasurable {
            reason: reason.to_owned(),
            done: answer.get("done").and_then(Value::as_i64),
        });
    }
    Err(format!("count-pending answered {answer}, which has neither \"pending\" nor \"unmeasurable\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_from_the_last_object() {
        assert_eq!(parse("noise\n{\"pending\": 12}\n"), Ok(Measured::Pending(12)));
        assert_eq!(
            parse("{\"unmeasurable\": \"no index\", \"done\": 4}"),
            Ok(Measured::Unmeasurable { reason: "no index".into(), done: Some(4) })
        );
        assert!(parse("nothing").is_err());
        assert!(parse("{\"other\": 1}").is_err());
    }
}
