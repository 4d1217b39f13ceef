-- Bulk actions (issue 28; see the PostgreSQL migration of the same name for the design). SQLite keeps UUIDs as
-- blobs, times as ISO-8601 text and JSON as text, as everywhere in this schema. A new job wakes the daemons
-- through the file watch, as every write does.
create table bulk_actions (
    id             blob primary key,
    action         text not null check (action in ('cancel', 'rerun', 'resume')),
    filter         text not null,
    snapshot_id    blob,
    snapshot_at    text,
    expect_count   integer not null,
    reason         text not null check (length(trim(reason)) > 0),
    requested_by   text not null,
    requested_at   text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    state          text not null default 'queued' check (state in ('queued', 'running', 'done', 'failed')),
    total          integer not null,
    done           integer not null default 0,
    skipped        integer not null default 0,
    failed         integer not null default 0,
    claimed_by     blob,
    lease_until    text,
    started_at     text,
    finished_at    text,
    error          text
);
create index bulk_actions_unfinished on bulk_actions (requested_at) where state in ('queued', 'running');
create index bulk_actions_newest on bulk_actions (requested_at desc, id desc);

create trigger bulk_actions_audit_kept before update of action, filter, expect_count, reason, requested_by,
    requested_at, snapshot_id, snapshot_at on bulk_actions
begin
    select raise(abort, 'what a bulk action asked, who asked and why are its audit record: they never change');
end;

create table bulk_action_runs (
    bulk_id       blob not null references bulk_actions (id) on delete cascade,
    seq           integer not null,
    run_id        blob not null,
    worker        text not null,
    leads         boolean not null,
    attempted_at  text,
    new_run_id    blob,
    outcome       text check (outcome in ('done', 'skipped', 'failed')),
    sentence      text,
    primary key (bulk_id, seq)
);
create index bulk_action_runs_pending on bulk_action_runs (bulk_id, seq) where outcome is null;
create index bulk_action_runs_leaders on bulk_action_runs (bulk_id, worker) where leads;
