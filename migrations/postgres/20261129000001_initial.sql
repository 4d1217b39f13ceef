-- The run table is both the request queue and the ledger: a request is a row in state 'queued' and the same row
-- becomes the ledger entry. All times come from the database clock.

create table worker_runs (
    id                  uuid primary key,
    worker              text not null,
    state               text not null default 'queued'
                        check (state in ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    requested_by        text not null,
    requested_at        timestamptz not null default now(),
    arguments           jsonb not null default '{}'::jsonb,
    config              jsonb not null,
    claimed_by          uuid,
    claimed_at          timestamptz,
    lease_expires_at    timestamptz,
    started_at          timestamptz,
    finished_at         timestamptz,
    duration_ms         bigint,
    exit_code           integer,
    error               text,
    progress            jsonb,
    result              jsonb,
    cancel_requested_at timestamptz,
    cancel_requested_by text,
    trace_context       text,
    log_key             text,
    -- Room for retries and schedules (a later issue): the attempt number of this request and what created it.
    attempt             integer not null default 1,
    schedule_id         text
);

-- At most one run per worker in flight, across every API and daemon process.
create unique index worker_runs_one_in_flight on worker_runs (worker) where state in ('queued', 'running');
-- The claim path reads only queued rows, oldest first.
create index worker_runs_queued on worker_runs (requested_at, id) where state = 'queued';
-- Recovery reads only running rows by lease.
create index worker_runs_running_lease on worker_runs (lease_expires_at) where state = 'running';
-- The ledger, newest first, with or without a worker filter (keyset pagination on (requested_at, id)).
create index worker_runs_ledger on worker_runs (requested_at desc, id desc);
create index worker_runs_worker_ledger on worker_runs (worker, requested_at desc, id desc);

create table run_progress (
    run_id      uuid not null references worker_runs (id) on delete cascade,
    seq         integer not null,
    at          timestamptz not null default now(),
    progress    jsonb not null,
    primary key (run_id, seq)
);

create table worker_overrides (
    worker      text primary key,
    engine      text,
    preset      text,
    options     jsonb not null default '{}'::jsonb,
    updated_by  text not null,
    updated_at  timestamptz not null default now()
);

create table worker_override_audit (
    id          bigserial primary key,
    worker      text not null,
    actor       text not null,
    at          timestamptz not null default now(),
    action      text not null check (action in ('set', 'clear')),
    before      jsonb,
    after       jsonb,
    reason      text not null check (length(trim(reason)) > 0)
);
create index worker_override_audit_worker on worker_override_audit (worker, id desc);

-- The audit trail is append-only: the database refuses to rewrite history.
create function worker_override_audit_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the override audit trail is append-only';
end;
$$;
create trigger worker_override_audit_no_rewrite
    before update or delete on worker_override_audit
    for each row execute function worker_override_audit_append_only();

create table daemons (
    id                    uuid primary key,
    host                  text not null,
    pid                   integer not null,
    version               text not null,
    capacity              integer not null,
    workers               jsonb not null default '[]'::jsonb,
    started_at            timestamptz not null default now(),
    heartbeat_at          timestamptz not null default now(),
    drain_requested_at    timestamptz,
    drain_requested_by    text,
    stopped_at            timestamptz,
    state                 text not null default 'active' check (state in ('active', 'draining', 'gone'))
);
create index daemons_live on daemons (heartbeat_at) where state <> 'gone';

create table queue_counts (
    worker        text primary key,
    pending       bigint,
    unmeasurable  text,
    done          bigint,
    error         text,
    measured_at   timestamptz not null default now(),
    took_ms       bigint not null,
    measured_by   uuid
);

-- Wake-ups. Daemons listen on scrinalia_queue (new requests and cancellation requests); the API's live events
-- listen on scrinalia_events (every change of a run). The notification is sent by the same transaction as the
-- change, so a listener never hears of a row it cannot yet read.
create function worker_runs_notify() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'requested', 'run', new.id, 'worker', new.worker)::text);
    elsif new.cancel_requested_at is not null and old.cancel_requested_at is null and new.state = 'running' then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'cancel', 'run', new.id, 'worker', new.worker, 'daemon', new.claimed_by)::text);
    end if;
    perform pg_notify('scrinalia_events', json_build_object('kind', 'run', 'run', new.id, 'worker', new.worker, 'state', new.state)::text);
    return null;
end;
$$;
create trigger worker_runs_notify after insert or update on worker_runs
    for each row execute function worker_runs_notify();

create function queue_counts_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('scrinalia_events', json_build_object('kind', 'queue', 'worker', new.worker)::text);
    return null;
end;
$$;
create trigger queue_counts_notify after insert or update on queue_counts
    for each row execute function queue_counts_notify();

create function daemons_notify() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' or new.state is distinct from old.state or new.drain_requested_at is distinct from old.drain_requested_at then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'daemon', 'daemon', new.id)::text);
        perform pg_notify('scrinalia_events', json_build_object('kind', 'daemon', 'daemon', new.id, 'state', new.state)::text);
    end if;
    return null;
end;
$$;
create trigger daemons_notify after insert or update on daemons
    for each row execute function daemons_notify();

-- The worker view reads each worker's last finished run.
create index worker_runs_last_finished on worker_runs (worker, finished_at desc) where finished_at is not null;
