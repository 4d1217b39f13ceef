-- The labels each daemon advertises (see the PostgreSQL migration of the same name).
alter table daemons add column labels text not null default '[]';
