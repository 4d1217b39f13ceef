-- The runs list filtered by worker and state (the panel's "one worker's failed runs") reads exactly its page.
-- Served by the worker's index alone it visited every run of the worker in the time range and dropped the other
-- states row by row: at ten million runs, one day of one worker's failed runs read about 520 rows of the table for
-- a page of 51, and 500 such pages a second took 4.5 ms each, enough to saturate two cores (scrinalia-bench ledger,
-- p99 64 ms against a target of 10). tests/tests/suite/db_plans.rs asserts that both equalities are index conditions.
-- `if not exists`: an operator may build it beforehand with `create index concurrently` (docs/operations.md).
create index if not exists worker_runs_worker_state_ledger on worker_runs (worker, state, requested_at desc, id desc);
