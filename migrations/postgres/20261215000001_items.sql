-- Items: what happened to each document of a run (docs/worker-protocol.md, "Items").
--
-- A worker prints one `item` line per document; the daemon gathers them into batches and writes each batch with
-- one statement (a batch goes with the run's checkpoint, in the checkpoint's transaction). Per run the ledger keeps
-- counts by outcome and class, every failed and skipped item with its error, and succeeded items only up to a
-- bound (`items.keep_succeeded`): the counts are exact, the rows of successes a sample.
--
-- `run_item_batches` holds one row per batch written, keyed by the daemon's sequence number: a batch sent again
-- after a lost connection (its commit may have happened) finds its row and changes nothing, so no item is counted
-- twice. Every table goes with its run (retention deletes runs; the rows follow by cascade).

create table run_item_batches (
    run_id      uuid not null references worker_runs (id) on delete cascade,
    seq         bigint not null,
    lines       integer not null,
    written_at  timestamptz not null default now(),
    primary key (run_id, seq)
);

create table run_items (
    run_id   uuid not null references worker_runs (id) on delete cascade,
    item_id  text not null,
    outcome  text not null check (outcome in ('succeeded', 'failed', 'skipped')),
    class    text,
    error    text,
    primary key (run_id, item_id)
);
-- The failures page: one run's items of one outcome, in id order.
create index run_items_by_outcome on run_items (run_id, outcome, item_id);

-- `refused` counts malformed item lines by reason (the class column); `cut` counts errors kept cut.
create table run_item_counts (
    run_id   uuid not null references worker_runs (id) on delete cascade,
    outcome  text not null check (outcome in ('succeeded', 'failed', 'skipped', 'refused', 'cut')),
    class    text not null default '',
    count    bigint not null,
    primary key (run_id, outcome, class)
);

-- Quarantine streaks: for each (worker, item id), in how many consecutive runs of the worker that reported the
-- item it failed. The end of every run updates them in the transaction that ends it: a failure adds one (not
-- again for a resume of the run that already counted it), a success deletes the row, a skip or a run that did
-- not report the item changes nothing. An item whose streak reaches the worker's `quarantine_after` (read from
-- the catalogue when the quarantine is read, so that turning it on or changing it acts at once) is quarantined;
-- a release sets the streak back to 0, audited below. The last three errors are kept here because item rows
-- go with their runs. No foreign key to the runs: a streak outlives the retention of the runs that made it.
create table item_streaks (
    worker          text not null,
    item_id         text not null,
    failures        bigint not null,
    last_run        uuid not null,
    last_failed_at  timestamptz not null default now(),
    run_1 uuid, class_1 text, error_1 text,
    run_2 uuid, class_2 text, error_2 text,
    run_3 uuid, class_3 text, error_3 text,
    primary key (worker, item_id)
);
create index item_streaks_by_failures on item_streaks (worker, failures);

-- Releases from quarantine: one item, or every quarantined item of a worker (`item_id` null), who and why.
create table quarantine_releases (
    id          bigserial primary key,
    worker      text not null,
    item_id     text,
    released    bigint not null,
    actor       text not null,
    reason      text not null,
    at          timestamptz not null default now()
);
create index quarantine_releases_by_worker on quarantine_releases (worker, id desc);

-- The scope of a rerun of a run's failures (`follows_as = 'rerun_failed'`): the item ids its worker is given in
-- `SCRINALIA_ITEMS_ONLY`.
create table run_scopes (
    run_id   uuid not null references worker_runs (id) on delete cascade,
    item_id  text not null,
    primary key (run_id, item_id)
);

alter table worker_runs drop constraint worker_runs_follows_as_known;
alter table worker_runs add constraint worker_runs_follows_as_known
    check (follows_as in ('resume', 'restart', 'rerun', 'rerun_failed')) not valid;
alter table worker_runs validate constraint worker_runs_follows_as_known;

-- A release changes what the worker's card shows: live views hear it as a change of the worker.
create trigger quarantine_releases_notify after insert on quarantine_releases
    for each row execute function worker_facts_notify();
