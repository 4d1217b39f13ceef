-- Pause on repeated failure (issue 28). A paused worker gets no new run (not from its schedules, its retries, its
-- pipelines' steps or a person's Run) until an operator resumes it. `worker_pauses` holds the pauses in force, one
-- row per paused worker: the request's insert reads it with one probe of its primary key, so a trigger costs no
-- extra round trip. `paused_at` is the database clock.
create table worker_pauses (
    worker     text primary key,
    paused_at  timestamptz not null default now(),
    paused_by  text not null,
    reason     text not null check (length(trim(reason)) > 0),
    automatic  boolean not null default false
);

-- Every pause and resume, who, when and why, append-only like the overrides' audit trail.
create table worker_pause_audit (
    id         bigserial primary key,
    worker     text not null,
    action     text not null check (action in ('pause', 'resume')),
    actor      text not null,
    at         timestamptz not null default now(),
    reason     text not null check (length(trim(reason)) > 0),
    automatic  boolean not null default false
);
create index worker_pause_audit_worker on worker_pause_audit (worker, id desc);

create function worker_pause_audit_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the pause history is append-only';
end;
$$;
create trigger worker_pause_audit_no_rewrite
    before update or delete on worker_pause_audit
    for each row execute function worker_pause_audit_append_only();

-- How many runs of each worker ended `failed` in a row, written in the transaction that ends each run: a
-- failure adds one, a success (or a resume) sets it back to 0; interrupted and cancelled runs leave it alone.
create table worker_failure_streaks (
    worker    text primary key,
    failures  integer not null default 0
);

-- `pause_after_failures` may be overridden per worker like the limits (audited, with a reason).
alter table worker_overrides add column pause_after_failures bigint;

-- A pause is announced to the webhooks that ask for `paused`.
alter table webhook_events drop constraint webhook_events_kind_check,
    add constraint webhook_events_kind_check check (kind in ('failed', 'interrupted', 'recovered', 'test', 'paused'));
