-- The limits of a worker's runs may be overridden like its retry policy (audited, with a reason): `memory_max` as
-- the operator wrote it (JSON: a size such as "4GiB" or a whole number of bytes), `cpu_max` in cores and
-- `stall_seconds`. All nullable (absent: the catalogue's applies), so adding them rewrites nothing. The values are
-- checked by the code that writes them, with the same sentences as the catalogue's checks.
alter table worker_overrides
    add column memory_max jsonb,
    add column cpu_max double precision,
    add column stall_seconds bigint;
