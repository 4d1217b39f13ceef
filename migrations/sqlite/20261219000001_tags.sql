-- Tags (issue 28): a run request may carry up to ten short words (`collection:1921-letters`), request metadata
-- rather than configuration. The run keeps its own in `tags` (a JSON list, empty by default); `run_tags` repeats
-- them one row per tag with the run's request time, so that the ledger filtered by a tag walks `run_tags_ledger`
-- in the ledger's order and reads only the tagged runs (see the PostgreSQL migration). The trigger writes
-- `run_tags` in the statement that inserts the run, only for a run that has tags.
alter table worker_runs add column tags text not null default '[]';

create table run_tags (
    tag               text not null,
    run_requested_at  text not null,
    run_id            blob not null references worker_runs (id) on delete cascade,
    primary key (run_id, tag)
);
create index run_tags_ledger on run_tags (tag, run_requested_at desc, run_id desc);

create trigger worker_runs_tags after insert on worker_runs when new.tags <> '[]'
begin
    insert into run_tags (tag, run_requested_at, run_id)
    select distinct value, new.requested_at, new.id from json_each(new.tags);
end;

-- Schedules and pipeline runs pass theirs to the runs they request.
alter table schedules add column tags text not null default '[]';
alter table pipeline_runs add column tags text not null default '[]';
