-- Checkpoints, resume and restart. A run's latest checkpoint is a fenced owner write, like its progress, kept
-- with its time. A resume or a restart is a new run that follows an interrupted or failed one: `follows` names
-- it and `follows_as` says how; a resumed run starts with its predecessor's checkpoint copied onto it (so a
-- resume of a resume that never checkpointed still starts from the right place). One resume or restart per
-- run, enforced here, so two operators (or an operator and the retry policy) cannot both continue it.

alter table worker_runs add column checkpoint jsonb;
alter table worker_runs add column checkpoint_at timestamptz;
alter table worker_runs add column follows uuid;
alter table worker_runs add column follows_as text check (follows_as in ('resume', 'restart', 'rerun'));
create unique index worker_runs_one_continuation on worker_runs (follows)
    where follows_as in ('resume', 'restart');
create index worker_runs_follows on worker_runs (follows) where follows is not null;
