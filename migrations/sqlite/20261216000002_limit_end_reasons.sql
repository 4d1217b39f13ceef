-- Two end reasons of limits and the watchdog (docs/architecture.md, "Adding an end reason"): `out_of_memory`, a
-- worker killed by its memory limit (`failed`), and `stalled`, a worker stopped because it reported nothing for
-- its `stall_seconds` (`interrupted`, resumable). The triggers that check the value are made again with the
-- longer list.
drop trigger worker_runs_end_reason_known_on_insert;
create trigger worker_runs_end_reason_known_on_insert before insert on worker_runs
when new.end_reason not in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost', 'out_of_memory', 'stalled')
begin
    select raise(abort, 'worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost, out_of_memory, stalled');
end;
drop trigger worker_runs_end_reason_known_on_update;
create trigger worker_runs_end_reason_known_on_update before update of end_reason on worker_runs
when new.end_reason not in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost', 'out_of_memory', 'stalled')
begin
    select raise(abort, 'worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost, out_of_memory, stalled');
end;
