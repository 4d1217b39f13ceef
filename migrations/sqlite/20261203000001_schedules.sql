-- Schedules, retries and pipelines (see the PostgreSQL migration of the same name for the design). SQLite
-- keeps UUIDs as blobs and times as ISO-8601 text, as everywhere in this schema.

alter table worker_runs add column fire_at text;
alter table worker_runs add column retry_of blob;
alter table worker_runs add column not_before text;
alter table worker_runs add column pipeline_run_id blob;
alter table worker_runs add column pipeline_step integer;
create unique index worker_runs_one_per_fire on worker_runs (schedule_id, fire_at) where fire_at is not null;
create unique index worker_runs_one_retry on worker_runs (retry_of) where retry_of is not null;
create index worker_runs_pipeline on worker_runs (pipeline_run_id, requested_at) where pipeline_run_id is not null;
create index worker_runs_not_before on worker_runs (not_before) where state = 'queued' and not_before is not null;

alter table worker_overrides add column retry text;

create table schedules (
    id               blob primary key,
    name             text not null unique,
    target_kind      text not null check (target_kind in ('worker', 'pipeline')),
    target           text not null,
    cron             text not null,
    time_zone        text not null,
    arguments        text not null default '{}',
    enabled          boolean not null default true,
    overlap          text not null default 'skip' check (overlap in ('skip', 'queue')),
    missed           text not null default 'skip' check (missed in ('skip', 'once')),
    next_fire_at     text,
    waiting_fire_at  text,
    created_by       text not null,
    created_at       text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_by       text not null,
    updated_at       text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
create index schedules_due on schedules (next_fire_at) where enabled;
create index schedules_waiting on schedules (target_kind, target) where waiting_fire_at is not null;

create table schedule_fires (
    schedule_id      blob not null,
    fire_at          text not null,
    outcome          text not null check (outcome in ('requested', 'skipped', 'missed', 'waiting')),
    run_id           blob,
    pipeline_run_id  blob,
    reason           text,
    blocked_by       blob,
    fired_by         blob,
    recorded_at      text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (schedule_id, fire_at)
);

create table schedule_audit (
    id           integer primary key autoincrement,
    schedule_id  blob not null,
    actor        text not null,
    at           text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    action       text not null check (action in ('create', 'change', 'pause', 'resume', 'delete')),
    before       text,
    after        text,
    reason       text not null check (length(trim(reason)) > 0)
);
create index schedule_audit_schedule on schedule_audit (schedule_id, id desc);
create trigger schedule_audit_no_update before update on schedule_audit
begin
    select raise(abort, 'the schedule audit trail is append-only');
end;
create trigger schedule_audit_no_delete before delete on schedule_audit
begin
    select raise(abort, 'the schedule audit trail is append-only');
end;

create table pipeline_runs (
    id                   blob primary key,
    pipeline             text not null,
    state                text not null default 'running'
                         check (state in ('running', 'succeeded', 'failed', 'cancelled')),
    steps                text not null,
    -- Each step's configuration, resolved when the pipeline run started (as a run's is when it is requested).
    configs              text not null,
    step                 integer not null default 0,
    current_run          blob,
    arguments            text not null default '{}',
    requested_by         text not null,
    requested_at         text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at          text,
    error                text,
    schedule_id          blob,
    fire_at              text,
    cancel_requested_at  text,
    cancel_requested_by  text
);
create unique index pipeline_runs_one_in_flight on pipeline_runs (pipeline) where state = 'running';
create unique index pipeline_runs_one_per_fire on pipeline_runs (schedule_id, fire_at) where fire_at is not null;
create index pipeline_runs_ledger on pipeline_runs (pipeline, requested_at desc);
