-- The panel's ledger reads stay index-served at ten million runs (see the PostgreSQL migration): the runs list
-- filtered by state alone walks this index from the newest run in that state.
create index if not exists worker_runs_state_ledger on worker_runs (state, requested_at desc, id desc);
