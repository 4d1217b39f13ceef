-- Why each run ended, typed beside the sentence in `error`, so that programs (the panel, the tests, alerts) match
-- on the reason and never on the wording. The names are those of `EndReason` in wire/src/run.rs; each implies the
-- run's terminal state (`exit_status`: succeeded with status 0, failed otherwise).
alter table worker_runs add column end_reason text check (end_reason in (
    'exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost'));

-- Runs that ended before this version get the reason their sentence gave.
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

-- A run has an end reason exactly when it has ended.
alter table worker_runs add constraint worker_runs_end_reason_when_ended
    check ((state in ('queued', 'running')) = (end_reason is null));

-- Every notification is now a `Change` of wire/src/change.rs, which the API and the daemons decode: a daemon's
-- change says its state on both channels (the daemons' channel used to leave it out).
create or replace function daemons_notify() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' or new.state is distinct from old.state or new.drain_requested_at is distinct from old.drain_requested_at then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'daemon', 'daemon', new.id, 'state', new.state)::text);
        perform pg_notify('scrinalia_events', json_build_object('kind', 'daemon', 'daemon', new.id, 'state', new.state)::text);
    end if;
    return null;
end;
$$;
