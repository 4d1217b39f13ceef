//! Stopping cleanly on SIGTERM, and yielding on SIGUSR1, without `unsafe`: the signals are blocked in the main
//! thread (and so in every thread started after it), and one dedicated thread waits for them with `sigwait`,
//! then wakes whoever sleeps. A worker told to ignore SIGTERM blocks it and never waits for it, so it stays
//! pending until SIGKILL. SIGUSR1 asks for a yield (docs/worker-protocol.md, "Yielding"): the run goes on to
//! the end of its batch, checkpoints and exits 75, so it is not a stop and never cuts a sleep short.

use std::{
    sync::{Arc, Condvar, Mutex, PoisonError},
    time::{Duration, Instant},
};

use anyhow::Context;
use nix::sys::signal::{SigSet, Signal};

/// The exit status of a worker stopped by `signal`, as a shell would report it (143 for SIGTERM).
pub fn exit_status(signal: Signal) -> i32 {
    128 + signal as i32
}

/// What the signals asked for so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Asked {
    /// The signal that asked for a stop.
    stop: Option<Signal>,
    /// Whether SIGUSR1 asked for a yield.
    yields: bool,
}

impl Asked {
    /// Takes in `signal`; whether another signal may still matter (after a stop, none does).
    fn take(&mut self, signal: Signal) -> bool {
        if signal == Signal::SIGUSR1 {
            self.yields = true;
            return self.stop.is_none();
        }
        self.stop.get_or_insert(signal);
        false
    }
}

/// Whether a stop or a yield was asked for, and a way to sleep that ends early when a stop is.
#[derive(Debug, Clone)]
pub struct Stop {
    state: Arc<(Mutex<Asked>, Condvar)>,
}

impl Stop {
    /// Stops on SIGTERM or SIGINT, yields on SIGUSR1. Call it before any other thread is started.
    pub fn on_sigterm() -> anyhow::Result<Self> {
        Self::waiting_for(&[Signal::SIGTERM, Signal::SIGINT, Signal::SIGUSR1], &[])
    }

    /// Ignores SIGTERM (it stays blocked and pending; SIGKILL still ends the process), stops on SIGINT and yields
    /// on SIGUSR1.
    pub fn ignoring_sigterm() -> anyhow::Result<Self> {
        Self::waiting_for(&[Signal::SIGINT, Signal::SIGUSR1], &[Signal::SIGTERM])
    }

    fn waiting_for(waited_for: &[Signal], ignore: &[Signal]) -> anyhow::Result<Self> {
        let waited: SigSet = waited_for.iter().copied().collect();
        let blocked: SigSet = waited_for.iter().chain(ignore).copied().collect();
        blocked.thread_block().context("block the stop and yield signals")?;
        let stop = Self::unasked();
        let waker = stop.clone();
        std::thread::Builder::new()
            .name("signals".to_owned())
            .spawn(move || {
                while let Ok(signal) = waited.wait() {
                    let (lock, wake) = &*waker.state;
                    let more = lock.lock().unwrap_or_else(PoisonError::into_inner).take(signal);
                    wake.notify_all();
                    if !more {
                        return;
                    }
                }
            })
            .context("start the signal thread")?;
        Ok(stop)
    }

    fn unasked() -> Self {
        Self { state: Arc::new((Mutex::new(Asked::default()), Condvar::new())) }
    }

    /// Never stops (for tests, which must not block the signals of the test process).
    #[cfg(test)]
    pub fn never() -> Self {
        Self::unasked()
    }

    /// Never stops, and a yield is asked from the start (for tests, as [`Stop::never`]).
    #[cfg(test)]
    pub fn yielding() -> Self {
        let stop = Self::unasked();
        stop.state.0.lock().unwrap_or_else(PoisonError::into_inner).yields = true;
        stop
    }

    fn asked(&self) -> Asked {
        *self.state.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The signal that asked for a stop, if one did.
    pub fn requested(&self) -> Option<Signal> {
        self.asked().stop
    }

    /// Whether a yield was asked for (SIGUSR1): the run should stop at its next checkpoint.
    pub fn yield_requested(&self) -> bool {
        self.asked().yields
    }

    /// Sleeps for `duration`, or less if a stop is asked for; returns the stop signal, if any.
    pub fn sleep(&self, duration: Duration) -> Option<Signal> {
        let deadline = Instant::now() + duration;
        let (lock, wake) = &*self.state;
        let mut asked = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now = Instant::now();
            if asked.stop.is_some() || now >= deadline {
                return asked.stop;
            }
            asked = wake.wait_timeout(asked, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yield_is_not_a_stop_and_the_first_stop_wins() {
        let mut asked = Asked::default();
        assert!(asked.take(Signal::SIGUSR1), "signals still matter after a yield");
        assert_eq!(asked, Asked { stop: None, yields: true });
        assert!(asked.take(Signal::SIGUSR1), "a second yield changes nothing");
        assert!(!asked.take(Signal::SIGTERM), "nothing matters after a stop");
        assert_eq!(asked, Asked { stop: Some(Signal::SIGTERM), yields: true });
        asked.take(Signal::SIGINT);
        assert_eq!(asked.stop, Some(Signal::SIGTERM));
    }

    #[test]
    fn a_yield_does_not_cut_a_sleep_short() {
        let stop = Stop::yielding();
        assert!(stop.yield_requested());
        let started = Instant::now();
        assert_eq!(stop.sleep(Duration::from_millis(20)), None);
        assert!(started.elapsed() >= Duration::from_millis(20), "a batch goes on to its end when asked to yield");
        assert!(!Stop::never().yield_requested());
    }
}
