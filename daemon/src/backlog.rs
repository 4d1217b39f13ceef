//! The daemon's part in backlog-driven runs: for each of its workers with a backlog trigger, it asks for a count
//! every min(`daemon.queue_count_interval_seconds`, quiet_seconds / 2) and, when the rules say the count is due,
//! fires the trigger (the database lets exactly one daemon request the run; see `scrinalia_shared::backlog`).
//! With no trigger anywhere it looks once a minute (an override may add one) and when woken.

use std::{collections::HashMap, sync::Arc, time::Duration};

use scrinalia_shared::{
    ChoreKind,
    backlog::{Decision, Fired, count_interval, decide},
    resolve::backlog_trigger,
};
use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{Context, chores::my_workers};

/// The longest sleep: an override may add a trigger, and this daemon hears of overrides only by looking.
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// While a worker has a trigger, where its count stands is read this often: a count asked for lands, a run
/// ends, another daemon fires.
const POLL: Duration = Duration::from_secs(1);
/// A look for something that comes due comes this much after it, so that it is due on the database clock too.
const DUE_MARGIN: Duration = Duration::from_millis(20);
/// Wake-ups closer together than this are taken together.
const MIN_GAP: Duration = Duration::from_millis(250);
/// After a failed look, the next one comes this much later.
const RETRY: Duration = Duration::from_secs(1);

/// Fires backlog triggers until `stop`; `wake` says something changed (a run ended, a write on SQLite).
pub async fn run(ctx: Arc<Context>, wake: Arc<Notify>, stop: CancellationToken) {
    let workers = my_workers(&ctx);
    if workers.is_empty() {
        return;
    }
    let mut asked: HashMap<String, Instant> = HashMap::new();
    loop {
        let wait = match look(&ctx, &workers, &mut asked).await {
            Ok(wait) => wait,
            Err(e) => {
                tracing::warn!(error = %e, "could not look at the backlog triggers; trying again");
                RETRY
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
            () = wake.notified() => {
                // A burst of writes (SQLite wakes on each) is taken as one look.
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(MIN_GAP) => {}
                }
            }
        }
    }
}

/// Asks for the counts that are due, fires what is due, and says how long to sleep.
async fn look(
    ctx: &Context,
    workers: &[String],
    asked: &mut HashMap<String, Instant>,
) -> Result<Duration, scrinalia_shared::DbError> {
    let catalogue = &ctx.settings.catalogue;
    let overrides = ctx.db.list_overrides().await?;
    let triggers: Vec<_> = workers
        .iter()
        .filter_map(|name| {
            let spec = catalogue.worker(name)?;
            let stored = overrides.iter().find(|o| &o.worker == name).map(|o| o.values.clone()).unwrap_or_default();
            backlog_trigger(spec, &stored).ok().flatten().map(|t| (name.clone(), t.value))
        })
        .collect();
    if triggers.is_empty() {
        return Ok(LONGEST_WAIT);
    }
    let names: Vec<String> = triggers.iter().map(|(n, _)| n.clone()).collect();
    let states = ctx.db.backlog_states(&names).await?;
    let interval = Duration::from_secs(ctx.settings.daemon.queue_count_interval_seconds);
    let mut wait = POLL;
    let mut counts = Vec::new();
    for (name, trigger) in &triggers {
        let state = states.iter().find(|s| &s.worker == name);
        let every = count_interval(trigger, interval);
        // The chores count every interval by themselves; a shorter period is asked for here.
        if every < interval {
            let counted_ago = state.map_or(Duration::MAX, |s| Duration::from_secs_f64(s.counted_ago.max(0.0)));
            let asked_long_ago = asked.get(name).is_none_or(|t| t.elapsed() >= every);
            if counted_ago >= every && asked_long_ago {
                counts.push(name.clone());
                asked.insert(name.clone(), Instant::now());
            }
        }
        let Some(state) = state else { continue };
        match decide(trigger, state, state.in_flight, false) {
            Decision::Fire(_) => match ctx.db.fire_backlog(catalogue, name, ctx.daemon_id).await? {
                Fired::Fired(fire) => tracing::debug!(worker = %name, fire = fire.id, "fired its backlog trigger"),
                Fired::NotDue(Decision::Wait(d)) => wait = wait.min(d + DUE_MARGIN),
                Fired::NotDue(_) => {}
            },
            Decision::Wait(d) => wait = wait.min(d + DUE_MARGIN),
            Decision::Idle => {}
        }
    }
    if !counts.is_empty() {
        ctx.db.request_chore(&counts, ChoreKind::Count).await?;
    }
    Ok(wait)
}
