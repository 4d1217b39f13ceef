//! What a probe costs, on request, so that tests can hold the recorded usage against it: `burn_cpu_ms` of CPU in
//! a grandchild process (the probe starts a shell that starts `scrinalia-demo-worker burn-cpu MS`, and waits for
//! it), `allocate_mb` of memory touched page by page and held to the end, and with `report_usage` the worker's own
//! `usage` lines: a first one, one the daemon refuses, and a last, cumulative one that wins.

use std::process::Command;

use anyhow::Context as _;
use nix::time::{ClockId, clock_gettime};
use serde_json::json;

use crate::protocol::Protocol;

/// The hidden verb of `scrinalia-demo-worker burn-cpu MS`: spins until this process has used `MS` of CPU.
pub const BURN_CPU: &str = "burn-cpu";

/// Spins until the process has used `ms` more milliseconds of CPU.
pub fn burn_cpu(ms: u64) -> anyhow::Result<()> {
    let used = || -> anyhow::Result<u64> {
        let t = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).context("read the process's CPU clock")?;
        Ok(u64::try_from(t.tv_sec()).unwrap_or(0) * 1000 + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000_000)
    };
    let (start, mut x) = (used()?, 1u64);
    while used()? < start + ms {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    Ok(())
}

/// Burns `ms` of CPU in a grandchild: a shell (which does not `exec` its last command, as `; exit` follows it)
/// runs this binary's `burn-cpu`; both are waited for.
pub fn burn_in_grandchild(ms: u64) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("find the demo worker's own binary")?;
    let status = Command::new("sh")
        .args(["-c", "\"$0\" burn-cpu \"$1\"; exit $?"])
        .arg(&me)
        .arg(ms.to_string())
        .status()
        .context("start the shell that burns CPU")?;
    anyhow::ensure!(status.success(), "the grandchild that burns CPU ended with {status}");
    Ok(())
}

/// Allocates `mb` MiB and touches every page, so that it is resident; the caller holds it.
pub fn allocate(mb: u64) -> Vec<u8> {
    let size = usize::try_from(mb).unwrap_or(0) * 1024 * 1024;
    let mut held = vec![0u8; size];
    for page in held.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&held);
    held
}

/// Prints the probe's usage lines: a first one, one with an unknown key (refused), and the last one.
pub fn report(out: &mut Protocol) -> anyhow::Result<()> {
    out.object(&json!({ "usage": { "tokens_in": 600, "tokens_out": 150 } }))?;
    out.object(&json!({ "usage": { "tokens": 5 } }))?;
    out.object(&json!({ "usage": { "tokens_in": 1200, "tokens_out": 300, "cost": 0.0042, "currency": "EUR" } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burning_uses_at_least_the_cpu_asked_for() {
        let before = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("clock");
        burn_cpu(30).expect("burns");
        let after = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("clock");
        let spent = (after.tv_sec() - before.tv_sec()) * 1000 + (after.tv_nsec() - before.tv_nsec()) / 1_000_000;
        assert!(spent >= 20, "spent {spent} ms");
    }

    #[test]
    fn allocated_memory_has_the_size_asked_for() {
        assert_eq!(allocate(2).len(), 2 * 1024 * 1024);
    }
}
