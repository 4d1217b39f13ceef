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
