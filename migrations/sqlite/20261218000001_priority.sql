-- Who goes first (issue 27). A request carries a priority, 0 to 100, higher first (default 50), and may expire:
-- a queued request not claimed by `expires_at` ends `cancelled` with end reason `expired`. A preempted run (a
-- more urgent one needed its resource) ends `interrupted` with end reason `preempted`. The claim picks across
-- workers by priority, then oldest, then id: an index of queued rows in that order serves it.
alter table worker_runs add column priority integer not null default 50 check (priority between 0 and 100);
alter table worker_runs add column expires_at text;
create index worker_runs_queued_by_priority on worker_runs (priority desc, requested_at, id) where state = 'queued';
-- A preemption: when a more urgent run (`preempted_for`) waited long enough for a resource this run holds, any
-- daemon flags it (`preempt_requested_at`, once: the update is conditional) and the daemon holding it asks its
-- worker to yield. It ends `preempted` (or, its daemon dead mid-yield, `owner_lost`) and its resume is requested.
alter table worker_runs add column preempt_requested_at text;
alter table worker_runs add column preempted_for blob;
-- The daemons' expiry sweep reads only the queued requests that may expire.
create index worker_runs_expiring on worker_runs (expires_at) where state = 'queued' and expires_at is not null;

-- Priority and expiry may be overridden per worker like the limits (audited, with a reason).
alter table worker_overrides add column priority integer;
alter table worker_overrides add column expires_after_seconds integer;

-- A resource may limit its starts per minute across all daemons: each claim of it is recorded here and the claim
-- counts those of the last minute on the database clock. Rows older than a minute are deleted by the claims.
create table resource_starts (
    resource    text not null,
    started_at  text not null,
    run_id      blob not null
);
create index resource_starts_by_resource on resource_starts (resource, started_at);

-- Two end reasons (docs/architecture.md, "Adding an end reason"): `preempted` (`interrupted`) and `expired`
-- (`cancelled`).
drop trigger worker_runs_end_reason_known_on_insert;
create trigger worker_runs_end_reason_known_on_insert before insert on worker_runs
when new.end_reason not in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost', 'out_of_memory', 'stalled', 'preempted', 'expired')
begin
    select raise(abort, 'worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost, out_of_memory, stalled, preempted, expired');
end;
drop trigger worker_runs_end_reason_known_on_update;
create trigger worker_runs_end_reason_known_on_update before update of end_reason on worker_runs
when new.end_reason not in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost', 'out_of_memory', 'stalled', 'preempted', 'expired')
begin
    select raise(abort, 'worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost, out_of_memory, stalled, preempted, expired');
end;
