//! The relays of a run's supervisor: two tasks that turn the worker's stdout and stderr lines into [`Frame`]s for
//! the daemon, the first also saying when the worker printed its first stdout line (from then on a worker that
//! declared `yield` handles SIGUSR1).

use std::time::Duration;

use tokio::{
    io::{AsyncRead, BufReader},
    sync::{mpsc, oneshot},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use crate::frame::{self, Frame, MAX_WORKER_LINE};

/// The two tasks that turn the worker's output into frames.
pub(super) struct Relays {
    tasks: JoinSet<()>,
    stop: CancellationToken,
}

impl Relays {
    /// The relays, and what says the worker printed its first stdout line.
    pub(super) fn start(
        stdout: Option<impl AsyncRead + Unpin + Send + 'static>,
        stderr: Option<impl AsyncRead + Unpin + Send + 'static>,
        out: &mpsc::Sender<String>,
    ) -> (Self, oneshot::Receiver<()>) {
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let (spoke, first_line) = oneshot::channel();
        if let Some(stdout) = stdout {
            tasks.spawn(relay(stdout, Frame::Stdout, out.clone(), stop.clone(), Some(spoke)));
        }
        if let Some(stderr) = stderr {
            tasks.spawn(relay(stderr, Frame::Stderr, out.clone(), stop.clone(), None));
        }
        (Self { tasks, stop }, first_line)
    }

    /// Waits for the worker's pipes to close; a descendant that escaped the group and holds them open is given
    /// up on after `wait`, but lines already read are still delivered.
    pub(super) async fn finish(mut self, wait: Duration) {
        let drained = tokio::time::timeout(wait, async { while self.tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            self.stop.cancel();
            while self.tasks.join_next().await.is_some() {}
        }
    }
}

async fn relay(
    reader: impl AsyncRead + Unpin,
    frame: fn(String) -> Frame,
    out: mpsc::Sender<String>,
    stop: CancellationToken,
    mut first_line: Option<oneshot::Sender<()>>,
) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        let more = tokio::select! {
            read = frame::read_line(&mut reader, &mut buf, MAX_WORKER_LINE) => matches!(read, Ok(true)),
            () = stop.cancelled() => false,
        };
        if !more {
            return;
        }
        let line = frame(String::from_utf8_lossy(&buf).into_owned()).encode();
        buf.clear();
        let _ = out.send(line).await;
        if let Some(spoke) = first_line.take() {
            let _ = spoke.send(());
        }
    }
}
