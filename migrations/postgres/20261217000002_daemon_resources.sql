-- Resources of a daemon (issue 25): a resource declared `scope = "daemon"` (a GPU) has a capacity on each daemon
-- (`daemon.resources = { gpu = 1 }`), registered in `daemons.resources`. A run holding one has, besides the row of
-- a global resource, the daemon that claimed it and its slot there (0 to n-1, the lowest free one), which its
-- worker is given as `SCRINALIA_RESOURCE_<NAME>`. The claim counts the holders on that daemon under a lock per
-- (resource, daemon); the unique index is the last word: two runs on one daemon never hold the same slot.
-- Global resources keep `daemon_id` and `slot` null. Existing daemons get an empty object (no resource).
alter table daemons add column resources jsonb not null default '{}';
alter table run_resources add column daemon_id uuid;
alter table run_resources add column slot integer check (slot >= 0);
create unique index run_resources_daemon_slot on run_resources (daemon_id, resource, slot)
    where daemon_id is not null;
