-- no-transaction
-- Pause on repeated failure (issue 28); see the PostgreSQL migration for the reasons of each table.
--
-- `webhook_events` takes a new event kind, `paused`, and SQLite cannot change a column's CHECK: the table is
-- rebuilt by SQLite's twelve steps (https://www.sqlite.org/lang_altertable.html#otheralter), its kinds then checked
-- by triggers that the next kind replaces instead of rebuilding again. Outside sqlx's transaction, because
-- `foreign_keys` cannot be switched inside one and must be off (dropping the old table would otherwise delete
-- every delivery and attempt by cascade); the work is one transaction of its own, so a failure changes nothing.
-- The outbox is small: events are fanned out within hours, and retention prunes them with their runs.

pragma foreign_keys = off;

begin immediate;

create table worker_pauses (
    worker     text primary key,
    paused_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    paused_by  text not null,
    reason     text not null check (length(trim(reason)) > 0),
    automatic  integer not null default 0
);

create table worker_pause_audit (
    id         integer primary key autoincrement,
    worker     text not null,
    action     text not null check (action in ('pause', 'resume')),
    actor      text not null,
    at         text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    reason     text not null check (length(trim(reason)) > 0),
    automatic  integer not null default 0
);
create index worker_pause_audit_worker on worker_pause_audit (worker, id desc);
create trigger worker_pause_audit_no_update before update on worker_pause_audit
begin
    select raise(abort, 'the pause history is append-only');
end;
create trigger worker_pause_audit_no_delete before delete on worker_pause_audit
begin
    select raise(abort, 'the pause history is append-only');
end;

create table worker_failure_streaks (
    worker    text primary key,
    failures  integer not null default 0
);

alter table worker_overrides add column pause_after_failures integer;

create table webhook_events_rebuilt (
    id             blob primary key,
    kind           text not null,
    run_id         blob references worker_runs (id) on delete cascade,
    worker         text,
    payload        text not null,
    created_at     text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    fanned_out_at  text
);
insert into webhook_events_rebuilt (rowid, id, kind, run_id, worker, payload, created_at, fanned_out_at)
select rowid, id, kind, run_id, worker, payload, created_at, fanned_out_at from webhook_events;
drop table webhook_events;
alter table webhook_events_rebuilt rename to webhook_events;
create index webhook_events_unfanned on webhook_events (created_at) where fanned_out_at is null;
create index webhook_events_run on webhook_events (run_id) where run_id is not null;
create trigger webhook_events_kind_known_on_insert before insert on webhook_events
when new.kind not in ('failed', 'interrupted', 'recovered', 'test', 'paused')
begin
    select raise(abort, 'webhook_events.kind must be one of failed, interrupted, recovered, test, paused');
end;
create trigger webhook_events_kind_known_on_update before update of kind on webhook_events
when new.kind not in ('failed', 'interrupted', 'recovered', 'test', 'paused')
begin
    select raise(abort, 'webhook_events.kind must be one of failed, interrupted, recovered, test, paused');
end;

commit;

pragma foreign_keys = on;
