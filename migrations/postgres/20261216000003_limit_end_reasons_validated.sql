-- Records that every row passes the end-reason constraint of 20261216000002 (they do: the set only grew). A scan
-- of worker_runs that reads and writes go on beside.
alter table worker_runs validate constraint worker_runs_end_reason_known;
