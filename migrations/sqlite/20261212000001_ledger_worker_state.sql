-- The runs list filtered by worker and state reads exactly its page (see the PostgreSQL migration).
create index if not exists worker_runs_worker_state_ledger on worker_runs (worker, state, requested_at desc, id desc);
