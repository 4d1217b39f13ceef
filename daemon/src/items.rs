//! The writer of a run's items and checkpoints: a task of its own, so that the worker's output is never held up
//! by the database (a worker printing a million item lines, or a checkpoint while the database is slow, would
//! otherwise fill its pipe and stop). Items are gathered and written in batches; a checkpoint is written in one
//! transaction with every item reported before it; a write that failed is sent again as it was.

use std::{future::Future, pin::Pin, time::Duration};

use scrinalia_shared::{
    DaemonStore, DbError,
    items::{Batch, Gatherer, Item, Refusal},
};
use serde_json::Value;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::{Instant, sleep_until},
};
use tracing::Instrument;
use uuid::Uuid;

use crate::clock::far;

/// A batch is written once this many lines wait…
const BATCH_LINES: i64 = 500;
/// …or this long after its first line, whichever comes first.
const BATCH_AGE: Duration = Duration::from_secs(1);
/// A failed write is tried again after this long.
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// A write that takes longer is abandoned and tried again (its batch keeps its number, so it is never counted
/// twice).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

enum Message {
    Item(Result<Item, Refusal>),
    Checkpoint(Value),
    Finish(oneshot::Sender<()>),
}

/// The handle a run's session holds: sending never waits.
pub struct ItemWriter {
    messages: mpsc::UnboundedSender<Message>,
    task: JoinHandle<()>,
}

impl ItemWriter {
    /// Starts the writer of `run`; a lost lease is reported on `lost` once, and nothing is written after it.
    pub fn start(
        db: DaemonStore,
        (run, worker): (Uuid, &str),
        daemon: Uuid,
        keep_succeeded: u64,
        lost: mpsc::Sender<String>,
    ) -> Self {
        let (messages, inbox) = mpsc::unbounded_channel();
        let writer = Writer {
            db,
            run,
            worker: worker.to_owned(),
            daemon,
            gatherer: Gatherer::new(keep_succeeded),
            first_pending: None,
            checkpoint: None,
            retry: None,
            retry_at: far(),
            lost: Some(lost),
        };
        let task = tokio::spawn(writer.work(inbox).in_current_span());
        Self { messages, task }
    }

    /// An item line, as read.
    pub fn item(&self, item: Result<Item, Refusal>) {
        let _ = self.messages.send(Message::Item(item));
    }

    /// A checkpoint (already checked for size).
    pub fn checkpoint(&self, checkpoint: Value) {
        let _ = self.messages.send(Message::Checkpoint(checkpoint));
    }

    /// Writes what is left, waiting at most `within`; what could not be written by then is given up (logged, and
    /// `false` returned, so that the run's log says so too).
    pub async fn finish(&self, within: Duration) -> bool {
        let (done, wait) = oneshot::channel();
        let _ = self.messages.send(Message::Finish(done));
        let written = tokio::time::timeout(within, wait).await.is_ok();
        if !written {
            tracing::warn!("the run's last items and checkpoint could not be written in time; they are given up");
        }
        self.task.abort();
        written
    }
}

/// One write: a batch, a checkpoint, or both in one transaction.
struct Job {
    batch: Option<Batch>,
    checkpoint: Option<Value>,
}

/// Why a write did not happen: the lease is lost, or something to try again after (said in a sentence).
enum Failed {
    Lost,
    Again(String),
}

type Write = Pin<Box<dyn Future<Output = (Job, Result<(), Failed>)> + Send>>;

struct Writer {
    db: DaemonStore,
    run: Uuid,
    worker: String,
    daemon: Uuid,
    gatherer: Gatherer,
    first_pending: Option<Instant>,
    /// The latest checkpoint not yet written (an earlier one is superseded by it).
    checkpoint: Option<Value>,
    /// A write that failed, to send again as it was.
    retry: Option<Job>,
    retry_at: Instant,
    /// Where a lost lease is reported; `None` once it was: nothing more is written.
    lost: Option<mpsc::Sender<String>>,
}

impl Writer {
    async fn work(mut self, mut inbox: mpsc::UnboundedReceiver<Message>) {
        let mut watched = false;
        let mut finishing: Option<oneshot::Sender<()>> = None;
        let mut write: Option<Write> = None;
        loop {
            if write.is_none() {
                write = self.next_write(finishing.is_some());
            }
            if write.is_none() && finishing.is_some() && self.idle() {
                if let Some(done) = finishing.take() {
                    let _ = done.send(());
                }
                return;
            }
            let due = self.due_at();
            tokio::select! {
                message = inbox.recv(), if finishing.is_none() => match message {
                    Some(Message::Item(item)) => {
                        if !watched {
                            // Read at the first item, not at the start: a run that reports none costs no read,
                            // and the worker's start waits for nothing. Lines that come meanwhile wait in the inbox.
                            watched = true;
                            self.watch().await;
                        }
                        self.offer(item);
                    }
                    Some(Message::Checkpoint(checkpoint)) => self.checkpoint = Some(checkpoint),
                    Some(Message::Finish(done)) => finishing = Some(done),
                    None => return,
                },
                (job, result) = async { write.as_mut().expect("guarded").await }, if write.is_some() => {
                    write = None;
                    self.written(job, result);
                }
                () = sleep_until(due), if write.is_none() => {}
            }
        }
    }

    /// Reads the worker's open failure streaks: the successes of those items are kept one by one, so that the
    /// run's end can close the streaks.
    /// Bounded like a write, since the worker's lines wait in the inbox meanwhile.
    async fn watch(&mut self) {
        match tokio::time::timeout(WRITE_TIMEOUT, self.db.watched_items(&self.worker)).await {
            Ok(Ok(ids)) => self.gatherer.watch(ids),
            Ok(Err(e)) => tracing::warn!(error = %e,
                "could not read the worker's failure streaks; a success past the kept bound will not close one"),
            Err(_) => tracing::warn!(
                "the worker's failure streaks did not come in time; a success past the kept bound will not close one"
            ),
        }
    }

    fn offer(&mut self, item: Result<Item, Refusal>) {
        self.gatherer.offer(item);
        self.first_pending.get_or_insert_with(Instant::now);
    }

    /// Nothing left to write (or nothing may be written any more).
    fn idle(&self) -> bool {
        self.lost.is_none() || (self.retry.is_none() && self.checkpoint.is_none() && self.gatherer.pending() == 0)
    }

    /// When the next write is due: a retry's time, or a batch's age.
    fn due_at(&self) -> Instant {
        let batch = self.first_pending.map_or_else(far, |first| first + BATCH_AGE);
        if self.retry.is_some() { self.retry_at } else { batch }
    }

    /// The write to start now, if one is due: a failed one again first, then a checkpoint with every item before
    /// it, then a batch that is full, old enough, or the last.
    fn next_write(&mut self, finishing: bool) -> Option<Write> {
        self.lost.as_ref()?;
        let now = Instant::now();
        let job = if self.retry.is_some() {
            // Finishing too: a database refusing at once would otherwise be asked in a tight loop.
            if self.retry_at > now {
                return None;
            }
            self.retry.take()?
        } else if self.checkpoint.is_some() {
            Job { batch: self.take_batch(), checkpoint: self.checkpoint.take() }
        } else if self.gatherer.pending() >= BATCH_LINES
            || (self.gatherer.pending() > 0 && (finishing || self.first_pending.is_some_and(|f| f + BATCH_AGE <= now)))
        {
            Job { batch: self.take_batch(), checkpoint: None }
        } else {
            return None;
        };
        let (db, run, daemon) = (self.db.clone(), self.run, self.daemon);
        Some(Box::pin(async move {
            let write = async {
                match &job.checkpoint {
                    Some(checkpoint) => db.checkpoint_with_items(run, daemon, job.batch.as_ref(), checkpoint).await,
                    None => match &job.batch {
                        Some(batch) => db.write_items(run, daemon, batch).await,
                        None => Ok(()),
                    },
                }
            };
            let result = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(DbError::LeaseLost { .. })) => Err(Failed::Lost),
                Ok(Err(e)) => Err(Failed::Again(e.to_string())),
                Err(_) => Err(Failed::Again(format!("no answer within {} s", WRITE_TIMEOUT.as_secs()))),
            };
            (job, result)
        }))
    }

    fn take_batch(&mut self) -> Option<Batch> {
        self.first_pending = None;
        self.gatherer.take()
    }

    fn written(&mut self, job: Job, result: Result<(), Failed>) {
        let lines = job.batch.as_ref().map_or(0, |b| b.lines);
        match result {
            Ok(()) => {
                if let Some(checkpoint) = &job.checkpoint {
                    tracing::info!(size = checkpoint.to_string().len(), items = lines, "checkpoint stored");
                }
            }
            Err(Failed::Lost) => {
                let what = if job.checkpoint.is_some() { "a checkpoint" } else { "items" };
                if let Some(lost) = self.lost.take() {
                    let _ =
                        lost.try_send(format!("the run was no longer this daemon's when its worker reported {what}"));
                }
            }
            Err(Failed::Again(e)) => {
                tracing::warn!(error = %e, items = lines, checkpoint = job.checkpoint.is_some(),
                    "could not store the worker's items or checkpoint; trying again");
                self.retry = Some(job);
                self.retry_at = Instant::now() + RETRY_AFTER;
            }
        }
    }
}
