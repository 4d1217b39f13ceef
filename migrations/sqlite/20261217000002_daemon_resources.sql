-- Resources of a daemon (see the PostgreSQL migration of the same name for the design). SQLite serialises
-- writers, so a claim's count of a daemon's holders and its insert cannot interleave with another claim's; the
-- unique index is the last word all the same.
alter table daemons add column resources text not null default '{}';
alter table run_resources add column daemon_id blob;
alter table run_resources add column slot integer check (slot >= 0);
create unique index run_resources_daemon_slot on run_resources (daemon_id, resource, slot)
    where daemon_id is not null;
