-- Retention (see shared/src/retention.rs): the lease that lets one daemon at a time prune, with the watermark of
-- the progress thinning and when the last pass ended (so that passes come once per interval across all daemons),
-- a record of each pass (for operators, and for the test that no two passes overlap), and the log prefixes of
-- pruned runs whose objects are still to be deleted (written in the rows' own transaction, so that a failed
-- object delete is retried by the next pass instead of leaving an orphan log).
create table retention_lease (
    name               text primary key,
    holder             uuid not null,
    expires_at         timestamptz not null,
    last_finished_at   timestamptz,
    thinned_after_at   timestamptz,
    thinned_after_id   uuid
);

create table retention_passes (
    id           bigserial primary key,
    holder       uuid not null,
    started_at   timestamptz not null default clock_timestamp(),
    finished_at  timestamptz,
    runs         bigint not null default 0,
    progress     bigint not null default 0,
    daemons      bigint not null default 0,
    logs         bigint not null default 0
);

create table retention_log_deletes (
    log_key      text primary key,
    recorded_at  timestamptz not null default now()
);

-- The policy scans finished runs oldest first.
create index worker_runs_finished on worker_runs (finished_at, id) where finished_at is not null;
