-- Shared resources: a run of a worker that holds resources (the catalogue's `[[resources]]`, e.g. one model
-- server) has one row here per resource from its claim to its end. A claim counts the holders of each resource
-- under a transaction-scoped advisory lock per resource (taken in name order), so two daemons can never both
-- take the last slot; every end of a run (a daemon's finish, a cancel, recovery) deletes its rows in the same
-- transaction that ends it.

create table run_resources (
    run_id      uuid not null references worker_runs (id) on delete cascade,
    resource    text not null,
    held_since  timestamptz not null default now(),
    primary key (run_id, resource)
);
create index run_resources_by_resource on run_resources (resource);
