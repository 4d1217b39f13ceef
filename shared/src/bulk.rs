//! Bulk actions, the domain: what a ledger filter matches at or before a snapshot (read through the very pages
//! of `GET /api/runs`, so every filter of the ledger, search included, means the same here), the dry run's
//! count, sample and snapshot, and the real call that stores the job with the runs it acts on, refused when
//! the count it confirms is no longer the count. The daemons then work the job in batches ([`work`]).
//!
//! The rules are pure functions below, unit-tested: which run of each worker the action is tried on (a rerun or
//! resume makes at most one run per worker: its newest matching run), and what a skipped run's sentence says.

use std::collections::HashSet;

use uuid::Uuid;

use crate::{
    BulkAction, BulkActionKind, BulkOutcome, BulkPreview, BulkSample, BulkSnapshot, DbError, RunState, Store, db,
    runs::{Cursor, RunFilter},
};

mod work;

pub use work::BatchDone;

/// The most runs one bulk action takes: a filter that matches more is refused (narrow it, or act in parts).
pub const MAX_BULK_RUNS: usize = 10_000;
/// How many of the newest matching runs a dry run shows.
pub const SAMPLE: usize = 10;
/// How many runs a page of the ledger read for a bulk action holds.
const PAGE: u32 = 500;

/// Why a bulk action was refused; each displays as a sentence for the person who asked.
#[derive(Debug, thiserror::Error)]
pub enum BulkError {
    /// The filter matches more runs than one action takes.
    #[error(
        "The filter matches more than {MAX_BULK_RUNS} runs, more than one bulk action takes; narrow it (a worker, \
         a state, a time range with from and to) and act in parts."
    )]
    TooMany,
    /// Nothing matches.
    #[error("The filter matches no run at or before the snapshot: there is nothing to {0}.")]
    NothingMatches(BulkActionKind),
    /// The set changed since the dry run.
    #[error(
        "The filter now matches {found} runs at or before the snapshot, not the {expected} you were shown (runs \
         changed state or were removed since): look again with a dry run and confirm the new count."
    )]
    CountChanged {
        /// The count confirmed.
        expected: u64,
        /// The count now.
        found: u64,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// A run a filter matched, as much of it as a bulk action needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The run.
    pub id: Uuid,
    /// Its worker.
    pub worker: String,
    /// Its state when read.
    pub state: RunState,
    /// When it was requested.
    pub requested_at: chrono::DateTime<chrono::Utc>,
}

/// A real bulk action as asked.
#[derive(Debug, Clone)]
pub struct NewBulkAction<'a> {
    /// The ledger filter, parsed.
    pub filter: &'a RunFilter,
    /// The same, as given (kept with the action).
    pub filter_json: &'a serde_json::Value,
    /// What to do.
    pub action: BulkActionKind,
    /// The count the caller was shown.
    pub expect_count: u64,
    /// The dry run's snapshot; the newest matching run now when `None`.
    pub snapshot: Option<BulkSnapshot>,
    /// Why.
    pub reason: &'a str,
    /// Who.
    pub requested_by: &'a str,
}

/// The position just past `snapshot` in the ledger's order (newest first), so that a page read from it starts
/// with the snapshot's run itself. Ids are v7 UUIDs, never the largest one; if one were, the page would start
/// at the next instant, which the snapshot's time rounds to anyway.
pub fn just_after(snapshot: BulkSnapshot) -> Cursor {
    match snapshot.id.as_u128().checked_add(1) {
        Some(next) => Cursor { requested_at: snapshot.requested_at, id: Uuid::from_u128(next) },
        None => Cursor { requested_at: snapshot.requested_at + chrono::TimeDelta::microseconds(1), id: Uuid::nil() },
    }
}

/// Which of `workers` (the matching runs' workers, newest run first) the action is tried on: every run of a
/// cancel; for a rerun or a resume, the first (newest) run of each worker only.
pub fn leaders(action: BulkActionKind, workers: &[&str]) -> Vec<bool> {
    if !action.makes_runs() {
        return vec![true; workers.len()];
    }
    let mut seen = HashSet::new();
    workers.iter().map(|w| seen.insert(*w)).collect()
}

/// Why a run that does not lead its worker was skipped, given what became of the run that does: `leader` (its
/// id), its outcome, the run it made and its sentence.
pub fn follower_sentence(
    action: BulkActionKind,
    worker: &str,
    leader: Uuid,
    outcome: Option<BulkOutcome>,
    made: Option<Uuid>,
    why: Option<&str>,
) -> String {
    let done = action.done();
    match (outcome, made) {
        (Some(BulkOutcome::Done), Some(made)) => format!(
            "Another run of {worker} in this action was {done}: {leader} (as run {made}); one bulk {action} makes \
             at most one run per worker, from its newest matching run."
        ),
        _ => format!(
            "Only the newest matching run of {worker}, {leader}, is {done} by this action (one run per worker), \
             and it was not: {}",
            why.unwrap_or("it has no outcome yet.")
        ),
    }
}

/// Whether `found` runs still match where `expected` were shown.
pub fn check_count(expected: u64, found: u64) -> Result<(), BulkError> {
    if expected == found { Ok(()) } else { Err(BulkError::CountChanged { expected, found }) }
}

/// The dry run's sentence.
pub fn preview_message(action: BulkActionKind, count: u64, workers: u64) -> String {
    match action {
        BulkActionKind::Cancel => format!(
            "{count} runs match: a bulk cancel cancels those still queued and asks the daemons running the others to \
             stop them; runs that ended already are skipped."
        ),
        _ => format!(
            "{count} runs of {workers} workers match: a bulk {action} makes at most one run per worker, from its \
             newest matching run ({workers} at most), and reports the others skipped."
        ),
    }
}

impl Store {
    /// Every run `filter` matches at or before `snapshot` (every one now, without), newest first, read through
    /// the ledger's pages; refused past [`MAX_BULK_RUNS`].
    pub(crate) async fn bulk_matches(
        &self,
        filter: &RunFilter,
        snapshot: Option<BulkSnapshot>,
    ) -> Result<Vec<Matched>, BulkError> {
        let mut page = RunFilter { limit: PAGE, after: snapshot.map(just_after), ..filter.clone() };
        let mut matched = Vec::new();
        loop {
            let runs = self.db.retrying(|| db::ledger::list(&self.db, &page, PAGE)).await?;
            let full = runs.len() >= PAGE as usize;
            page.after = runs.last().map(|r| Cursor { requested_at: r.requested_at, id: r.id });
            matched.extend(runs.into_iter().map(|r| Matched {
                id: r.id,
                worker: r.worker,
                state: r.state,
                requested_at: r.requested_at,
            }));
            if matched.len() > MAX_BULK_RUNS {
                return Err(BulkError::TooMany);
            }
            if !full {
                return Ok(matched);
            }
        }
    }

    /// A dry run: how many runs `filter` matches now, the newest of them and the snapshot to confirm with.
    pub(crate) async fn bulk_preview(
        &self,
        filter: &RunFilter,
        action: BulkActionKind,
    ) -> Result<BulkPreview, BulkError> {
        let matched = self.bulk_matches(filter, None).await?;
        let count = matched.len() as u64;
        let workers = matched.iter().map(|m| m.worker.as_str()).collect::<HashSet<_>>().len() as u64;
        let snapshot = matched.first().map(|m| BulkSnapshot { id: m.id, requested_at: m.requested_at });
        let sample = matched
            .into_iter()
            .take(SAMPLE)
            .map(|m| BulkSample { id: m.id, worker: m.worker, state: m.state, requested_at: m.requested_at })
            .collect();
        Ok(BulkPreview { action, count, sample, snapshot, workers, message: preview_message(action, count, workers) })
    }

    /// Stores a bulk action with the runs it acts on, in one transaction, once the count asked for is the count
    /// matched at or before the snapshot; the daemons are woken by the insert.
    pub(crate) async fn start_bulk(&self, new: &NewBulkAction<'_>) -> Result<BulkAction, BulkError> {
        let matched = self.bulk_matches(new.filter, new.snapshot).await?;
        check_count(new.expect_count, matched.len() as u64)?;
        let Some(newest) = matched.first() else { return Err(BulkError::NothingMatches(new.action)) };
        let snapshot = new.snapshot.unwrap_or(BulkSnapshot { id: newest.id, requested_at: newest.requested_at });
        let workers: Vec<&str> = matched.iter().map(|m| m.worker.as_str()).collect();
        let leads = leaders(new.action, &workers);
        let runs: Vec<db::bulk::NewBulkRun> = matched
            .iter()
            .zip(leads)
            .enumerate()
            .map(|(seq, (m, leads))| db::bulk::NewBulkRun {
                seq: i64::try_from(seq).unwrap_or(i64::MAX),
                run_id: m.id,
                worker: m.worker.clone(),
                leads,
            })
            .collect();
        let total = i64::try_from(runs.len()).unwrap_or(i64::MAX);
        let row = db::bulk::NewBulk {
            id: Uuid::now_v7(),
            action: new.action,
            filter: new.filter_json,
            snapshot: Some(snapshot),
            expect_count: i64::try_from(new.expect_count).unwrap_or(i64::MAX),
            reason: new.reason,
            requested_by: new.requested_by,
            total,
        };
        let mut tx = self.db.begin_write().await?;
        let stored = db::bulk::insert(&mut tx, &row).await?;
        db::bulk::insert_runs(&mut tx, row.id, &runs).await?;
        tx.commit().await?;
        Ok(stored)
    }

    /// One bulk action with its progress, and why runs were skipped or failed.
    pub(crate) async fn bulk_action(&self, id: Uuid) -> Result<Option<BulkAction>, DbError> {
        let (action, reasons) = tokio::try_join!(
            self.db.retrying(|| db::bulk::get(&self.db, id)),
            self.db.retrying(|| db::bulk::reasons(&self.db, id, 20))
        )?;
        Ok(action.map(|a| BulkAction { reasons, ..a }))
    }

    /// The newest `limit` bulk actions, newest first: the audit trail of bulk actions.
    pub(crate) async fn bulk_actions(&self, limit: u32) -> Result<Vec<BulkAction>, DbError> {
        self.db.retrying(|| db::bulk::list(&self.db, limit)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_leads_with_the_newest_run_of_each_worker_and_a_cancel_with_every_run() {
        let workers = ["embed", "tagger", "embed", "embed", "judge", "tagger"];
        assert_eq!(leaders(BulkActionKind::Rerun, &workers), [true, true, false, false, true, false]);
        assert_eq!(leaders(BulkActionKind::Resume, &workers), [true, true, false, false, true, false]);
        assert_eq!(leaders(BulkActionKind::Cancel, &workers), [true; 6]);
        assert!(leaders(BulkActionKind::Rerun, &[]).is_empty());
    }

    #[test]
    fn a_follower_names_the_run_that_was_acted_on_or_why_it_was_not() {
        let (leader, made) = (Uuid::now_v7(), Uuid::now_v7());
        let done = follower_sentence(BulkActionKind::Rerun, "embed", leader, Some(BulkOutcome::Done), Some(made), None);
        assert!(done.starts_with(&format!("Another run of embed in this action was rerun: {leader} (as run {made})")));
        let skipped = follower_sentence(
            BulkActionKind::Resume,
            "embed",
            leader,
            Some(BulkOutcome::Skipped),
            None,
            Some("embed already has a run in flight."),
        );
        assert!(skipped.contains(&format!("newest matching run of embed, {leader}, is resumed")), "{skipped}");
        assert!(skipped.ends_with("and it was not: embed already has a run in flight."), "{skipped}");
    }

    #[test]
    fn the_count_must_be_the_count_shown() {
        assert!(check_count(500, 500).is_ok());
        let refused = check_count(500, 499).expect_err("changed");
        assert!(refused.to_string().contains("now matches 499 runs at or before the snapshot, not the 500"));
    }

    #[test]
    fn the_page_after_the_snapshot_starts_with_the_snapshot_itself() {
        let id = Uuid::now_v7();
        let snapshot = BulkSnapshot { id, requested_at: chrono::Utc::now() };
        let cursor = just_after(snapshot);
        assert_eq!(cursor.requested_at, snapshot.requested_at);
        assert!((snapshot.requested_at, id) < (cursor.requested_at, cursor.id));
        let last = just_after(BulkSnapshot { id: Uuid::max(), ..snapshot });
        assert!(last.requested_at > snapshot.requested_at);
    }
}
