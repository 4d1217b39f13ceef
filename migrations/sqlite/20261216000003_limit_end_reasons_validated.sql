-- Empty on SQLite: PostgreSQL validates the end-reason constraint of 20261216000002 in a migration of its own,
-- outside the transaction that added it; SQLite's triggers check the rows written after them and need nothing.
select 1;
