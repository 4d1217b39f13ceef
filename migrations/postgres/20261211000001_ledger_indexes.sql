-- The panel's ledger reads stay index-served at ten million runs (tests/tests/suite/db_plans.rs asserts their
-- plans). The runs list filtered by state alone walks this index from the newest run in that state: without it,
-- a rare state (a few failed runs among millions) would be found by reading the whole ledger index backwards.
-- Filtered by worker and state, the worker's index or this one serves it, whichever the planner finds narrower.
-- `if not exists`: an operator may build it beforehand with `create index concurrently` (docs/operations.md).
create index if not exists worker_runs_state_ledger on worker_runs (state, requested_at desc, id desc);
