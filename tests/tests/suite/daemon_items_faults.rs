//! Items under faults (issue 24, "no data lost"), through real daemons and probes. On PostgreSQL: the daemon's
//! connections cut twice mid-run, once under a batch's statement and once under a checkpoint's transaction, and
//! a batch that commits while its answer is lost, sent again after the writer's timeout: the run succeeds and
//! every item the probe printed is counted exactly once. On both backends: a daemon SIGKILLed while a batch waits
//! to be written: the run is interrupted with every item printed before its last stored checkpoint stored and
//! none counted twice, and its resume reports the items after that checkpoint as its own.
//!
//! A write is caught in flight by a lock the test holds (on PostgreSQL the daemon's statement is seen waiting for
//! it in `pg_stat_activity`; on SQLite the daemon says its write failed on the busy database), never by timing.

use std::time::Duration;

use nix::sys::signal::Signal;
use scrinalia_shared::{FollowKind, Run, RunState};
use scrinalia_tests::{
    Kind, Process, TestDb, backend_tests,
    daemon_harness::{ProbeEvent, Setup, wait_finished, wait_run, wait_started},
    eventually, terminate_connections,
};
use serde_json::{Value, json};
use sqlx::{Connection as _, Executor as _, PgConnection, SqliteConnection};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::{Mutex, watch},
};
use uuid::Uuid;

backend_tests!(a_daemon_killed_with_a_pending_batch_keeps_every_item_before_its_last_checkpoint);

/// The probe's items: blocks of 2,000 (each a few batches), one before each of six checkpoints.
const ITEMS: i64 = 12_000;
const FAILED_EVERY: i64 = 7;
const CHECKPOINTS: i64 = 6;
/// A block every second: room to take a lock between a checkpoint and the next block.
const DURATION_MS: i64 = 6_000;

/// What the item writer says when a write failed and is sent again.
const TRYING_AGAIN: &str = "could not store the worker's items or checkpoint; trying again";

fn probe_options() -> Value {
    json!({"items": ITEMS, "failed_every": FAILED_EVERY, "checkpoints": CHECKPOINTS, "duration_ms": DURATION_MS})
}

/// A run's items as stored: its counts, its failed rows, and its batches (sequence number, lines).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    /// Succeeded, failed and skipped.
    items: i64,
    failed: i64,
    refused: i64,
    failed_rows: i64,
    batches: Vec<(i64, i64)>,
}

impl Stored {
    async fn of(t: &TestDb, run: Uuid) -> Self {
        let summary = t.db.api.item_summary(run).await.expect("the item summary").unwrap_or_default();
        const ROWS: &str = "select count(*) from run_items where run_id = $1 and outcome = 'failed'";
        const BATCHES: &str = "select seq, cast(lines as bigint) from run_item_batches where run_id = $1 order by seq";
        const ROWS_SQLITE: &str = "select count(*) from run_items where run_id = ?1 and outcome = 'failed'";
        const BATCHES_SQLITE: &str =
            "select seq, cast(lines as bigint) from run_item_batches where run_id = ?1 order by seq";
        let (failed_rows, batches) = match t.kind {
            Kind::Postgres => {
                let mut conn = PgConnection::connect(&t.url).await.expect("a connection");
                let rows = sqlx::query_scalar(ROWS).bind(run).fetch_one(&mut conn).await.expect("failed rows");
                (rows, sqlx::query_as(BATCHES).bind(run).fetch_all(&mut conn).await.expect("batches"))
            }
            Kind::Sqlite => {
                let mut conn = SqliteConnection::connect(&t.url).await.expect("a connection");
                let rows = sqlx::query_scalar(ROWS_SQLITE).bind(run).fetch_one(&mut conn).await.expect("failed rows");
                (rows, sqlx::query_as(BATCHES_SQLITE).bind(run).fetch_all(&mut conn).await.expect("batches"))
            }
        };
        Self {
            items: summary.succeeded + summary.failed + summary.skipped,
            failed: summary.failed,
            refused: summary.refused,
            failed_rows,
            batches,
        }
    }

    /// Nothing counted twice, whatever was stored: each batch once and numbered without a gap, the counts the sum
    /// of the batches' lines, and as many failures counted as failed items stored (rows are one per id, so a
    /// batch counted twice would count more failures than there are rows).
    fn assert_counted_once(&self, what: &str) {
        let seqs: Vec<i64> = self.batches.iter().map(|(seq, _)| *seq).collect();
        let expected: Vec<i64> = (1..=i64::try_from(seqs.len()).expect("a count")).collect();
        assert_eq!(seqs, expected, "{what}: each batch once, none missing: {self:?}");
        let lines: i64 = self.batches.iter().map(|(_, lines)| lines).sum();
        assert_eq!(lines, self.items + self.refused, "{what}: the counts are the batches' lines: {self:?}");
        assert_eq!(self.failed, self.failed_rows, "{what}: a failure counted twice: {self:?}");
    }

    /// The items stored are the first ones the probe printed, in order, without a hole: the failures among them
    /// are exactly every seventh.
    fn assert_a_prefix(&self, what: &str) {
        assert_eq!(self.failed, self.items / FAILED_EVERY, "{what}: items 1..={} stored: {self:?}", self.items);
    }
}

/// The `items` of a checkpoint the probe printed: how many items it printed before it.
fn items_before(checkpoint: &Value) -> i64 {
    checkpoint["items"].as_i64().unwrap_or_else(|| panic!("a probe's checkpoint with items: {checkpoint}"))
}

/// The step of the run's stored checkpoint (0 without one).
fn step(run: &Run) -> i64 {
    run.checkpoint.as_ref().and_then(|c| c["step"].as_i64()).unwrap_or(0)
}

/// Waits until `run` has stored a checkpoint of at least `at_least`.
async fn checkpointed(t: &TestDb, run: Uuid, at_least: i64) -> Run {
    wait_run(&t.db.api, run, Duration::from_secs(20), "a checkpoint", |r| step(r) >= at_least).await
}

/// How many items the probe of `run` printed at most: those of the blocks its ledger recorded, each just before
/// printing it.
fn recorded(setup: &Setup, run: Uuid) -> i64 {
    let id = run.to_string();
    let events = setup.probe_events();
    let blocks = events.iter().filter(|e| e.verb == "run" && e.run_id.as_deref() == Some(id.as_str()));
    blocks
        .filter_map(ProbeEvent::block)
        .map(|b| b.succeeded + i64::try_from(b.failed.len() + b.skipped.len()).expect("a count"))
        .sum()
}

/// An observer of `pg_stat_activity` on the test database (outside any transaction, so each read is fresh).
struct Observer(Mutex<PgConnection>);

impl Observer {
    async fn new(t: &TestDb) -> Self {
        Self(Mutex::new(PgConnection::connect(&t.url).await.expect("an observer connection")))
    }

    /// The backends of daemons whose statement matching `query` (a `LIKE` pattern) waits for a lock.
    async fn waiting(&self, query: &str) -> Vec<i32> {
        sqlx::query_scalar(
            "select pid from pg_stat_activity where datname = current_database() \
             and application_name = 'scrinalia-daemon' and wait_event_type = 'Lock' and query like $1",
        )
        .bind(query)
        .fetch_all(&mut *self.0.lock().await)
        .await
        .expect("read pg_stat_activity")
    }

    /// Waits until a daemon's statement matching `query` waits for a lock.
    async fn blocked(&self, query: &str) {
        eventually(Duration::from_secs(15), "a daemon's write waiting for the test's lock", || async {
            (!self.waiting(query).await.is_empty()).then_some(())
        })
        .await;
    }

    /// Terminates the backends `pids` (every backend of the test database but this one and `keep` when `None`);
    /// returns once they are gone.
    async fn terminate(&self, pids: Option<&[i32]>, keep: i32) -> usize {
        let terminated: Vec<i32> = sqlx::query_scalar(
            "select coalesce(array_agg(pid) filter (where pg_terminate_backend(pid)), '{}') from pg_stat_activity \
             where datname = current_database() and pid <> pg_backend_pid() and pid <> $2 \
             and ($1::int[] is null or pid = any($1))",
        )
        .bind(pids)
        .bind(keep)
        .fetch_one(&mut *self.0.lock().await)
        .await
        .expect("terminate backends");
        eventually(Duration::from_secs(15), "the terminated backends to be gone", || async {
            let left: i64 = sqlx::query_scalar("select count(*) from pg_stat_activity where pid = any($1)")
                .bind(&terminated)
                .fetch_one(&mut *self.0.lock().await)
                .await
                .expect("read pg_stat_activity");
            (left == 0).then_some(())
        })
        .await;
        terminated.len()
    }
}

/// The daemon's connections cut twice while it writes a run's items: first under a batch's statement (a lock on
/// the batches table holds it), then under a checkpoint's write (a lock on the run's row holds its update, after
/// the batch that goes with it went in, in the same transaction). Each write fails, is sent again as it was, and
/// goes in once: the run succeeds with exactly the items the probe printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_neither_lose_an_item_nor_count_one_twice() {
    let t = TestDb::postgres().await;
    // A 10 s lease: the second cut holds the run's row, which lease renewals update, for up to a block's time.
    let setup = Setup::new(&t, |d| d.lease_seconds = 10);
    let daemon = setup.start_daemon("daemon", &[]);
    let run = setup.request(&t.db.api, "probe-1", probe_options()).await;
    checkpointed(&t, run.id, 1).await;
    let observer = Observer::new(&t).await;
    let mut lock = PgConnection::connect(&t.url).await.expect("a connection for the lock");
    let lock_pid: i32 = sqlx::query_scalar("select pg_backend_pid()").fetch_one(&mut lock).await.expect("its pid");

    // Cut 1: the next block's first batch waits behind the lock; the daemon's connections (not its claims
    // connection) are terminated under it.
    lock.execute("begin").await.expect("begin");
    lock.execute("lock table run_item_batches in share mode").await.expect("lock the batches");
    let cut_at = step(&t.db.api.get_run(run.id).await.expect("read").expect("the run"));
    observer.blocked("%run_item_batches%").await;
    assert!(terminate_connections(&t.url, Some("scrinalia-daemon")).await > 0);
    lock.execute("commit").await.expect("release the batches");

    // Cut 2: a later checkpoint's update waits behind a lock on the run's row (a batch's foreign key check does
    // not), in the transaction that already wrote the block's last items; every connection to the database but
    // the lock's is terminated under it, the test's pool and the daemon's claims connection included.
    checkpointed(&t, run.id, cut_at + 1).await;
    lock.execute("begin").await.expect("begin");
    sqlx::query("select 1 from worker_runs where id = $1 for no key update")
        .bind(run.id)
        .execute(&mut lock)
        .await
        .expect("lock the run's row");
    observer.blocked("update worker_runs set checkpoint%").await;
    assert!(observer.terminate(None, lock_pid).await > 0);
    lock.execute("commit").await.expect("release the run's row");

    let done = wait_finished(&t.db.api, run.id, Duration::from_secs(30)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    assert_eq!(done.checkpoint, Some(json!({"step": CHECKPOINTS, "items": ITEMS})));
    let stored = Stored::of(&t, run.id).await;
    assert_eq!((stored.items, stored.refused), (ITEMS, 0), "every item printed is stored: {stored:?}");
    stored.assert_counted_once("after two cuts");
    stored.assert_a_prefix("after two cuts");
    let retried = daemon.output().matches(TRYING_AGAIN).count();
    eprintln!("measured: {retried} writes sent again after two cuts; {} batches", stored.batches.len());
    assert!(retried >= 2, "both cut writes failed and were sent again ({retried}):\n{}", daemon.output());
    drop(daemon);
    t.cleanup().await;
}

/// A TCP proxy in front of the PostgreSQL server that can hold back the server's answers on one connection,
/// named by its backend's pid (read from the server's `BackendKeyData` as the connection starts): a statement on
/// it runs and commits, and its client never hears so.
struct Proxy {
    /// The URL of the test database through the proxy.
    url: String,
    held: watch::Sender<Option<i32>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(t: &TestDb) -> Self {
        let mut url = reqwest::Url::parse(&t.url).expect("the database URL");
        let upstream = format!("{}:{}", url.host_str().expect("a host"), url.port().unwrap_or(5432));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port for the proxy");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(listener.local_addr().expect("its address").port())).expect("a port");
        // In the clear, so the proxy can read the server's messages.
        url.query_pairs_mut().append_pair("sslmode", "disable");
        let (held, _) = watch::channel(None);
        let watcher = held.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(pass(client, upstream.clone(), watcher.subscribe()));
            }
        });
        Self { url: url.to_string(), held, task }
    }

    /// Holds back (`Some`) the answers on the connection of backend `pid`, or lets them through again (`None`).
    fn hold(&self, pid: Option<i32>) {
        self.held.send_replace(pid);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes one connection both ways; the server's bytes wait while `held` names its backend.
async fn pass(client: TcpStream, upstream: String, mut held: watch::Receiver<Option<i32>>) {
    let Ok(server) = TcpStream::connect(&upstream).await else { return };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let (mut start, mut pid, mut buf) = (Vec::new(), None, vec![0; 64 * 1024]);
    while let Ok(read @ 1..) = server_read.read(&mut buf).await {
        if pid.is_none() {
            start.extend_from_slice(&buf[..read]);
            pid = backend_pid(&start);
        }
        while pid.is_some() && *held.borrow_and_update() == pid {
            if held.changed().await.is_err() {
                break;
            }
        }
        if client_write.write_all(&buf[..read]).await.is_err() {
            break;
        }
    }
    requests.abort();
}

/// The backend's pid from the server's first messages (type byte, big-endian length including itself, body),
/// once its `BackendKeyData` (`K`) is among them.
fn backend_pid(bytes: &[u8]) -> Option<i32> {
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + 5) {
        let length = usize::try_from(u32::from_be_bytes(header[1..5].try_into().expect("4 bytes"))).ok()?;
        if header[0] == b'K' {
            return bytes.get(at + 5..at + 9).map(|pid| i32::from_be_bytes(pid.try_into().expect("4 bytes")));
        }
        at += 1 + length;
    }
    None
}

/// A batch's statement commits, but its answer never reaches the daemon (a proxy holds it back): the writer gives
/// up on it after its 10 s and sends the batch again on another connection, where it is recognised by its number
/// and changes nothing. Every item is counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_answer_is_lost_after_its_commit_is_counted_once() {
    let t = TestDb::postgres().await;
    let proxy = Proxy::start(&t).await;
    let config = Setup::config(&t, |_| {}).with(|f| f.database.url.clone_from(&proxy.url));
    let setup = Setup::with(&t, config);
    let daemon = setup.start_daemon("daemon", &[]);
    // Blocks of 750 items a second for 16 s: the run outlasts the writer's 10 s wait, so the batch is sent again
    // while the run goes on (a run's end waits only a lease for its last items).
    let options = json!({"items": ITEMS, "failed_every": FAILED_EVERY, "checkpoints": 16, "duration_ms": 16_000});
    let run = setup.request(&t.db.api, "probe-1", options).await;
    checkpointed(&t, run.id, 1).await;

    // The number of a block's first batch is taken by the test, uncommitted: the daemon's statement for it waits
    // on that row, parsed and with its commit already asked for. Its answer is held back, then the test rolls
    // back: the batch commits unheard. (Each block is two writes, odd and even: its first 500 items on their own,
    // then the other 250 with its checkpoint, in a transaction that would not commit unheard.)
    let observer = Observer::new(&t).await;
    let mut taker = PgConnection::connect(&t.url).await.expect("a connection to take a batch's number");
    let next = loop {
        taker.execute("begin").await.expect("begin");
        let last: i64 = sqlx::query_scalar("select coalesce(max(seq), 0) from run_item_batches where run_id = $1")
            .bind(run.id)
            .fetch_one(&mut taker)
            .await
            .expect("the last batch's number");
        let next = last + 1 + last % 2;
        let taken =
            sqlx::query("insert into run_item_batches (run_id, seq, lines) values ($1, $2, 0) on conflict do nothing")
                .bind(run.id)
                .bind(next)
                .execute(&mut taker)
                .await
                .expect("take the next batch's number");
        if taken.rows_affected() == 1 {
            break next;
        }
        // The writer was quicker: the next one, then.
        taker.execute("rollback").await.expect("rollback");
    };
    observer.blocked("%run_item_batches%").await;
    let writer = observer.waiting("%run_item_batches%").await;
    assert_eq!(writer.len(), 1, "one item writer, one write at a time: {writer:?}");
    proxy.hold(Some(writer[0]));
    taker.execute("rollback").await.expect("give the batch's number back");
    let given_up = eventually(Duration::from_secs(20), "the writer to give up on the unheard batch", || async {
        daemon.output().lines().find(|l| l.contains("no answer within 10 s")).map(str::to_owned)
    })
    .await;
    assert!(given_up.contains("checkpoint=false"), "the batch given up is one of its own: {given_up}");
    let unheard = Stored::of(&t, run.id).await;
    assert!(
        unheard.batches.iter().any(|&(seq, lines)| seq == next && lines > 0),
        "batch {next} committed, unheard: {unheard:?}"
    );
    proxy.hold(None);

    let done = wait_finished(&t.db.api, run.id, Duration::from_secs(30)).await;
    assert_eq!(done.state, RunState::Succeeded, "{done:?}\n{}", daemon.output());
    let stored = Stored::of(&t, run.id).await;
    assert_eq!((stored.items, stored.refused), (ITEMS, 0), "every item printed is stored once: {stored:?}");
    stored.assert_counted_once("a batch sent again after its commit");
    stored.assert_a_prefix("a batch sent again after its commit");
    drop(daemon);
    t.cleanup().await;
}

/// A lock the test holds on the database so that a daemon's next item write waits (PostgreSQL: the batches
/// table; SQLite: the whole file, which the daemon's write gives up on after its busy timeout).
enum Hold {
    Postgres(PgConnection, Observer),
    Sqlite(SqliteConnection),
}

impl Hold {
    async fn take(t: &TestDb) -> Self {
        match t.kind {
            Kind::Postgres => {
                let mut conn = PgConnection::connect(&t.url).await.expect("a connection for the lock");
                conn.execute("begin").await.expect("begin");
                conn.execute("lock table run_item_batches in share mode").await.expect("lock the batches");
                Self::Postgres(conn, Observer::new(t).await)
            }
            Kind::Sqlite => {
                let mut conn = SqliteConnection::connect(&t.url).await.expect("a connection for the lock");
                conn.execute("begin immediate").await.expect("take the write lock");
                Self::Sqlite(conn)
            }
        }
    }

    /// Waits until the owner's item writer has a batch that waits behind the lock (with the lines printed meanwhile
    /// pending behind it).
    async fn wait_for_a_pending_batch(&self, owner: &Process, retried_before: usize) {
        match self {
            Self::Postgres(_, observer) => observer.blocked("%run_item_batches%").await,
            Self::Sqlite(_) => {
                eventually(Duration::from_secs(15), "the owner's item write to fail on the lock", || async {
                    (owner.output().matches(TRYING_AGAIN).count() > retried_before).then_some(())
                })
                .await;
            }
        }
    }

    /// Releases the lock. On PostgreSQL the dead owner's statement still waits for it in its backend, which
    /// would write the batch once the lock is gone: it is terminated first, as the server would once it noticed.
    async fn release(self) {
        match self {
            Self::Postgres(mut conn, observer) => {
                let own: i32 = sqlx::query_scalar("select pg_backend_pid()").fetch_one(&mut conn).await.expect("pid");
                let waiting = observer.waiting("%run_item_batches%").await;
                observer.terminate(Some(&waiting), own).await;
                conn.execute("commit").await.expect("release the batches");
            }
            Self::Sqlite(mut conn) => drop(conn.execute("rollback").await.expect("release the write lock")),
        }
    }
}

/// The run's owner is SIGKILLed while its item writer has a batch waiting (behind the test's lock) and lines
/// pending: what it had not written is lost, but never an item printed before the last checkpoint it stored,
/// which went in one transaction with them. The other daemon interrupts the run; its resume starts from that
/// checkpoint and reports its own items, and the chain of both runs has every failure once.
async fn a_daemon_killed_with_a_pending_batch_keeps_every_item_before_its_last_checkpoint(t: &TestDb) {
    // SQLite: a write behind the test's lock gives up after 1 s (and says so) instead of 5 s, so the lock is held
    // for about two seconds.
    let config = Setup::config(t, |d| d.capacity = 1).with(|f| f.database.busy_timeout_ms = 1_000);
    let setup = Setup::with(t, config);
    let mut daemons = [setup.start_daemon("daemon-a", &[]), setup.start_daemon("daemon-b", &[])];
    let first = setup.request(&t.db.api, "probe-1", probe_options()).await;
    let first = wait_started(&t.db.api, first.id, Duration::from_secs(15)).await;
    let owner = t.db.api.list_daemons(Duration::from_secs(60)).await.expect("daemons");
    let owner = owner.iter().find(|d| Some(d.id) == first.daemon_id).expect("the owner is registered");
    let victim = daemons.iter().position(|d| d.pid().as_raw() == owner.pid).expect("the owner is one of ours");
    checkpointed(t, first.id, 1).await;

    let retried_before = daemons[victim].output().matches(TRYING_AGAIN).count();
    let hold = Hold::take(t).await;
    hold.wait_for_a_pending_batch(&daemons[victim], retried_before).await;
    // The owner's writer is stuck on that batch, every write before it done: what is stored now is what the
    // killed daemon leaves.
    let held = Stored::of(t, first.id).await;
    let held_checkpoint = t.db.api.get_run(first.id).await.expect("read").expect("the run").checkpoint;
    let held_checkpoint = held_checkpoint.expect("a checkpoint was stored");
    daemons[victim].signal(Signal::SIGKILL);
    assert_eq!(daemons[victim].wait(Duration::from_secs(10)).await, None, "killed by SIGKILL");
    hold.release().await;

    let cut = wait_run(&t.db.api, first.id, Duration::from_secs(20), "recovery", |r| r.state.is_terminal()).await;
    assert_eq!(cut.state, RunState::Interrupted, "{cut:?}");
    assert_eq!(cut.checkpoint.as_ref(), Some(&held_checkpoint), "the owner stored no checkpoint after the lock");
    let stored = Stored::of(t, first.id).await;
    eprintln!(
        "measured: killed with {} items stored in {} batches, the last checkpoint after {}",
        stored.items,
        stored.batches.len(),
        held_checkpoint
    );
    assert_eq!(stored, held, "the pending batch was lost with its daemon, and nothing came after it");
    let (before, printed) = (items_before(&held_checkpoint), recorded(&setup, first.id));
    assert!(
        stored.items >= before && stored.items < printed && printed <= ITEMS,
        "{} items stored; the last checkpoint came after {before}, the probe printed at most {printed}: {stored:?}",
        stored.items
    );
    stored.assert_counted_once("the killed daemon's run");
    stored.assert_a_prefix("the killed daemon's run");

    let catalogue = &setup.settings.catalogue;
    let resumed = t.db.api.continue_run(catalogue, first.id, FollowKind::Resume, "ada").await.expect("resume");
    let resumed = wait_finished(&t.db.api, resumed.id, Duration::from_secs(30)).await;
    assert_eq!(resumed.state, RunState::Succeeded, "{resumed:?}");
    let start = setup.probe_run(resumed.id).0.expect("the resumed probe started");
    assert_eq!(start.checkpoint, Some(held_checkpoint.clone()), "its worker got the last stored checkpoint");
    let own = Stored::of(t, resumed.id).await;
    assert_eq!(
        (own.items, recorded(&setup, resumed.id)),
        (ITEMS - before, ITEMS - before),
        "the resume printed and stored the items after its checkpoint: {own:?}"
    );
    own.assert_counted_once("the resume");
    assert_eq!(Stored::of(t, first.id).await, held, "the resume's items are its own");
    let chain = t.db.api.item_summary(resumed.id).await.expect("summary").and_then(|s| s.chain);
    let chain = chain.expect("the resume's summary covers its chain");
    assert_eq!((chain.runs, chain.failed), (2, ITEMS / FAILED_EVERY), "every failure of the chain, once: {chain:?}");
}
