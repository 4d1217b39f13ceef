//! A run's output in the object store, written as numbered chunk objects about every second (or every 64 KiB)
//! so that the panel can read the log while the run goes on. Each line is
//! `<RFC 3339 time> <stdout|stderr> <text>`. A store that refuses a write costs the log, never the run.
//!
//! The log is capped (`logs.max_bytes_per_run`) so that no run can fill the store: the first half of the cap is
//! the head, kept whole; after it, the chunks form a rolling tail of the other half, and each chunk that falls
//! out of the tail is deleted from the store. The first deletion is preceded by a `<seq>.cut` object, between
//! the head and the tail, that states how many bytes and lines were cut; it is refreshed at most every second and
//! at the end. A daemon that dies keeps head and tail as they were at its last write (up to a second of output
//! lost, as without a cap), and its statement may understate the cut by the chunks dropped in that last second.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use object_store::PutPayload;
use scrinalia_shared::logstore::{LogStore, cut_line, halves};
use tokio::time::Instant;
use uuid::Uuid;

use crate::clock::far;

/// How often buffered lines are written out (and a cut's statement refreshed).
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// A chunk is written as soon as it reaches this size (less with a small cap, so that the tail holds a few).
const CHUNK_BYTES: usize = 64 * 1024;
/// A write that takes longer is abandoned (its lines are kept for the next attempt).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this much output waits for a store that refuses writes.
const MAX_PENDING: usize = 4 * 1024 * 1024;

/// The chunk writer of one run.
pub struct RunLog {
    store: LogStore,
    worker: String,
    run: Uuid,
    cap: Cap,
    seq: u32,
    buf: Vec<u8>,
    buf_lines: u64,
    /// Bytes written as the head.
    head_bytes: u64,
    /// Once the head is full.
    tail: Option<Tail>,
    warned: bool,
    pub(crate) next_flush: Instant,
}

/// The cap and what follows from it.
#[derive(Debug, Clone, Copy)]
struct Cap {
    max: u64,
    head: u64,
    tail: u64,
    chunk: usize,
}

impl Cap {
    fn new(max: u64) -> Self {
        let (head, tail) = halves(max);
        let chunk = usize::try_from(tail / 4).unwrap_or(CHUNK_BYTES).clamp(4 * 1024, CHUNK_BYTES);
        Self { max, head, tail, chunk }
    }
}

/// A chunk of the tail still in the store.
#[derive(Debug, Clone, Copy)]
struct Kept {
    seq: u32,
    bytes: u64,
    lines: u64,
}

/// The rolling tail, and the cut before it.
#[derive(Debug)]
struct Tail {
    /// The number of its first chunk: the place of the cut.
    at: u32,
    kept: VecDeque<Kept>,
    kept_bytes: u64,
    cut_bytes: u64,
    cut_lines: u64,
    /// Chunks counted as cut and not yet deleted.
    doomed: Vec<u32>,
    /// Whether the statement in the store counts less than `cut_bytes`.
    stale: bool,
    /// Whether a statement is in the store at all (nothing is deleted before).
    stated: bool,
    next_statement: Instant,
}

impl Tail {
    fn new(at: u32) -> Self {
        Self {
            at,
            kept: VecDeque::new(),
            kept_bytes: 0,
            cut_bytes: 0,
            cut_lines: 0,
            doomed: Vec::new(),
            stale: false,
            stated: false,
            next_statement: Instant::now(),
        }
    }

    /// Takes a written chunk in, and counts as cut the oldest ones beyond the tail's share (the newest stays,
    /// however big).
    fn keep(&mut self, chunk: Kept, share: u64) {
        self.kept_bytes += chunk.bytes;
        self.kept.push_back(chunk);
        while self.kept_bytes > share && self.kept.len() > 1 {
            let Some(old) = self.kept.pop_front() else { break };
            self.kept_bytes -= old.bytes;
            self.cut_bytes += old.bytes;
            self.cut_lines += old.lines;
            self.doomed.push(old.seq);
            self.stale = true;
        }
    }
}

impl RunLog {
    /// A log for `run` capped at `max_bytes` (`logs.max_bytes_per_run`); nothing is written until the first line.
    pub fn new(store: LogStore, worker: &str, run: Uuid, max_bytes: u64) -> Self {
        Self {
            store,
            worker: worker.to_owned(),
            run,
            cap: Cap::new(max_bytes),
            seq: 0,
            buf: Vec::new(),
            buf_lines: 0,
            head_bytes: 0,
            tail: None,
            warned: false,
            next_flush: far(),
        }
    }

    /// The key prefix stored on the run (`log_key`).
    pub fn prefix(&self) -> String {
        self.store.run_prefix(&self.worker, self.run).to_string()
    }

    /// Whether the log is still in its head: past it, the output is only in the rolling tail, so the daemon's
    /// own log stops relaying it (it would otherwise take the whole output, uncapped).
    pub fn in_head(&self) -> bool {
        self.tail.is_none()
    }

    /// Adds a line; writes a chunk when enough has been buffered, and seals the head when the line would not fit
    /// in it.
    pub async fn push(&mut self, stream: &str, line: &str) {
        let at = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
        let entry = format!("{at} {stream} {line}\n");
        if self.tail.is_none() && self.head_bytes + (self.buf.len() + entry.len()) as u64 > self.cap.head {
            if !self.buf.is_empty() {
                self.write().await;
            }
            // While the store refuses writes the head grows past its share, up to what may wait for the store.
            if self.buf.is_empty() {
                // In the run's span, which names the run and its worker.
                tracing::info!(
                    cap = self.cap.max,
                    "the run's log reached half its cap: from here on only its last part is kept, and its lines \
                     are no longer relayed to the daemon's log"
                );
                self.tail = Some(Tail::new(self.seq));
            }
        }
        if self.buf.is_empty() {
            self.next_flush = Instant::now() + FLUSH_EVERY;
        }
        self.buf.extend_from_slice(entry.as_bytes());
        self.buf_lines += 1;
        if self.buf.len() >= self.cap.chunk {
            self.write().await;
        }
    }

    /// Writes the buffered lines as the next chunk, and brings the cut's statement up to date when it is due.
    pub async fn flush(&mut self) {
        self.next_flush = far();
        if !self.buf.is_empty() {
            self.write().await;
        }
        self.settle(false).await;
    }

    /// The end of the run: the last lines, and the statement of the cut as it finally is.
    pub async fn finish(&mut self) {
        self.next_flush = far();
        if !self.buf.is_empty() {
            self.write().await;
        }
        self.settle(true).await;
    }

    async fn write(&mut self) {
        let key = self.store.chunk_key(&self.worker, self.run, self.seq);
        let payload = PutPayload::from(std::mem::take(&mut self.buf));
        match tokio::time::timeout(WRITE_TIMEOUT, self.store.store().put(&key, payload.clone())).await {
            Ok(Ok(_)) => {
                let written = Kept { seq: self.seq, bytes: payload.content_length() as u64, lines: self.buf_lines };
                self.seq += 1;
                self.buf_lines = 0;
                match &mut self.tail {
                    Some(tail) => tail.keep(written, self.cap.tail),
                    None => self.head_bytes += written.bytes,
                }
                self.settle(false).await;
            }
            failed => {
                if !self.warned {
                    let error = failed.map_or_else(
                        |_| "timed out".to_owned(),
                        |r| r.err().map(|e| self.store.explain(&e)).unwrap_or_default(),
                    );
                    tracing::warn!(%key, %error, "could not write the run's log to the object store; retrying with the next chunk");
                    self.warned = true;
                }
                // Lines wait for the store to come back, up to a bound; beyond it the oldest are dropped.
                if payload.content_length() < MAX_PENDING {
                    self.buf = payload.into_iter().flat_map(|b| b.to_vec()).collect();
                } else {
                    self.buf_lines = 0;
                }
                self.next_flush = Instant::now() + FLUSH_EVERY;
            }
        }
    }

    /// Writes the statement of the cut when it is stale and due (or `now`), then deletes the chunks it covers.
    /// The first statement is written before anything is deleted, so the log never lacks output silently.
    async fn settle(&mut self, now: bool) {
        let Some(tail) = &mut self.tail else { return };
        if tail.stale && (now || !tail.stated || Instant::now() >= tail.next_statement) {
            let at = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
            let line = cut_line(&at, tail.cut_bytes, tail.cut_lines, self.cap.max);
            let key = self.store.cut_key(&self.worker, self.run, tail.at);
            match tokio::time::timeout(WRITE_TIMEOUT, self.store.store().put(&key, PutPayload::from(line))).await {
                Ok(Ok(_)) => {
                    tail.stale = false;
                    tail.stated = true;
                    tail.next_statement = Instant::now() + FLUSH_EVERY;
                }
                failed if !self.warned => {
                    let error = failed.map_or_else(
                        |_| "timed out".to_owned(),
                        |r| r.err().map(|e| self.store.explain(&e)).unwrap_or_default(),
                    );
                    let message = "could not state the log's cut; the cut chunks stay until it is stated";
                    tracing::warn!(%key, %error, "{message}");
                    self.warned = true;
                }
                _ => {}
            }
        }
        if !tail.stated {
            return;
        }
        let mut failed = Vec::new();
        for seq in std::mem::take(&mut tail.doomed) {
            let key = self.store.chunk_key(&self.worker, self.run, seq);
            match tokio::time::timeout(WRITE_TIMEOUT, self.store.store().delete(&key)).await {
                Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => {}
                Ok(Err(e)) => {
                    if !self.warned {
                        let error = self.store.explain(&e);
                        tracing::warn!(%key, %error, "could not delete a chunk cut from the run's log; retrying");
                        self.warned = true;
                    }
                    failed.push(seq);
                }
                Err(_) => failed.push(seq),
            }
        }
        tail.doomed = failed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(seq: u32, bytes: u64) -> Kept {
        Kept { seq, bytes, lines: bytes / 10 }
    }

    #[test]
    fn the_tail_keeps_its_share_and_counts_what_falls_out() {
        let mut tail = Tail::new(3);
        for seq in 3..10 {
            tail.keep(kept(seq, 100), 250);
        }
        assert_eq!(tail.kept.iter().map(|k| k.seq).collect::<Vec<_>>(), [8, 9]);
        assert_eq!((tail.cut_bytes, tail.cut_lines, tail.doomed.clone()), (500, 50, vec![3, 4, 5, 6, 7]));
        tail.keep(kept(10, 1000), 250);
        assert_eq!(tail.kept.iter().map(|k| k.seq).collect::<Vec<_>>(), [10], "the newest chunk stays");
    }

    #[test]
    fn a_small_cap_writes_smaller_chunks() {
        assert_eq!(Cap::new(64 << 20).chunk, CHUNK_BYTES);
        assert_eq!(Cap::new(256 << 10).chunk, 32 << 10);
        assert_eq!(Cap::new(64 << 10).chunk, 8 << 10);
        let cap = Cap::new((64 << 10) + 1);
        assert_eq!(cap.head + cap.tail, cap.max);
    }
}
