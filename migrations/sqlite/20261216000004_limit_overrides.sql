-- The limits of a worker's runs may be overridden like its retry policy (audited, with a reason): `memory_max` as
-- the operator wrote it (JSON text: a size such as "4GiB" or a whole number of bytes), `cpu_max` in cores and
-- `stall_seconds`. All nullable (absent: the catalogue's applies). The values are checked by the code that writes
-- them, with the same sentences as the catalogue's checks.
alter table worker_overrides add column memory_max text;
alter table worker_overrides add column cpu_max real;
alter table worker_overrides add column stall_seconds integer;
