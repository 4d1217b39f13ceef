//! Talking to systemd (`Type=notify`): READY=1 once the database is reachable and migrated, STATUS= with what
//! the daemon is doing, WATCHDOG=1 from the main loop (so a stuck loop stops petting the watchdog), STOPPING=1
//! when shutdown begins. Silent when `NOTIFY_SOCKET` is not set.

use std::time::Duration;

use sd_notify::NotifyState;

/// The daemon's link to the service manager.
#[derive(Debug, Clone)]
pub struct Notifier {
    enabled: bool,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (the watchdog applies when `WATCHDOG_PID` is
    /// unset or names this process, as `sd_watchdog_enabled(3)` says).
    pub fn from_env() -> Self {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some();
        let ours = std::env::var("WATCHDOG_PID").map_or(true, |pid| pid.trim() == std::process::id().to_string());
        let usec = std::env::var("WATCHDOG_USEC").ok().and_then(|u| u.trim().parse::<u64>().ok()).filter(|&u| u > 0);
        Self { enabled, watchdog: usec.filter(|_| ours && enabled).map(Duration::from_micros) }
    }

    /// How often to send WATCHDOG=1 (half the watchdog period), if a watchdog is set.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog.map(|period| period / 2)
    }

    /// READY=1 with a first status.
    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// STATUS=….
    pub fn status(&self, status: &str) {
        self.send(&[NotifyState::Status(status)]);
    }

    /// WATCHDOG=1.
    pub fn watchdog(&self) {
        self.send(&[NotifyState::Watchdog]);
    }

    /// STOPPING=1 with a status.
    pub fn stopping(&self, status: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        if self.enabled
            && let Err(e) = sd_notify::notify(false, states)
        {
            tracing::debug!(error = %e, "could not notify systemd");
        }
    }
}
