-- Checkpoints, resume and restart (see the PostgreSQL migration of the same name for the design).

alter table worker_runs add column checkpoint text;
alter table worker_runs add column checkpoint_at text;
alter table worker_runs add column follows blob;
alter table worker_runs add column follows_as text check (follows_as in ('resume', 'restart', 'rerun'));
create unique index worker_runs_one_continuation on worker_runs (follows)
    where follows_as in ('resume', 'restart');
create index worker_runs_follows on worker_runs (follows) where follows is not null;
