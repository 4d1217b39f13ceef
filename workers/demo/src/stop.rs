//! Stopping cleanly on SIGTERM without `unsafe`: the signals are blocked in the main thread (and so in every
//! thread started after it), and one dedicated thread waits for them with `sigwait`, then wakes whoever sleeps.
//! A worker told to ignore SIGTERM blocks it and never waits for it, so it stays pending until SIGKILL.

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

/// Whether a stop was asked for, and a way to sleep that ends early when it is.
#[derive(Debug, Clone)]
pub struct Stop {
    state: Arc<(Mutex<Option<Signal>>, Condvar)>,
}

impl Stop {
    /// Stops on SIGTERM or SIGINT. Call it before any other thread is started.
    pub fn on_sigterm() -> anyhow::Result<Self> {
        Self::waiting_for(&[Signal::SIGTERM, Signal::SIGINT], &[])
    }

    /// Ignores SIGTERM (it stays blocked and pending; SIGKILL still ends the process) and stops on SIGINT.
    pub fn ignoring_sigterm() -> anyhow::Result<Self> {
        Self::waiting_for(&[Signal::SIGINT], &[Signal::SIGTERM])
    }

    fn waiting_for(stop_on: &[Signal], ignore: &[Signal]) -> anyhow::Result<Self> {
        let waited: SigSet = stop_on.iter().copied().collect();
        let blocked: SigSet = stop_on.iter().chain(ignore).copied().collect();
        blocked.thread_block().context("block the stop signals")?;
        let stop = Self { state: Arc::new((Mutex::new(None), Condvar::new())) };
        let waker = stop.clone();
        std::thread::Builder::new()
            .name("signals".to_owned())
            .spawn(move || {
                if let Ok(signal) = waited.wait() {
                    let (lock, wake) = &*waker.state;
                    *lock.lock().unwrap_or_else(PoisonError::into_inner) = Some(signal);
                    wake.notify_all();
                }
            })
            .context("start the signal thread")?;
        Ok(stop)
    }

    /// Never stops (for tests, which must not block the signals of the test process).
    #[cfg(test)]
    pub fn never() -> Self {
        Self { state: Arc::new((Mutex::new(None), Condvar::new())) }
    }

    /// The signal that asked for a stop, if one did.
    pub fn requested(&self) -> Option<Signal> {
        *self.state.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `duration`, or less if a stop is asked for; returns the stop signal, if any.
    pub fn sleep(&self, duration: Duration) -> Option<Signal> {
        let deadline = Instant::now() + duration;
        let (lock, wake) = &*self.state;
        let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now = Instant::now();
            if stopped.is_some() || now >= deadline {
                return *stopped;
            }
            stopped = wake.wait_timeout(stopped, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}
