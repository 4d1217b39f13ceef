//! Every way a run ends (its daemon finishes it, a person cancels it while queued, recovery interrupts it after
//! its lease expired), each in one transaction with what follows the end: the run's retry when its policy asks
//! for one, and its pipeline's next step or the pipeline's end. A daemon that dies between the two cannot leave
//! a retry unrequested or a pipeline waiting forever, because there is no "between".

use sqlx::types::Json;
use uuid::Uuid;

use super::{
    Database, Dialect, Result,
    dialect::{Sql, sql},
    on_pool,
    pipelines::advance_in_tx,
    runs::{INSERT, Links, NewRun, bind_new_run, run_columns},
};
use crate::{RetryOn, Run, RunState, runs::Finish};

/// The retry that follows `ended`, if its policy asks for one: a new run with the same arguments and
/// configuration, the next attempt, not claimed before its backoff ends; a resume of it (from its checkpoint)
/// when it was interrupted with one and the policy resumes. A run whose cancellation was asked for
/// is never retried, whatever it ended in.
pub(crate) fn retry_of(ended: &Run) -> Option<NewRun<'_>> {
    let outcome = match ended.state {
        RunState::Failed => RetryOn::Failed,
        RunState::Interrupted => RetryOn::Interrupted,
        _ => return None,
    };
    let policy = &ended.config.retry.as_ref()?.value;
    if ended.cancel_requested_at.is_some() || !policy.retries(ended.attempt, outcome) {
        return None;
    }
    let delay = policy.delay(ended.attempt, rand::random::<f64>());
    // An interrupted run continues from its last checkpoint when the policy says so; a failed one starts over.
    let resume = (outcome == RetryOn::Interrupted && policy.resume)
        .then(|| ended.checkpoint.as_ref().zip(ended.checkpoint_at))
        .flatten();
    Some(NewRun {
        id: Uuid::now_v7(),
        worker: &ended.worker,
        requested_by: &ended.requested_by,
        arguments: &ended.arguments,
        config: &ended.config,
        trace_context: ended.trace_context.as_deref(),
        links: Links {
            fire: None,
            retry: Some((ended.id, ended.attempt + 1)),
            delay_seconds: Some(delay),
            step: ended.pipeline_run_id.zip(ended.pipeline_step),
            follows: resume.map(|_| (ended.id, crate::FollowKind::Resume)),
            checkpoint: resume,
        },
    })
}

/// In the transaction `$tx` (of `$db`), releases the resources of the run `$ended` that just ended there and
/// requests what follows it.
macro_rules! follow_in_tx {
    ($tx:ident, $db:expr, $ended:expr) => {{
        let ended: &Run = $ended;
        // The webhook event its outcome is, if any, in the same transaction (see `crate::webhooks`).
        $crate::db::webhooks::record_in_tx!($tx, $db, ended);
        // Its resource slots are free for the next claim the moment this end commits.
        sqlx::query($db.text($crate::db::resources::RELEASE)).bind(ended.id).execute(&mut *$tx).await?;
        if let Some(retry) = retry_of(ended) {
            let inserted: Option<Run> =
                bind_new_run!(sqlx::query_as($db.text(INSERT)), &retry).fetch_optional(&mut *$tx).await?;
            if let Some(retry) = &inserted {
                tracing::info!(run_id = %retry.id, retry_of = %ended.id, worker = %ended.worker,
                    attempt = retry.attempt, not_before = ?retry.not_before, "retry requested");
            }
        }
        if let Some(pipeline) = ended.pipeline_run_id {
            advance_in_tx!($tx, $db, pipeline);
        }
    }};
}

/// Ends a run held by `daemon`, and requests what follows; `None` when it is no longer its own.
pub(crate) async fn finish(db: &Database, run: Uuid, daemon: Uuid, finish: &Finish) -> Result<Option<Run>> {
    const FINISH: Sql = sql!(
        "update worker_runs set state = $3, end_reason = $4, finished_at = ",
        now,
        ", lease_expires_at = null, \
             duration_ms = ",
        ms_since(coalesce(started_at, claimed_at)),
        ", exit_code = $5, error = $6, result = $7 \
         where id = $1 and claimed_by = $2 and state = 'running' returning ",
        run_columns!()
    );
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let ended: Option<Run> = sqlx::query_as(db.text(FINISH))
            .bind(run)
            .bind(daemon)
            .bind(finish.state())
            .bind(finish.reason)
            .bind(finish.exit_code)
            .bind(&finish.error)
            .bind(finish.result.as_ref().map(Json))
            .fetch_optional(&mut *tx)
            .await?;
        let Some(ended) = ended else { return Ok(None) };
        follow_in_tx!(tx, db, &ended);
        tx.commit().await?;
        Ok(Some(ended))
    })
}

/// Every `case` of a cancellation reads the row as it was before the update, so they agree on whether it was
/// queued.
macro_rules! cancel_set {
    ($d:ident;) => {
        $crate::db::dialect::sql_text!($d; []
            "state = case when state = 'queued' then 'cancelled' else state end, \
             end_reason = case when state = 'queued' then 'cancelled' else end_reason end, \
             finished_at = case when state = 'queued' then ", now, " else finished_at end, \
             duration_ms = case when state = 'queued' then 0 else duration_ms end, \
             error = case when state = 'queued' then 'cancelled by ' || $2 || ' before a daemon claimed it' \
                 else error end, \
             cancel_requested_at = coalesce(cancel_requested_at, ", now, "), \
             cancel_requested_by = coalesce(cancel_requested_by, $2)"
        )
    };
}

/// Cancels a queued run at once, or flags a running one for its daemon. `None` when the run is not in flight.
pub(crate) const CANCEL: Sql = sql!(
    "update worker_runs set ",
    cancel_set!(),
    " where id = $1 and state in ('queued', 'running') returning ",
    run_columns!()
);

/// Cancels a queued run at once (and what follows it: its pipeline stops), or flags a running one for its
/// daemon; `None` when the run is not in flight.
pub(crate) async fn request_cancel(db: &Database, run: Uuid, actor: &str) -> Result<Option<Run>> {
    on_pool!(db, |pool| {
        let mut tx = Dialect::begin_write(pool).await?;
        let changed: Option<Run> =
            sqlx::query_as(db.text(CANCEL)).bind(run).bind(actor).fetch_optional(&mut *tx).await?;
        if let Some(ended) = changed.as_ref().filter(|r| r.state == RunState::Cancelled) {
            follow_in_tx!(tx, db, ended);
        }
        tx.commit().await?;
        Ok(changed)
    })
}

/// What recovery writes on a run whose owner stopped renewing its lease. The sentence names the daemon (its id
/// hyphenated, as everywhere else) and when the lease expired (RFC 3339, UTC, milliseconds) on both backends.
macro_rules! owner_lost {
    ($d:ident;) => {
        $crate::db::dialect::sql_text!($d; []
            "state = 'interrupted', end_reason = 'owner_lost', finished_at = ", now, ", \
             duration_ms = ", ms_since(coalesce(started_at, claimed_at)), ", \
             error = 'owner lost: daemon ' || coalesce(", uuid_text(claimed_by), ", '?') \
                 || ' stopped renewing its lease, which expired at ' || ", time_text(lease_expires_at), ", \
             lease_expires_at = null"
        )
    };
}

/// Interrupts every running run whose lease has expired, one transaction per run with what follows it (a
/// retry on `interrupted`, its pipeline's end). A run with a live lease is never touched.
pub(crate) async fn recover_expired(db: &Database) -> Result<Vec<Run>> {
    // PostgreSQL: a row another recoverer holds is skipped, not waited for (it is ending it already).
    const POSTGRES: Sql = sql!(
        "update worker_runs set ",
        owner_lost!(),
        " where id = (select id from worker_runs where state = 'running' and lease_expires_at < now() \
             order by lease_expires_at limit 1 for update skip locked) \
         returning ",
        run_columns!()
    );
    const SQLITE: Sql = sql!(
        "update worker_runs set ",
        owner_lost!(),
        " where id = (select id from worker_runs where state = 'running' and lease_expires_at < ",
        now,
        " order by lease_expires_at limit 1) returning ",
        run_columns!()
    );
    let recover = Sql { postgres: POSTGRES.postgres, sqlite: SQLITE.sqlite };
    let mut recovered = Vec::new();
    // Bounded, so that a sweep always ends even if the clock or a bug kept producing rows.
    for _ in 0..1000 {
        let one: Option<Run> = on_pool!(db, |pool| {
            let mut tx = Dialect::begin_write(pool).await?;
            let ended: Option<Run> = sqlx::query_as(db.text(recover)).fetch_optional(&mut *tx).await?;
            if let Some(ended) = &ended {
                follow_in_tx!(tx, db, ended);
            }
            tx.commit().await?;
            Ok::<_, super::DbError>(ended)
        })?;
        match one {
            Some(run) => recovered.push(run),
            None => break,
        }
    }
    Ok(recovered)
}
