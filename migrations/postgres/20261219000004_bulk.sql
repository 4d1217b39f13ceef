-- Bulk actions (issue 28): one operator action (cancel, rerun, resume) on every run a ledger filter matched at
-- or before a snapshot (the newest matching run when the caller looked), stored as a job the daemons work
-- through in batches. The row is also the action's audit record: who, when, the filter, the count confirmed,
-- the reason; those never change once written. Its runs are listed in `bulk_action_runs` when it is stored, so
-- the set it acts on is fixed, and each gets one outcome with a sentence.
create table bulk_actions (
    id             uuid primary key,
    action         text not null check (action in ('cancel', 'rerun', 'resume')),
    filter         jsonb not null,
    snapshot_id    uuid,
    snapshot_at    timestamptz,
    expect_count   bigint not null,
    reason         text not null check (length(trim(reason)) > 0),
    requested_by   text not null,
    requested_at   timestamptz not null default now(),
    state          text not null default 'queued' check (state in ('queued', 'running', 'done', 'failed')),
    total          bigint not null,
    done           bigint not null default 0,
    skipped        bigint not null default 0,
    failed         bigint not null default 0,
    -- The daemon working it, under a lease on the database clock: another takes it over when the lease ran out.
    claimed_by     uuid,
    lease_until    timestamptz,
    started_at     timestamptz,
    finished_at    timestamptz,
    error          text
);
create index bulk_actions_unfinished on bulk_actions (requested_at) where state in ('queued', 'running');
create index bulk_actions_newest on bulk_actions (requested_at desc, id desc);

create function bulk_actions_audit_kept() returns trigger language plpgsql as $$
begin
    if new.action is distinct from old.action or new.filter is distinct from old.filter
        or new.expect_count is distinct from old.expect_count or new.reason is distinct from old.reason
        or new.requested_by is distinct from old.requested_by or new.requested_at is distinct from old.requested_at
        or new.snapshot_id is distinct from old.snapshot_id or new.snapshot_at is distinct from old.snapshot_at then
        raise exception 'what a bulk action asked, who asked and why are its audit record: they never change';
    end if;
    return new;
end $$;
create trigger bulk_actions_audit_kept before update on bulk_actions
    for each row execute function bulk_actions_audit_kept();

-- A new job wakes the daemons.
create function bulk_actions_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('scrinalia_queue', json_build_object('kind', 'bulk', 'bulk', new.id)::text);
    return new;
end $$;
create trigger bulk_actions_notify after insert on bulk_actions
    for each row execute function bulk_actions_notify();

-- The runs of a job, newest first (`seq` 0, 1, …). `leads`: the run the action is tried on for its worker (a
-- rerun or resume makes at most one run per worker: its newest matching run; every run of a cancel leads).
-- `attempted_at`: a daemon began acting on it (a daemon that takes the job over knows the action may be done
-- already); `new_run_id`: the id the rerun or resume is requested with, chosen before it is, so that the
-- primary key of worker_runs makes it at most once whichever daemon tries.
create table bulk_action_runs (
    bulk_id       uuid not null references bulk_actions (id) on delete cascade,
    seq           bigint not null,
    run_id        uuid not null,
    worker        text not null,
    leads         boolean not null,
    attempted_at  timestamptz,
    new_run_id    uuid,
    outcome       text check (outcome in ('done', 'skipped', 'failed')),
    sentence      text,
    primary key (bulk_id, seq)
);
create index bulk_action_runs_pending on bulk_action_runs (bulk_id, seq) where outcome is null;
create index bulk_action_runs_leaders on bulk_action_runs (bulk_id, worker) where leads;
