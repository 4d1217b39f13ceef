//! The daemon slots of the chaos suite and the faults done to them: SIGKILL (restarted later), SIGSTOP past the
//! lease (then SIGCONT), SIGTERM and a drain through the API (each replaced once it has exited), every fault
//! recorded with its time on `CLOCK_REALTIME`, comparable with the database clock and the probes' records.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use rand::{Rng, seq::IndexedRandom};
use reqwest::Method;
use uuid::Uuid;

use super::{Apis, DAEMONS, tail};
use crate::{
    Process,
    api_harness::ADMIN,
    daemon_harness::{Setup, realtime_ns},
};

/// What the suite did to a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL.
    Kill,
    /// SIGSTOP for longer than the lease, then SIGCONT.
    Stop,
    /// SIGTERM (it drains for `drain_seconds`, then interrupts its runs and exits).
    Terminate,
    /// `POST /api/daemons/{id}/drain` (it finishes its runs, then exits).
    Drain,
}

/// One fault, at `CLOCK_REALTIME` ns (comparable with the database clock and the probes' records).
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// What.
    pub kind: FaultKind,
    /// To which daemon (its registry id).
    pub daemon: Uuid,
    /// When.
    pub at_ns: i128,
}

/// Where a daemon slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Running (its id is known once the registry lists its pid).
    Up,
    /// SIGSTOPped until then.
    Frozen(Instant),
    /// SIGKILLed; a new daemon starts then.
    Dead(Instant),
    /// SIGTERMed or drained since then; replaced once it exits.
    Leaving(Instant),
}

/// One of the daemon slots.
pub struct Slot {
    /// The daemon, when one is running (or frozen, or leaving).
    pub process: Option<Process>,
    /// Its registry id, once known.
    pub id: Option<Uuid>,
    /// Where it is.
    pub phase: Phase,
}

/// The daemons, the faults done to them and what went wrong with them.
pub struct Fleet {
    /// The slots.
    pub slots: Vec<Slot>,
    /// Every fault, in order.
    pub faults: Vec<Fault>,
    /// Daemons started so far.
    pub started: usize,
    /// Unexpected exits, failed stops, daemons that did not leave.
    pub problems: Vec<String>,
}

impl Fleet {
    /// Starts `DAEMONS` daemons.
    pub fn start(setup: &Setup) -> Self {
        let mut fleet = Self { slots: Vec::new(), faults: Vec::new(), started: 0, problems: Vec::new() };
        for _ in 0..DAEMONS {
            let process = fleet.spawn(setup);
            fleet.slots.push(Slot { process: Some(process), id: None, phase: Phase::Up });
        }
        fleet
    }

    fn spawn(&mut self, setup: &Setup) -> Process {
        self.started += 1;
        setup.start_daemon(&format!("daemon-{:02}", self.started), &[])
    }

    fn replace(&mut self, setup: &Setup, i: usize) {
        let process = self.spawn(setup);
        self.slots[i] = Slot { process: Some(process), id: None, phase: Phase::Up };
    }

    /// Learns the registry ids of running daemons from `GET /api/daemons` (matching pids).
    pub async fn identify(&mut self, apis: &Apis, api: usize) {
        if !self.slots.iter().any(|s| s.id.is_none() && s.phase == Phase::Up) {
            return;
        }
        let listed = apis.daemons(api).await;
        let known: HashSet<Uuid> = self.slots.iter().filter_map(|s| s.id).collect();
        for slot in self.slots.iter_mut().filter(|s| s.id.is_none() && s.phase == Phase::Up) {
            let Some(pid) = slot.process.as_ref().and_then(|p| p.child.id()) else { continue };
            slot.id = listed
                .iter()
                .filter(|d| d["pid"].as_i64() == Some(i64::from(pid)) && d["state"] == "active")
                .filter_map(|d| d["id"].as_str().and_then(|s| Uuid::parse_str(s).ok()))
                .find(|id| !known.contains(id));
        }
    }

    /// Thaws, restarts and replaces daemons whose time has come; notices daemons that exited by themselves.
    pub fn tick(&mut self, setup: &Setup) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            match self.slots[i].phase {
                Phase::Frozen(until) if until <= now => {
                    if let Some(p) = &self.slots[i].process {
                        p.signal(Signal::SIGCONT);
                    }
                    self.slots[i].phase = Phase::Up;
                }
                Phase::Dead(until) if until <= now => self.replace(setup, i),
                Phase::Leaving(since) => {
                    let Some(process) = self.slots[i].process.as_mut() else { continue };
                    match process.child.try_wait() {
                        Ok(Some(status)) => {
                            if !status.success() {
                                let tail = tail(&process.output());
                                self.problems
                                    .push(format!("{} exited with {status} when stopped:\n{tail}", process.name));
                            }
                            self.replace(setup, i);
                        }
                        _ if since.elapsed() > Duration::from_secs(40) => {
                            let tail = tail(&process.output());
                            self.problems
                                .push(format!("{} did not exit 40 s after SIGTERM or drain:\n{tail}", process.name));
                            process.signal(Signal::SIGKILL);
                            self.replace(setup, i);
                        }
                        _ => {}
                    }
                }
                Phase::Up => {
                    let Some(process) = self.slots[i].process.as_mut() else { continue };
                    if let Ok(Some(status)) = process.child.try_wait() {
                        let tail = tail(&process.output());
                        self.problems.push(format!("{} exited by itself with {status}:\n{tail}", process.name));
                        self.replace(setup, i);
                    }
                }
                Phase::Frozen(_) | Phase::Dead(_) => {}
            }
        }
    }

    /// The slots that are up with a known id: the only ones the suite faults.
    pub fn eligible(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.slots[i].phase == Phase::Up && self.slots[i].id.is_some()).collect()
    }

    /// Picks the target of a fault among the eligible slots, favouring daemons that hold runs (as
    /// `GET /api/daemons` says), so that most faults have something to interrupt.
    pub async fn pick(&self, apis: &Apis, api: usize, rng: &mut impl Rng) -> Option<usize> {
        let listed = apis.daemons(api).await;
        let held = |i: usize| {
            let id = self.slots[i].id.map(|id| id.to_string());
            listed.iter().find(|d| d["id"].as_str() == id.as_deref()).and_then(|d| d["runs_in_flight"].as_u64())
        };
        self.eligible().choose_weighted(rng, |&i| 1 + 3 * held(i).unwrap_or(0)).ok().copied()
    }

    fn record(&mut self, i: usize, kind: FaultKind) {
        let daemon = self.slots[i].id.expect("only identified daemons are faulted");
        self.faults.push(Fault { kind, daemon, at_ns: realtime_ns() });
    }

    /// SIGKILL; a new daemon starts after `restart_after`.
    pub async fn kill(&mut self, i: usize, restart_after: Duration) {
        let Some(mut process) = self.slots[i].process.take() else { return };
        process.signal(Signal::SIGKILL);
        self.record(i, FaultKind::Kill);
        let _ = process.wait(Duration::from_secs(10)).await;
        self.slots[i].phase = Phase::Dead(Instant::now() + restart_after);
    }

    /// SIGSTOP for `frozen_for`, then SIGCONT.
    pub fn stop(&mut self, i: usize, frozen_for: Duration) {
        let Some(process) = &self.slots[i].process else { return };
        process.signal(Signal::SIGSTOP);
        self.record(i, FaultKind::Stop);
        self.slots[i].phase = Phase::Frozen(Instant::now() + frozen_for);
    }

    /// SIGTERM; replaced once it has exited.
    pub fn terminate(&mut self, i: usize) {
        let Some(process) = &self.slots[i].process else { return };
        process.signal(Signal::SIGTERM);
        self.record(i, FaultKind::Terminate);
        self.slots[i].phase = Phase::Leaving(Instant::now());
    }

    /// Drains the daemon through API process `api`; replaced once it has exited. Returns the status.
    pub async fn drain(&mut self, i: usize, apis: &Apis, api: usize) -> Option<u16> {
        let id = self.slots[i].id?;
        let at_ns = realtime_ns();
        let (status, _) = apis.call(api, Method::POST, &format!("/api/daemons/{id}/drain"), ADMIN, None).await;
        if status == Some(202) {
            self.faults.push(Fault { kind: FaultKind::Drain, daemon: id, at_ns });
            self.slots[i].phase = Phase::Leaving(Instant::now());
        }
        status
    }

    /// Thaws and restarts every daemon at once and waits (at most `timeout`) until `DAEMONS` daemons are up and
    /// identified.
    pub async fn settle(&mut self, setup: &Setup, apis: &Apis, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            for slot in &mut self.slots {
                if let Phase::Frozen(_) | Phase::Dead(_) = slot.phase {
                    slot.phase = match slot.phase {
                        Phase::Frozen(_) => Phase::Frozen(now),
                        _ => Phase::Dead(now),
                    };
                }
            }
            self.tick(setup);
            self.identify(apis, 0).await;
            if self.slots.iter().all(|s| s.phase == Phase::Up && s.id.is_some()) {
                return;
            }
            if now > deadline {
                self.problems.push(format!("the daemons were not all up {timeout:?} after the faults stopped"));
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM to every daemon; each must exit 0.
    pub async fn shutdown(&mut self) {
        for slot in &mut self.slots {
            if let Some(process) = &slot.process {
                process.signal(Signal::SIGCONT);
                process.signal(Signal::SIGTERM);
            }
        }
        for slot in &mut self.slots {
            if let Some(process) = slot.process.as_mut() {
                let code = process.wait(Duration::from_secs(30)).await;
                if code != Some(0) {
                    let tail = tail(&process.output());
                    self.problems.push(format!("{} exited with {code:?} on SIGTERM at the end:\n{tail}", process.name));
                }
            }
        }
    }
}
