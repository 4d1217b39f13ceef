-- no-transaction
-- The allowed values of `end_reason` and `follows_as` move from column CHECKs into triggers, so that the issue that
-- adds an end reason (`out_of_memory`, `stalled`, `preempted`, `expired`) or a way to follow a run replaces a
-- trigger instead of rebuilding `worker_runs`: SQLite cannot alter or drop a column's CHECK, only rebuild the table.
-- This is that rebuild, once, by SQLite's twelve steps (https://www.sqlite.org/lang_altertable.html#otheralter).
-- The table is otherwise the same: its columns in the same order with the same types, defaults and NOT NULLs,
-- the state's CHECK, every index and trigger under its old name and text, and the row ids of the runs.
-- tests/tests/suite/db_upgrade.rs compares the schema and the rows before and after; db_checks.rs the values.
--
-- Outside sqlx's transaction, because `foreign_keys` cannot be switched inside one, and it must be off: with it
-- on, dropping the old table would first delete every run and cascade to its progress, resources and webhook
-- events. The work is one transaction of its own, taken immediate (other processes' writes wait for it, in
-- proportion to the ledger, as for an index build), so that a failure changes nothing. Run again after a crash
-- between its commit and sqlx's record of it, it rebuilds the same table again.

pragma foreign_keys = off;

begin immediate;

create table worker_runs_rebuilt (
    id                  blob primary key,
    worker              text not null,
    state               text not null default 'queued'
                        check (state in ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    requested_by        text not null,
    requested_at        text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    arguments           text not null default '{}',
    config              text not null,
    claimed_by          blob,
    claimed_at          text,
    lease_expires_at    text,
    started_at          text,
    finished_at         text,
    duration_ms         integer,
    exit_code           integer,
    error               text,
    progress            text,
    result              text,
    cancel_requested_at text,
    cancel_requested_by text,
    trace_context       text,
    log_key             text,
    attempt             integer not null default 1,
    schedule_id         text,
    end_reason          text,
    reported_config     text,
    fire_at             text,
    retry_of            blob,
    not_before          text,
    pipeline_run_id     blob,
    pipeline_step       integer,
    checkpoint          text,
    checkpoint_at       text,
    follows             blob,
    follows_as          text
);

insert into worker_runs_rebuilt (rowid, id, worker, state, requested_by, requested_at, arguments, config, claimed_by,
    claimed_at, lease_expires_at, started_at, finished_at, duration_ms, exit_code, error, progress, result,
    cancel_requested_at, cancel_requested_by, trace_context, log_key, attempt, schedule_id, end_reason,
    reported_config, fire_at, retry_of, not_before, pipeline_run_id, pipeline_step, checkpoint, checkpoint_at,
    follows, follows_as)
select rowid, id, worker, state, requested_by, requested_at, arguments, config, claimed_by,
    claimed_at, lease_expires_at, started_at, finished_at, duration_ms, exit_code, error, progress, result,
    cancel_requested_at, cancel_requested_by, trace_context, log_key, attempt, schedule_id, end_reason,
    reported_config, fire_at, retry_of, not_before, pipeline_run_id, pipeline_step, checkpoint, checkpoint_at,
    follows, follows_as
from worker_runs;

-- Takes the old table's indexes and triggers with it; run_progress, run_resources and webhook_events keep naming
-- `worker_runs` in their foreign keys, which the renamed table then answers.
drop table worker_runs;
alter table worker_runs_rebuilt rename to worker_runs;

-- Every index and trigger of the old table, as its migration wrote it.
create unique index worker_runs_one_in_flight on worker_runs (worker) where state in ('queued', 'running');
create index worker_runs_queued on worker_runs (requested_at, id) where state = 'queued';
create index worker_runs_running_lease on worker_runs (lease_expires_at) where state = 'running';
create index worker_runs_ledger on worker_runs (requested_at desc, id desc);
create index worker_runs_worker_ledger on worker_runs (worker, requested_at desc, id desc);
create index worker_runs_last_finished on worker_runs (worker, finished_at desc) where finished_at is not null;
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
create index worker_runs_finished on worker_runs (finished_at) where finished_at is not null;
create trigger worker_runs_request_count after update of state on worker_runs
when old.state in ('queued', 'running') and new.state not in ('queued', 'running')
begin
    update worker_chores set requested_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
    where worker = new.worker and chore = 'count';
end;
create unique index worker_runs_one_per_fire on worker_runs (schedule_id, fire_at) where fire_at is not null;
create unique index worker_runs_one_retry on worker_runs (retry_of) where retry_of is not null;
create index worker_runs_pipeline on worker_runs (pipeline_run_id, requested_at) where pipeline_run_id is not null;
create index worker_runs_not_before on worker_runs (not_before) where state = 'queued' and not_before is not null;
create unique index worker_runs_one_continuation on worker_runs (follows)
    where follows_as in ('resume', 'restart');
create index worker_runs_follows on worker_runs (follows) where follows is not null;
create index worker_runs_state_ledger on worker_runs (state, requested_at desc, id desc);
create index worker_runs_worker_state_ledger on worker_runs (worker, state, requested_at desc, id desc);

-- The allowed values, exactly those of the CHECKs they replace (NULL passes, as it passed a CHECK). One trigger per
-- column and statement, named `worker_runs_<column>_known_on_<insert|update>`: a later migration that adds a value
-- drops and creates the two of its column (docs/architecture.md, "Adding an end reason"). Each sentence is one
-- literal, however long: older SQLite (Debian 12's `sqlite3` shell, 3.40, which backs the file up) reads nothing
-- else there, and could not open a file whose schema it cannot read.
create trigger worker_runs_end_reason_known_on_insert before insert on worker_runs
when new.end_reason not in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost')
begin
    select raise(abort, 'worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost');
end;
create trigger worker_runs_end_reason_known_on_update before update of end_reason on worker_runs
when new.end_reason not in ('exit_status', 'signal', 'spawn_failed', 'supervisor_lost', 'timeout', 'unknown_worker',
    'cancelled', 'daemon_shutdown', 'lease_lost', 'owner_lost')
begin
    select raise(abort, 'worker_runs.end_reason must be one of exit_status, signal, spawn_failed, supervisor_lost, timeout, unknown_worker, cancelled, daemon_shutdown, lease_lost, owner_lost');
end;
create trigger worker_runs_follows_as_known_on_insert before insert on worker_runs
when new.follows_as not in ('resume', 'restart', 'rerun')
begin
    select raise(abort, 'worker_runs.follows_as must be one of resume, restart, rerun');
end;
create trigger worker_runs_follows_as_known_on_update before update of follows_as on worker_runs
when new.follows_as not in ('resume', 'restart', 'rerun')
begin
    select raise(abort, 'worker_runs.follows_as must be one of resume, restart, rerun');
end;

-- Every reference to a run still finds it (the copy kept every id). Should one not (a row written while foreign
-- keys were off), the whole rebuild is rolled back and the migration fails with this sentence.
create temp table worker_runs_dangling (found integer not null);
create temp trigger worker_runs_dangling_refused before insert on worker_runs_dangling when new.found > 0
begin
    select raise(rollback, 'worker_runs was not rebuilt: rows of run_progress, run_resources or webhook_events name runs that do not exist (pragma foreign_key_check lists them); delete them and start again');
end;
insert into worker_runs_dangling select count(*) from pragma_foreign_key_check where "parent" = 'worker_runs';
drop table worker_runs_dangling;

commit;

pragma foreign_keys = on;
