//! A bulk action taken over by a second daemon, through the domain operations on PostgreSQL and SQLite: daemon A
//! takes the job under a short lease and works one batch, then stops (as a daemon that died would: it never
//! writes again); once A's lease has run out on the database clock, daemon B takes the job where it stood and
//! finishes it, and A's next batch finds the job no longer its own. Each run was acted on once: one rerun per
//! worker, of its newest matching run, every other run skipped with its reason, and the counts add up.

use std::time::Duration;

use scrinalia_shared::{
    BulkActionKind, BulkState, EndReason, FollowKind, RunState,
    bulk::{BatchDone, NewBulkAction},
    runs::{Finish, RunFilter},
};
use scrinalia_tests::{
    TestDb, backend_tests, eventually,
    fixtures::{LONG_LEASE, catalogue_of, request},
};
use serde_json::json;
use uuid::Uuid;

backend_tests!(a_bulk_rerun_taken_over_from_a_dead_daemon_acts_on_each_run_once);

async fn a_bulk_rerun_taken_over_from_a_dead_daemon_acts_on_each_run_once(t: &TestDb) {
    let workers = ["a", "b", "c"];
    let catalogue = catalogue_of(&workers);
    let mut newest = Vec::new();
    for worker in workers {
        for _ in 0..4 {
            let run = t.db.api.request_run(&catalogue, request(worker)).await.expect("a request");
            let holder = Uuid::now_v7();
            t.db.daemon.claim_runs(holder, LONG_LEASE, 1, Some(&[worker.to_owned()])).await.expect("claim");
            let failed = Finish {
                reason: EndReason::ExitStatus,
                exit_code: Some(1),
                error: Some("model server down".into()),
                result: None,
                usage: None,
            };
            t.db.daemon.finish_run(run.id, holder, &failed).await.expect("finish");
            newest.push((worker, run.id));
        }
    }
    let filter = RunFilter { state: Some(RunState::Failed), ..RunFilter::default() };
    let preview = t.db.api.bulk_preview(&filter, BulkActionKind::Rerun).await.expect("a dry run");
    assert_eq!((preview.count, preview.workers), (12, 3));
    let filter_json = json!({"state": "failed"});
    let job =
        t.db.api
            .start_bulk(&NewBulkAction {
                filter: &filter,
                filter_json: &filter_json,
                action: BulkActionKind::Rerun,
                expect_count: 12,
                snapshot: preview.snapshot,
                reason: "the model server is back",
                requested_by: "ada",
            })
            .await
            .expect("stored");

    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let short = Duration::from_millis(400);
    let taken = t.db.daemon.claim_bulk(a, short).await.expect("claim").expect("A takes the job");
    assert!(t.db.daemon.claim_bulk(b, short).await.expect("claim").is_none(), "one daemon at a time");
    let first = t.db.daemon.work_bulk_batch(&catalogue, &taken, a, short, 5).await.expect("a batch");
    assert_eq!(first, BatchDone::Worked { runs: 5, finished: false });

    // A dies here. B takes the job once A's lease ran out on the database clock.
    let resumed = eventually(Duration::from_secs(10), "B to take the job over", || async {
        t.db.daemon.claim_bulk(b, LONG_LEASE).await.expect("claim")
    })
    .await;
    assert_eq!((resumed.id, resumed.done + resumed.skipped), (job.id, 5), "where the job stood");
    assert_eq!(t.db.daemon.work_bulk_batch(&catalogue, &taken, a, short, 5).await.expect("A again"), BatchDone::Lost);
    loop {
        match t.db.daemon.work_bulk_batch(&catalogue, &resumed, b, LONG_LEASE, 5).await.expect("a batch") {
            BatchDone::Worked { finished: true, .. } => break,
            BatchDone::Worked { .. } => {}
            BatchDone::Lost => panic!("B lost the job"),
        }
    }

    let done = t.db.api.bulk_action(job.id).await.expect("read").expect("the job");
    assert_eq!(done.state, BulkState::Done);
    assert_eq!((done.total, done.done, done.skipped, done.failed), (12, 3, 9, 0), "{done:?}");
    let queued = RunFilter { state: Some(RunState::Queued), limit: 100, ..RunFilter::default() };
    let reruns = t.db.api.list_runs(&queued).await.expect("the ledger").runs;
    assert_eq!(reruns.len(), 3, "one rerun per worker: {reruns:?}");
    for worker in workers {
        let last = newest.iter().rev().find(|(w, _)| *w == worker).map(|(_, id)| *id);
        let of: Vec<_> = reruns.iter().filter(|r| r.worker == worker).collect();
        assert_eq!(of.len(), 1);
        assert_eq!((of[0].follows, of[0].follows_as), (last, Some(FollowKind::Rerun)), "{worker}");
        assert_eq!(of[0].requested_by, "ada");
    }
}
