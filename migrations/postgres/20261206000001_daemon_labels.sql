-- The labels each daemon advertises (its host name included), so that "why is this run waiting?" can name the
-- daemons that cannot take a worker and what they lack.
alter table daemons add column labels jsonb not null default '[]';
