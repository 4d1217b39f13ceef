-- Who goes first (issue 27). A request carries a priority, 0 to 100, higher first (default 50), and may expire:
-- a queued request not claimed by `expires_at` ends `cancelled` with end reason `expired`. A preempted run (a
-- more urgent one needed its resource) ends `interrupted` with end reason `preempted`. The claim picks across
-- workers by priority, then oldest, then id: an index of queued rows in that order serves it.
alter table worker_runs add column priority smallint not null default 50;
alter table worker_runs add column expires_at timestamptz;
alter table worker_runs add constraint worker_runs_priority_range check (priority between 0 and 100) not valid;
create index worker_runs_queued_by_priority on worker_runs (priority desc, requested_at, id) where state = 'queued';
-- A preemption: when a more urgent run (`preempted_for`) waited long enough for a resource this run holds, any
-- daemon flags it (`preempt_requested_at`, once: the update is conditional) and the daemon holding it asks its
-- worker to yield. It ends `preempted` (or, its daemon dead mid-yield, `owner_lost`) and its resume is requested.
alter table worker_runs add column preempt_requested_at timestamptz;
alter table worker_runs add column preempted_for uuid;
-- The daemons' expiry sweep reads only the queued requests that may expire.
create index worker_runs_expiring on worker_runs (expires_at) where state = 'queued' and expires_at is not null;

-- Priority and expiry may be overridden per worker like the limits (audited, with a reason).
alter table worker_overrides add column priority bigint;
alter table worker_overrides add column expires_after_seconds bigint;

-- A resource may limit its starts per minute across all daemons: each claim of it is recorded here, under the
-- resource's lock, and the claim counts those of the last minute on the database clock. Rows older than a minute
-- are deleted by the claims themselves.
create table resource_starts (
    resource    text not null,
    started_at  timestamptz not null default now(),
    run_id      uuid not null
);
create index resource_starts_by_resource on resource_starts (resource, started_at);

alter table worker_runs drop constraint worker_runs_end_reason_known,
    add constraint worker_runs_end_reason_known
    check (end_reason in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
        'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost', 'out_of_memory', 'stalled', 'preempted',
        'expired')) not valid;
