//! The one lease of the database layer (`scrinalia_db::lease`) on each of the four tables whose rows are held: a
//! run, a chore, the retention pass and a webhook delivery. Each row is taken the way its table takes it; then
//! only its holder renews it (the expiry moves on, on the database clock), a stranger neither renews nor
//! releases it, and once released it cannot be renewed.

use std::time::Duration;

use scrinalia_db::{
    Database, DatabaseSettings, Lease,
    chores::{self, ChoreIntervals},
    lease::{self, Key, Leased},
    retention,
    runs::{self, Links, NewRun},
    webhooks,
};
use scrinalia_tests::{TestDb, backend_tests};
use scrinalia_wire::{ChoreKind, ExplicitArgs, ResolvedConfig};
use uuid::Uuid;

backend_tests!(each_leased_table_is_renewed_and_released_by_its_holder_only);

/// Leases on `db` taken as each table takes them, by `holder`: (table, key) of each.
async fn take_one_of_each(db: &Database, holder: Uuid) -> Vec<(&'static Leased, Key<'static>)> {
    let config = ResolvedConfig::empty();
    let arguments = ExplicitArgs::default();
    let new = NewRun {
        id: Uuid::now_v7(),
        worker: "leased",
        requested_by: "test",
        arguments: &arguments,
        config: &config,
        trace_context: None,
        override_version: None,
        links: Links::default(),
        tags: &[],
    };
    let run = runs::insert(db, &new).await.expect("insert").expect("inserted");
    let claimed = runs::claim(db, holder, Duration::from_secs(60), 1, None, None, None).await.expect("claim");
    assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), vec![run.id]);

    let workers = vec!["leased".to_owned()];
    chores::prepare(db, &workers).await.expect("prepare");
    chores::request(db, &workers, ChoreKind::Count).await.expect("request");
    let zero = Duration::ZERO;
    let intervals = ChoreIntervals { count: zero, check: zero, min_gap: zero, settle: zero };
    let taken = chores::claim(db, holder, &workers, &intervals, Duration::from_secs(60), 10).await.expect("chores");
    assert!(taken.iter().any(|c| c.chore == ChoreKind::Count && c.lease_by == Some(holder)), "{taken:?}");

    assert!(retention::acquire(db, holder, 60.0, 0.0).await.expect("acquire"), "the retention lease was free");

    let event = Uuid::now_v7();
    webhooks::insert_test_event(db, event, "{}").await.expect("event");
    webhooks::insert_delivery(db, event, "hook").await.expect("delivery");
    let claimed = webhooks::claim(db, holder, &["hook".to_owned()], 60.0, 10).await.expect("claim deliveries");
    let delivery = claimed.first().expect("the delivery").0.0;

    vec![
        (&lease::RUNS, Key::Id(run.id)),
        (&lease::CHORES, Key::Chore("leased", "count")),
        (&lease::RETENTION, Key::Name("prune")),
        (&lease::DELIVERIES, Key::Number(delivery)),
    ]
}

async fn each_leased_table_is_renewed_and_released_by_its_holder_only(t: &TestDb) {
    let db = Database::connect(&DatabaseSettings { url: t.url.clone(), ..DatabaseSettings::default() })
        .await
        .expect("connect");
    let (holder, stranger) = (Uuid::now_v7(), Uuid::now_v7());
    for (table, key) in take_one_of_each(&db, holder).await {
        let name = table.table;
        let before = db.now().await.expect("clock");
        assert_eq!(
            lease::renew(&db, table, key, stranger, Duration::from_secs(600)).await.expect("renew"),
            None,
            "{name}"
        );
        let renewed = lease::renew(&db, table, key, holder, Duration::from_secs(600)).await.expect("renew");
        let Some(Lease { holder: by, expires_at }) = renewed else { panic!("{name}: the holder renews its lease") };
        assert_eq!(by, holder, "{name}");
        assert!(
            expires_at >= before + chrono::Duration::seconds(590),
            "{name}: renewed to {expires_at}, from {before}"
        );
        assert!(
            !lease::release(&db, table, key, stranger).await.expect("release"),
            "{name}: a stranger releases nothing"
        );
        assert!(lease::release(&db, table, key, holder).await.expect("release"), "{name}: the holder releases it");
        let after = lease::renew(&db, table, key, holder, Duration::from_secs(600)).await.expect("renew");
        assert_eq!(after, None, "{name}: a released lease is not renewed");
    }
    db.close().await;
}
