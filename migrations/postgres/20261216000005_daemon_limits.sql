-- What each daemon can enforce of the workers' limits (issue 26): `{"cores": 2, "unenforced": {"cpu_max": "no cpu
-- controller (cgroup v1)"}}`, registered at its start, so that health and the worker cards can say which host
-- does not keep a worker's limit. Existing rows get an empty object (nothing known).
alter table daemons add column limits jsonb not null default '{}';
