-- Records that every row passes the checks added by 20261218000001 (they do: the priority column's default is in
-- range and the set of end reasons only grew). Scans of worker_runs that reads and writes go on beside.
alter table worker_runs validate constraint worker_runs_priority_range;
alter table worker_runs validate constraint worker_runs_end_reason_known;
