-- Why each run ended, typed beside the sentence in `error` (see the PostgreSQL migration of this version).
alter table worker_runs add column end_reason text check (end_reason in (
    'exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost'));

update worker_runs set end_reason = case
    when state = 'succeeded' then 'exit_status'
    when state = 'cancelled' then 'cancelled'
    when error like 'owner lost:%' then 'owner_lost'
    when error like 'lease lost:%' then 'lease_lost'
    when error = 'daemon shutdown' then 'daemon_shutdown'
    when state = 'interrupted' then 'owner_lost'
    when error like 'timed out after %' then 'timeout'
    when error like 'killed by signal %' then 'signal'
    when error like 'worker % is not in the catalogue%' then 'unknown_worker'
    when error like 'could not run the worker: the run''s supervisor ended without a report%' then 'supervisor_lost'
    when error like 'could not run the worker:%' or error like 'could not start the run''s supervisor%' then 'spawn_failed'
    else 'exit_status'
end
where state not in ('queued', 'running');

-- A run has an end reason exactly when it has ended. SQLite cannot add a table constraint to an existing table,
-- so triggers hold the rule; the update trigger fires only for statements that set the state or the reason.
create trigger worker_runs_end_reason_on_insert before insert on worker_runs
when (new.state in ('queued', 'running')) <> (new.end_reason is null)
begin
    select raise(abort, 'a run has an end reason exactly when it has ended');
end;
create trigger worker_runs_end_reason_on_update before update of state, end_reason on worker_runs
when (new.state in ('queued', 'running')) <> (new.end_reason is null)
begin
    select raise(abort, 'a run has an end reason exactly when it has ended');
end;

-- The change feed looks for the runs that ended since its last look.
create index worker_runs_finished on worker_runs (finished_at) where finished_at is not null;
