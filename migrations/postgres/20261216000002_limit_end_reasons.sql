-- Two end reasons of limits and the watchdog (docs/architecture.md, "Adding an end reason"): `out_of_memory`, a
-- worker killed by its memory limit (`failed`), and `stalled`, a worker stopped because it reported nothing for
-- its `stall_seconds` (`interrupted`, resumable). Added `not valid`, so that it takes an instant; validated by the
-- next migration, outside this transaction.
alter table worker_runs drop constraint worker_runs_end_reason_known,
    add constraint worker_runs_end_reason_known
    check (end_reason in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
        'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost', 'out_of_memory', 'stalled')) not valid;
