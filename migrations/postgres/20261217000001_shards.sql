-- Shards (issue 25): one request of a worker that takes a shard makes a parent run and N child runs, each given
-- `SCRINALIA_SHARD=i/N`. The parent (`shards` set, `parent_id` null) is never claimed: its state follows its
-- children's. A child carries its parent, its shard (0-based) and the number of shards.

alter table worker_runs add column parent_id uuid;
alter table worker_runs add column shard integer;
alter table worker_runs add column shards integer;

-- One run in flight per worker still holds at the parent (or a plain run): the children are left out of it, and
-- are instead one in flight per (parent, shard) — a retry of a child waits for the child it retries to end.
drop index worker_runs_one_in_flight;
create unique index worker_runs_one_in_flight on worker_runs (worker)
    where state in ('queued', 'running') and parent_id is null;
create unique index worker_runs_one_per_shard on worker_runs (parent_id, shard)
    where parent_id is not null and state in ('queued', 'running');
-- A parent's children, to settle its state when one ends and to list them on its page.
create index worker_runs_children on worker_runs (parent_id, shard) where parent_id is not null;

-- The number of shards may be overridden like the limits (audited, with a reason); null: one plain run.
alter table worker_overrides add column shards bigint;
