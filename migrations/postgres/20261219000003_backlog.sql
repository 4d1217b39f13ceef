-- Backlog-driven runs and freshness targets (issue 28). A worker may declare a trigger on its own queue count
-- (`when_pending_at_least`, `quiet_seconds`, `max_delay_seconds`) and a freshness target (`fresh_within_seconds`),
-- each overridable like the limits (audited, with a reason).
alter table worker_overrides add column when_pending_at_least bigint;
alter table worker_overrides add column quiet_seconds bigint;
alter table worker_overrides add column max_delay_seconds bigint;
alter table worker_overrides add column fresh_within_seconds bigint;

-- What a count says besides the number, kept with it on the database clock: the age of the oldest pending
-- document when `count-pending` reports it; since when something has been pending; when the count last grew
-- (the trigger's debounce) and since when it has been at or above the trigger's threshold (its longest wait).
alter table queue_counts add column oldest_pending_at timestamptz;
alter table queue_counts add column pending_since timestamptz;
alter table queue_counts add column grew_at timestamptz;
alter table queue_counts add column reached_at timestamptz;

-- The fire history of backlog triggers. A fire is written in the transaction that requests its run, under the
-- worker's backlog lock, and at most one per count: a fire newer than the worker's count means it was fired.
create table backlog_fires (
    id              bigserial primary key,
    worker          text not null,
    fired_at        timestamptz not null default now(),
    pending         bigint not null,
    reason          text not null,
    run_id          uuid,
    skipped_reason  text,
    fired_by        uuid
);
create index backlog_fires_by_worker on backlog_fires (worker, id desc);
