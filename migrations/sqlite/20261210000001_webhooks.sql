-- Webhooks (see the PostgreSQL migration and shared/src/webhooks.rs for the reasons).
create table webhook_events (
    id             blob primary key,
    kind           text not null check (kind in ('failed', 'interrupted', 'recovered', 'test')),
    run_id         blob references worker_runs (id) on delete cascade,
    worker         text,
    payload        text not null,
    created_at     text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    fanned_out_at  text
);

create index webhook_events_unfanned on webhook_events (created_at) where fanned_out_at is null;
create index webhook_events_run on webhook_events (run_id) where run_id is not null;

create table webhook_deliveries (
    id               integer primary key autoincrement,
    event_id         blob not null references webhook_events (id) on delete cascade,
    webhook          text not null,
    state            text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
    attempts         integer not null default 0,
    next_attempt_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    claimed_by       blob,
    created_at       text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at      text,
    unique (event_id, webhook)
);

create index webhook_deliveries_due on webhook_deliveries (next_attempt_at) where state = 'pending';
create index webhook_deliveries_by_webhook on webhook_deliveries (webhook, id);

create table webhook_attempts (
    delivery_id  integer not null references webhook_deliveries (id) on delete cascade,
    attempt      integer not null,
    daemon_id    blob,
    started_at   text not null,
    duration_ms  integer not null,
    status_code  integer,
    response     text,
    error        text,
    primary key (delivery_id, attempt)
);
