-- The run table is both the request queue and the ledger (see the PostgreSQL migration for the reasons).
-- Times are ISO-8601 text in UTC with milliseconds, always written by the database clock, so they sort as text.

create table worker_runs (
    id                  blob primary key,
    worker              text not null,
    state               text not null default 'queued'
                        check (state in ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    requested_by        text not null,
    requested_at        text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    arguments           text not null default '{}',
    config              text not null,
    claimed_by          blob,
    claimed_at          text,
    lease_expires_at    text,
    started_at          text,
    finished_at         text,
    duration_ms         integer,
    exit_code           integer,
    error               text,
    progress            text,
    result              text,
    cancel_requested_at text,
    cancel_requested_by text,
    trace_context       text,
    log_key             text,
    attempt             integer not null default 1,
    schedule_id         text
);

create unique index worker_runs_one_in_flight on worker_runs (worker) where state in ('queued', 'running');
create index worker_runs_queued on worker_runs (requested_at, id) where state = 'queued';
create index worker_runs_running_lease on worker_runs (lease_expires_at) where state = 'running';
create index worker_runs_ledger on worker_runs (requested_at desc, id desc);
create index worker_runs_worker_ledger on worker_runs (worker, requested_at desc, id desc);

create table run_progress (
    run_id      blob not null references worker_runs (id) on delete cascade,
    seq         integer not null,
    at          text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    progress    text not null,
    primary key (run_id, seq)
);

create table worker_overrides (
    worker      text primary key,
    engine      text,
    preset      text,
    options     text not null default '{}',
    updated_by  text not null,
    updated_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

create table worker_override_audit (
    id          integer primary key autoincrement,
    worker      text not null,
    actor       text not null,
    at          text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    action      text not null check (action in ('set', 'clear')),
    before      text,
    after       text,
    reason      text not null check (length(trim(reason)) > 0)
);
create index worker_override_audit_worker on worker_override_audit (worker, id desc);

create trigger worker_override_audit_no_update before update on worker_override_audit
begin
    select raise(abort, 'the override audit trail is append-only');
end;
create trigger worker_override_audit_no_delete before delete on worker_override_audit
begin
    select raise(abort, 'the override audit trail is append-only');
end;

create table daemons (
    id                    blob primary key,
    host                  text not null,
    pid                   integer not null,
    version               text not null,
    capacity              integer not null,
    workers               text not null default '[]',
    started_at            text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    heartbeat_at          text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    drain_requested_at    text,
    drain_requested_by    text,
    stopped_at            text,
    state                 text not null default 'active' check (state in ('active', 'draining', 'gone'))
);

create table queue_counts (
    worker        text primary key,
    pending       integer,
    unmeasurable  text,
    done          integer,
    error         text,
    measured_at   text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    took_ms       integer not null,
    measured_by   blob
);

create index worker_runs_last_finished on worker_runs (worker, finished_at desc) where finished_at is not null;
