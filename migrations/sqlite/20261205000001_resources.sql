-- Shared resources (see the PostgreSQL migration of the same name for the design). SQLite serialises writers,
-- so a claim's count and insert cannot interleave with another daemon's.

create table run_resources (
    run_id      blob not null references worker_runs (id) on delete cascade,
    resource    text not null,
    held_since  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    primary key (run_id, resource)
);
create index run_resources_by_resource on run_resources (resource);
