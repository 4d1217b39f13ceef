-- Tags (issue 28): a run request may carry up to ten short words (`collection:1921-letters`), request metadata
-- rather than configuration. The run keeps its own in `tags` (a JSON list, empty by default: a run without tags
-- costs nothing more), so that every statement returning a run returns them; `run_tags` repeats them one row per
-- tag with the run's request time, so that the ledger filtered by a tag walks `run_tags_ledger` in the ledger's
-- order (newest first) and reads only the tagged runs' rows, at ten million runs as at ten
-- (tests/tests/suite/db_plans.rs). The trigger writes `run_tags` in the statement that inserts the run, whatever
-- made it (a request, a fire, a retry, a resume, a shard, a pipeline step): one statement, and only for a run
-- that has tags. A run's tags never change; its `run_tags` rows go with it (retention).
alter table worker_runs add column tags jsonb not null default '[]'::jsonb;

create table run_tags (
    tag               text not null,
    run_requested_at  timestamptz not null,
    run_id            uuid not null references worker_runs (id) on delete cascade,
    primary key (run_id, tag)
);
create index run_tags_ledger on run_tags (tag, run_requested_at desc, run_id desc);

create function worker_runs_tags() returns trigger language plpgsql as $$
begin
    insert into run_tags (tag, run_requested_at, run_id)
    select distinct t, new.requested_at, new.id from jsonb_array_elements_text(new.tags) as t;
    return null;
end;
$$;
create trigger worker_runs_tags after insert on worker_runs
    for each row when (new.tags <> '[]'::jsonb) execute function worker_runs_tags();

-- Schedules and pipeline runs pass theirs to the runs they request (a pipeline run: its pipeline's catalogue
-- tags, then those of whoever started it).
alter table schedules add column tags jsonb not null default '[]'::jsonb;
alter table pipeline_runs add column tags jsonb not null default '[]'::jsonb;
