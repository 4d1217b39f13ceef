-- The allowed values of `end_reason` and `follows_as` get names of their own, so that the issue that adds an end
-- reason (`out_of_memory`, `stalled`, `preempted`, `expired`) or a way to follow a run replaces the constraint by
-- a name a migration wrote (docs/architecture.md, "Adding an end reason"). PostgreSQL can drop and add a CHECK in
-- place; the column CHECKs of 20261201000001_end_reasons and 20261204000001_checkpoints were named by its rule
-- for unnamed constraints (`<table>_<column>_check`), a name no migration spelt. SQLite, which cannot alter a
-- CHECK, moves the same checks into triggers at this version.
--
-- A rename changes the catalogue only: no scan, no rewrite; its exclusive lock on worker_runs waits for the
-- statements in flight there and is then held for an instant.
alter table worker_runs rename constraint worker_runs_end_reason_check to worker_runs_end_reason_known;
alter table worker_runs rename constraint worker_runs_follows_as_check to worker_runs_follows_as_known;
