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
