-- Webhooks (see shared/src/webhooks.rs): the outbox of run outcomes a webhook may want, written in the run's end
-- transaction (so no outcome is lost between the end and its notification), one delivery per event and webhook
-- (fanned out by a daemon, claimed with `skip locked`, retried with backoff), and every attempt with its answer.
create table webhook_events (
    id             uuid primary key,
    kind           text not null check (kind in ('failed', 'interrupted', 'recovered', 'test')),
    run_id         uuid references worker_runs (id) on delete cascade,
    worker         text,
    -- The body sent, byte for byte, on every attempt.
    payload        text not null,
    created_at     timestamptz not null default now(),
    fanned_out_at  timestamptz
);

create index webhook_events_unfanned on webhook_events (created_at) where fanned_out_at is null;
create index webhook_events_run on webhook_events (run_id) where run_id is not null;

create table webhook_deliveries (
    id               bigserial primary key,
    event_id         uuid not null references webhook_events (id) on delete cascade,
    webhook          text not null,
    state            text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
    attempts         integer not null default 0,
    next_attempt_at  timestamptz not null default now(),
    claimed_by       uuid,
    created_at       timestamptz not null default now(),
    finished_at      timestamptz,
    unique (event_id, webhook)
);

create index webhook_deliveries_due on webhook_deliveries (next_attempt_at) where state = 'pending';
create index webhook_deliveries_by_webhook on webhook_deliveries (webhook, id);

create table webhook_attempts (
    delivery_id  bigint not null references webhook_deliveries (id) on delete cascade,
    attempt      integer not null,
    daemon_id    uuid,
    started_at   timestamptz not null,
    duration_ms  bigint not null,
    status_code  integer,
    response     text,
    error        text,
    primary key (delivery_id, attempt)
);
