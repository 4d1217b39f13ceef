-- The catalogue cannot drift from the workers' code: what each worker's `describe` last answered (the options,
-- engine defaults and presets its code declares), whether it has what it needs (`check`), the configuration a
-- run reported it really used, and the chores (describe, count, check) that daemons take turns doing, one daemon
-- at a time per worker and chore, under a lease on the database clock.

create table worker_descriptions (
    worker        text primary key,
    -- The last description that succeeded (a wire `Description`); kept when a later attempt fails.
    description   jsonb,
    described_at  timestamptz,
    described_by  uuid,
    -- The command that answered, as the describing daemon's catalogue has it.
    command       jsonb not null,
    took_ms       bigint not null,
    -- Why the last attempt failed; null when it succeeded.
    error         text,
    attempted_at  timestamptz not null default now()
);

create table worker_readiness (
    worker      text primary key,
    ready       boolean,
    reason      text,
    error       text,
    checked_at  timestamptz not null default now(),
    took_ms     bigint not null,
    checked_by  uuid
);

create table worker_chores (
    worker        text not null,
    chore         text not null check (chore in ('describe', 'count', 'check')),
    -- Asked for by an operator, by the end of a run (count) or by a daemon's start (describe); one start after
    -- the request answers every request made before it.
    requested_at  timestamptz,
    started_at    timestamptz,
    finished_at   timestamptz,
    lease_by      uuid,
    lease_until   timestamptz,
    primary key (worker, chore)
);

alter table worker_runs add column reported_config jsonb;

-- A worker's queue is counted again soon after one of its runs ends.
create function worker_runs_request_count() returns trigger language plpgsql as $$
begin
    update worker_chores set requested_at = now() where worker = new.worker and chore = 'count';
    return null;
end;
$$;
create trigger worker_runs_request_count after update of state on worker_runs
    for each row when (old.state in ('queued', 'running') and new.state not in ('queued', 'running'))
    execute function worker_runs_request_count();

-- Daemons hear of a chore asked for; the panel hears of a new description or readiness.
create function worker_chores_notify() returns trigger language plpgsql as $$
begin
    if new.requested_at is not null and (tg_op = 'INSERT' or new.requested_at is distinct from old.requested_at) then
        perform pg_notify('scrinalia_queue', json_build_object('kind', 'chore', 'worker', new.worker, 'chore', new.chore)::text);
    end if;
    return null;
end;
$$;
create trigger worker_chores_notify after insert or update of requested_at on worker_chores
    for each row execute function worker_chores_notify();

create function worker_facts_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('scrinalia_events', json_build_object('kind', 'worker', 'worker', new.worker)::text);
    return null;
end;
$$;
create trigger worker_descriptions_notify after insert or update on worker_descriptions
    for each row execute function worker_facts_notify();
create trigger worker_readiness_notify after insert or update on worker_readiness
    for each row execute function worker_facts_notify();
