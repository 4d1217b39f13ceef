//! A run's output in the object store, written as numbered chunk objects about every second (or every 64 KiB)
//! so that the panel can read the log while the run goes on. Each line is
//! `<RFC 3339 time> <stdout|stderr> <text>`. A store that refuses a write costs the log, never the run.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use object_store::PutPayload;
use scrinalia_shared::logstore::LogStore;
use tokio::time::Instant;
use uuid::Uuid;

use crate::clock::far;

/// How often buffered lines are written out.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// A chunk is written as soon as it reaches this size.
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
    seq: u32,
    buf: Vec<u8>,
    warned: bool,
    pub(crate) next_flush: Instant,
}

impl RunLog {
    /// A log for `run`; nothing is written until the first line.
    pub fn new(store: LogStore, worker: &str, run: Uuid) -> Self {
        Self { store, worker: worker.to_owned(), run, seq: 0, buf: Vec::new(), warned: false, next_flush: far() }
    }

    /// The key prefix stored on the run (`log_key`).
    pub fn prefix(&self) -> String {
        self.store.run_prefix(&self.worker, self.run).to_string()
    }

    /// Buffers a line; returns `true` when the buffer is large enough to be written now.
    pub fn push(&mut self, stream: &str, line: &str) -> bool {
        if self.buf.is_empty() {
            self.next_flush = Instant::now() + FLUSH_EVERY;
        }
        let at = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
        self.buf.extend_from_slice(format!("{at} {stream} {line}\n").as_bytes());
        self.buf.len() >= CHUNK_BYTES
    }

    /// Writes the buffered lines as the next chunk.
    pub async fn flush(&mut self) {
        self.next_flush = far();
        if self.buf.is_empty() {
            return;
        }
        let key = self.store.chunk_key(&self.worker, self.run, self.seq);
        let payload = PutPayload::from(std::mem::take(&mut self.buf));
        match tokio::time::timeout(WRITE_TIMEOUT, self.store.store().put(&key, payload.clone())).await {
            Ok(Ok(_)) => self.seq += 1,
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
                }
                self.next_flush = Instant::now() + FLUSH_EVERY;
            }
        }
    }
}
