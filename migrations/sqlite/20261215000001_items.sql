-- Items: what happened to each document of a run. See the PostgreSQL migration of this version for the reasons;
-- the tables are the same, with SQLite's types (UUIDs as 16-byte blobs, times as ISO-8601 text in UTC).

create table run_item_batches (
    run_id      blob not null references worker_runs (id) on delete cascade,
    seq         integer not null,
    lines       integer not null,
    written_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (run_id, seq)
);

create table run_items (
    run_id   blob not null references worker_runs (id) on delete cascade,
    item_id  text not null,
    outcome  text not null check (outcome in ('succeeded', 'failed', 'skipped')),
    class    text,
    error    text,
    primary key (run_id, item_id)
);
create index run_items_by_outcome on run_items (run_id, outcome, item_id);

create table run_item_counts (
    run_id   blob not null references worker_runs (id) on delete cascade,
    outcome  text not null check (outcome in ('succeeded', 'failed', 'skipped', 'refused', 'cut')),
    class    text not null default '',
    count    integer not null,
    primary key (run_id, outcome, class)
);

-- Quarantine streaks, their releases, and the scope of a rerun of a run's failures: see the PostgreSQL migration.
create table item_streaks (
    worker          text not null,
    item_id         text not null,
    failures        integer not null,
    last_run        blob not null,
    last_failed_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    run_1 blob, class_1 text, error_1 text,
    run_2 blob, class_2 text, error_2 text,
    run_3 blob, class_3 text, error_3 text,
    primary key (worker, item_id)
);
create index item_streaks_by_failures on item_streaks (worker, failures);

create table quarantine_releases (
    id          integer primary key autoincrement,
    worker      text not null,
    item_id     text,
    released    integer not null,
    actor       text not null,
    reason      text not null,
    at          text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
create index quarantine_releases_by_worker on quarantine_releases (worker, id desc);

create table run_scopes (
    run_id   blob not null references worker_runs (id) on delete cascade,
    item_id  text not null,
    primary key (run_id, item_id)
);

drop trigger worker_runs_follows_as_known_on_insert;
drop trigger worker_runs_follows_as_known_on_update;
create trigger worker_runs_follows_as_known_on_insert before insert on worker_runs
when new.follows_as not in ('resume', 'restart', 'rerun', 'rerun_failed')
begin
    select raise(abort, 'worker_runs.follows_as must be one of resume, restart, rerun, rerun_failed');
end;
create trigger worker_runs_follows_as_known_on_update before update of follows_as on worker_runs
when new.follows_as not in ('resume', 'restart', 'rerun', 'rerun_failed')
begin
    select raise(abort, 'worker_runs.follows_as must be one of resume, restart, rerun, rerun_failed');
end;
