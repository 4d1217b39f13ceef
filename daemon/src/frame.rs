//! The pipe protocol between the daemon and a run's supervisor, one line per message, so that both sides
//! stay simple and a person can read a captured exchange.
//!
//! Supervisor → daemon (its stdout): `P <pid>` once the worker started (its pid is also its process group),
//! `O <line>` / `E <line>` for each line the worker wrote on stdout / stderr, and a last `X <json>` with the
//! [`ExitReport`]. Daemon → supervisor (its stdin): `deadline <ns>` (an absolute `CLOCK_MONOTONIC` time before
//! which the lease was renewed), `cancel`, `terminate`, `kill` and `yield <grace ms>`. End of file on the supervisor's stdin means
//! the daemon is gone. A spare supervisor, started before its run was claimed, first reads one `start <json>`
//! line ([`Start`]): the run's worker command, environment and lease.

use std::io;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest worker line relayed whole; the rest of a longer line is dropped. Room for the largest
/// checkpoint (64 KiB of JSON) with its wrapping, so that one just over the limit is refused with a sentence.
pub const MAX_WORKER_LINE: usize = 128 * 1024;

/// Why the supervisor stopped the worker (first cause wins, except that fencing overrides everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// A person cancelled the run.
    Cancel,
    /// The daemon is shutting down.
    Terminate,
    /// The run took longer than its timeout.
    Timeout,
    /// The daemon lost the lease and asked for an immediate kill.
    Kill,
    /// The lease deadline passed without a renewal.
    Deadline,
    /// The daemon's pipe closed.
    DaemonGone,
    /// Asked to yield (SIGUSR1), the worker was still running when the request's grace ended.
    Yield,
}

impl StopCause {
    /// Whether this cause kills at once, without a grace period (the run is no longer ours).
    pub fn fences(self) -> bool {
        matches!(self, Self::Kill | Self::Deadline)
    }
}

/// How the worker ended, as the supervisor saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReport {
    /// The exit status, when the worker exited.
    pub code: Option<i32>,
    /// The signal that killed it, e.g. `SIGKILL`.
    pub signal: Option<String>,
    /// Why the supervisor stopped it, if it did.
    pub stopped_by: Option<StopCause>,
    /// Set when the worker could not be started.
    pub spawn_error: Option<String>,
    /// From the worker's start to its end.
    pub elapsed_ms: u64,
    /// Whether the worker was sent SIGUSR1, asked to yield (a request held until its first stdout line may never
    /// have been sent).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub yield_signalled: bool,
    /// What `getrusage(RUSAGE_CHILDREN)` said once the worker was waited for: the worker and the descendants it
    /// waited for (absent when the worker never ran, or from a supervisor that does not measure).
    #[serde(default)]
    pub rusage: Option<scrinalia_shared::usage::Rusage>,
}

/// A message from the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The worker started with this pid.
    Started(i32),
    /// A line of the worker's stdout.
    Stdout(String),
    /// A line of the worker's stderr.
    Stderr(String),
    /// The worker is gone; nothing follows.
    Exit(ExitReport),
}

impl Frame {
    /// The line that carries this frame (without the newline).
    pub fn encode(&self) -> String {
        match self {
            Self::Started(pid) => format!("P {pid}"),
            Self::Stdout(line) => format!("O {line}"),
            Self::Stderr(line) => format!("E {line}"),
            Self::Exit(report) => format!("X {}", serde_json::to_string(report).unwrap_or_else(|_| "{}".to_owned())),
        }
    }

    /// Parses a line written by [`Frame::encode`].
    pub fn decode(line: &str) -> Option<Self> {
        let (tag, rest) = line.split_at_checked(1)?;
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        match tag {
            "P" => rest.parse().ok().map(Self::Started),
            "O" => Some(Self::Stdout(rest.to_owned())),
            "E" => Some(Self::Stderr(rest.to_owned())),
            "X" => serde_json::from_str(rest).ok().map(Self::Exit),
            _ => None,
        }
    }
}

/// The longest `start` line a spare supervisor reads: the worker's arguments and environment (a resumed run's
/// checkpoint, up to 64 KiB of JSON, travels in the environment).
pub const MAX_START_LINE: usize = 1024 * 1024;

/// The run a spare supervisor is given: everything the arguments and the environment of a supervisor started for
/// the run would carry. Text only: a run whose command or environment is not UTF-8 starts a supervisor of its
/// own instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The run, for messages.
    pub run_id: uuid::Uuid,
    /// The first lease deadline (`CLOCK_MONOTONIC` ns).
    pub deadline_ns: u64,
    /// Between SIGTERM and SIGKILL.
    pub grace_ms: u64,
    /// The run's timeout.
    pub timeout_ms: u64,
    /// The worker's program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment, in order (a later variable wins).
    pub env: Vec<(String, String)>,
    /// The `cgroup.procs` files of the run's cgroup, which the worker is born in (none without limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup: Vec<String>,
    /// Those the supervisor returns to once the worker started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_home: Vec<String>,
}

impl Start {
    /// The line that carries it (without the newline).
    pub fn encode(&self) -> String {
        format!("start {}", serde_json::to_string(self).unwrap_or_default())
    }

    /// Parses a line written by [`Start::encode`].
    pub fn decode(line: &[u8]) -> Option<Self> {
        serde_json::from_slice(line.strip_prefix(b"start ")?).ok()
    }
}

/// A message from the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The lease was renewed: the worker may run until this `CLOCK_MONOTONIC` time (ns).
    Deadline(u64),
    /// Stop the worker gently (SIGTERM, grace, SIGKILL): a person cancelled it.
    Cancel,
    /// Stop the worker gently: the daemon shuts down.
    Terminate,
    /// Kill the worker's group now: the lease is lost.
    Kill,
    /// Ask the worker to yield (SIGUSR1 to the worker process, once it has printed a stdout line); still running
    /// this many ms after the request, it is stopped gently (SIGTERM, grace, SIGKILL).
    Yield {
        /// From the request to the gentle stop.
        grace_ms: u64,
    },
}

impl Control {
    /// The line that carries this message (without the newline).
    pub fn encode(self) -> String {
        match self {
            Self::Deadline(ns) => format!("deadline {ns}"),
            Self::Cancel => "cancel".to_owned(),
            Self::Terminate => "terminate".to_owned(),
            Self::Kill => "kill".to_owned(),
            Self::Yield { grace_ms } => format!("yield {grace_ms}"),
        }
    }

    /// Parses a line written by [`Control::encode`].
    pub fn decode(line: &str) -> Option<Self> {
        match line.trim().split_once(' ') {
            Some(("deadline", ns)) => ns.parse().ok().map(Self::Deadline),
            Some(("yield", ms)) => ms.parse().ok().map(|grace_ms| Self::Yield { grace_ms }),
            None => match line.trim() {
                "cancel" => Some(Self::Cancel),
                "terminate" => Some(Self::Terminate),
                "kill" => Some(Self::Kill),
                _ => None,
            },
            Some(_) => None,
        }
    }
}

/// Reads one line, appending it to `buf` (without its end of line) and keeping at most `max` bytes of it while
/// consuming the rest, so that a worker printing without newlines cannot exhaust memory. Returns `false` at the
/// end of input with nothing read. Cancel-safe: a line cut short by cancellation stays in `buf` and the next
/// call completes it, so the caller clears `buf` only after using a line.
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>, max: usize) -> io::Result<bool> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (chunk, complete) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = complete.unwrap_or(available.len());
        reader.consume(used);
        if complete.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let report = ExitReport { code: Some(3), stopped_by: Some(StopCause::Cancel), ..ExitReport::default() };
        for frame in [
            Frame::Started(42),
            Frame::Stdout("{\"progress\": {}}".into()),
            Frame::Stderr(String::new()),
            Frame::Exit(report),
        ] {
            assert_eq!(Frame::decode(&frame.encode()), Some(frame));
        }
        for control in [
            Control::Deadline(123_456_789),
            Control::Cancel,
            Control::Terminate,
            Control::Kill,
            Control::Yield { grace_ms: 30_000 },
        ] {
            assert_eq!(Control::decode(&control.encode()), Some(control));
        }
        assert_eq!(Control::decode("deadline soon"), None);
        assert_eq!((Control::decode("yield"), Control::decode("yield later")), (None, None));
        let yielded = ExitReport { code: Some(75), yield_signalled: true, ..ExitReport::default() };
        assert_eq!(Frame::decode(&Frame::Exit(yielded.clone()).encode()), Some(Frame::Exit(yielded)));
        let plain = Frame::Exit(ExitReport::default()).encode();
        assert!(!plain.contains("yield"), "an exit report without a yield says nothing of it: {plain}");
    }

    #[test]
    fn a_start_line_round_trips_on_one_line() {
        let start = Start {
            run_id: uuid::Uuid::nil(),
            deadline_ns: 42,
            grace_ms: 10_000,
            timeout_ms: 3_600_000,
            program: "/usr/bin/worker".into(),
            args: vec!["run".into(), "--note=a\nb".into()],
            env: vec![("SCRINALIA_CHECKPOINT".into(), "{\"done\": [\"doc-1\"]}\n".into())],
            cgroup: vec!["/sys/fs/cgroup/runs/0193/cgroup.procs".into()],
            cgroup_home: vec!["/sys/fs/cgroup/daemon/cgroup.procs".into()],
        };
        let line = start.encode();
        assert!(!line.contains('\n'), "a start line must stay one line: {line}");
        assert_eq!(Start::decode(line.as_bytes()), Some(start));
        assert_eq!(Start::decode(b"cancel"), None);
    }

    #[tokio::test]
    async fn long_lines_are_cut_not_buffered() {
        let input = format!("{}\nshort\r\nlast", "x".repeat(100));
        let mut reader = tokio::io::BufReader::with_capacity(8, input.as_bytes());
        let mut buf = Vec::new();
        for expected in [&b"xxxxxxxxxx"[..], b"short", b"last"] {
            assert!(read_line(&mut reader, &mut buf, 10).await.expect("read"));
            assert_eq!(buf, expected);
            buf.clear();
        }
        assert!(!read_line(&mut reader, &mut buf, 10).await.expect("read"));
    }
}
