-- What each worker's `describe` and `check` last answered, the configuration a run reported, and the chores
-- daemons take turns doing (see the PostgreSQL migration of this version).

create table worker_descriptions (
    worker        text primary key,
    description   text,
    described_at  text,
    described_by  blob,
    command       text not null,
    took_ms       integer not null,
    error         text,
    attempted_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

create table worker_readiness (
    worker      text primary key,
    ready       boolean,
    reason      text,
    error       text,
    checked_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    took_ms     integer not null,
    checked_by  blob
);

create table worker_chores (
    worker        text not null,
    chore         text not null check (chore in ('describe', 'count', 'check')),
    requested_at  text,
    started_at    text,
    finished_at   text,
    lease_by      blob,
    lease_until   text,
    primary key (worker, chore)
);

alter table worker_runs add column reported_config text;

-- A worker's queue is counted again soon after one of its runs ends.
create trigger worker_runs_request_count after update of state on worker_runs
when old.state in ('queued', 'running') and new.state not in ('queued', 'running')
begin
    update worker_chores set requested_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
    where worker = new.worker and chore = 'count';
end;
