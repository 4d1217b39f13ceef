-- Usage: what a run cost, recorded on its row when it ends (docs/worker-protocol.md, "Usage").
--
-- One JSON object: the wall time, the CPU and peak memory the daemon measured (and how: `rusage` counts the worker
-- and the descendants it waited for, and the peak of the largest single process, under names that say so), and
-- what the worker reported in its last `usage` line (tokens, GPU seconds, cost). Null for a run that never started
-- a worker, or one another daemon's recovery ended.

alter table worker_runs add column usage text;
