-- Schedules, retries and pipelines. A schedule row holds its next fire time; the daemon that finds it due
-- (database clock) requests the run and advances the time in one transaction, and the run carries the
-- (schedule, fire time) under a unique index, so no code path can fire one twice. A retry is a new run linked to
-- the one before, not claimed before its backoff ends. A pipeline run records its steps; each step is an
-- ordinary run.

alter table worker_runs alter column schedule_id type uuid using schedule_id::uuid;
alter table worker_runs add column fire_at timestamptz;
alter table worker_runs add column retry_of uuid;
alter table worker_runs add column not_before timestamptz;
alter table worker_runs add column pipeline_run_id uuid;
alter table worker_runs add column pipeline_step integer;
create unique index worker_runs_one_per_fire on worker_runs (schedule_id, fire_at) where fire_at is not null;
create unique index worker_runs_one_retry on worker_runs (retry_of) where retry_of is not null;
create index worker_runs_pipeline on worker_runs (pipeline_run_id, requested_at) where pipeline_run_id is not null;
-- The daemons sleep until the first queued run whose backoff ends.
create index worker_runs_not_before on worker_runs (not_before) where state = 'queued' and not_before is not null;

alter table worker_overrides add column retry jsonb;

create table schedules (
    id               uuid primary key,
    name             text not null unique,
    target_kind      text not null check (target_kind in ('worker', 'pipeline')),
    target           text not null,
    cron             text not null,
    time_zone        text not null,
    arguments        jsonb not null default '{}'::jsonb,
    enabled          boolean not null default true,
    overlap          text not null default 'skip' check (overlap in ('skip', 'queue')),
    missed           text not null default 'skip' check (missed in ('skip', 'once')),
    next_fire_at     timestamptz,
    waiting_fire_at  timestamptz,
    created_by       text not null,
    created_at       timestamptz not null default now(),
    updated_by       text not null,
    updated_at       timestamptz not null default now()
);
create index schedules_due on schedules (next_fire_at) where enabled;
create index schedules_waiting on schedules (target_kind, target) where waiting_fire_at is not null;

-- Every fire, kept after its schedule is deleted.
create table schedule_fires (
    schedule_id      uuid not null,
    fire_at          timestamptz not null,
    outcome          text not null check (outcome in ('requested', 'skipped', 'missed', 'waiting')),
    run_id           uuid,
    pipeline_run_id  uuid,
    reason           text,
    blocked_by       uuid,
    fired_by         uuid,
    recorded_at      timestamptz not null default now(),
    primary key (schedule_id, fire_at)
);

create table schedule_audit (
    id           bigserial primary key,
    schedule_id  uuid not null,
    actor        text not null,
    at           timestamptz not null default now(),
    action       text not null check (action in ('create', 'change', 'pause', 'resume', 'delete')),
    before       jsonb,
    after        jsonb,
    reason       text not null check (length(trim(reason)) > 0)
);
create index schedule_audit_schedule on schedule_audit (schedule_id, id desc);

create function schedule_audit_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the schedule audit trail is append-only';
end;
$$;
create trigger schedule_audit_no_rewrite
    before update or delete on schedule_audit
    for each row execute function schedule_audit_append_only();

create table pipeline_runs (
    id                   uuid primary key,
    pipeline             text not null,
    state                text not null default 'running'
                         check (state in ('running', 'succeeded', 'failed', 'cancelled')),
    steps                jsonb not null,
    -- Each step's configuration, resolved when the pipeline run started (as a run's is when it is requested).
    configs              jsonb not null,
    step                 integer not null default 0,
    current_run          uuid,
    arguments            jsonb not null default '{}'::jsonb,
    requested_by         text not null,
    requested_at         timestamptz not null default now(),
    finished_at          timestamptz,
    error                text,
    schedule_id          uuid,
    fire_at              timestamptz,
    cancel_requested_at  timestamptz,
    cancel_requested_by  text
);
-- At most one run in flight per pipeline, across every process.
create unique index pipeline_runs_one_in_flight on pipeline_runs (pipeline) where state = 'running';
create unique index pipeline_runs_one_per_fire on pipeline_runs (schedule_id, fire_at) where fire_at is not null;
create index pipeline_runs_ledger on pipeline_runs (pipeline, requested_at desc);

-- Daemons hear of a run's end (to start what waited for its worker) and of a schedule's change (to sleep until
-- the right time); the panel hears of schedules and pipeline runs.
create or replace function worker_runs_notify() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'requested', 'run', new.id, 'worker', new.worker)::text);
    elsif new.cancel_requested_at is not null and old.cancel_requested_at is null and new.state = 'running' then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'cancel', 'run', new.id, 'worker', new.worker, 'daemon', new.claimed_by)::text);
    end if;
    if tg_op = 'UPDATE' and old.state in ('queued', 'running') and new.state not in ('queued', 'running') then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'ended', 'run', new.id, 'worker', new.worker)::text);
    end if;
    perform pg_notify('scrinalia_events', json_build_object('kind', 'run', 'run', new.id, 'worker', new.worker, 'state', new.state)::text);
    return null;
end;
$$;

create function schedules_notify() returns trigger language plpgsql as $$
declare
    row_id uuid := case when tg_op = 'DELETE' then old.id else new.id end;
begin
    perform pg_notify('scrinalia_queue', json_build_object('kind', 'schedule', 'schedule', row_id)::text);
    perform pg_notify('scrinalia_events', json_build_object('kind', 'schedule', 'schedule', row_id)::text);
    return null;
end;
$$;
create trigger schedules_notify after insert or update or delete on schedules
    for each row execute function schedules_notify();

create function pipeline_runs_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('scrinalia_events', json_build_object('kind', 'pipeline', 'pipeline_run', new.id, 'pipeline', new.pipeline, 'state', new.state)::text);
    return null;
end;
$$;
create trigger pipeline_runs_notify after insert or update on pipeline_runs
    for each row execute function pipeline_runs_notify();
