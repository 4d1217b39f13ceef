-- Retention (see the PostgreSQL migration and shared/src/retention.rs for the reasons).
create table retention_lease (
    name               text primary key,
    holder             blob not null,
    expires_at         text not null,
    last_finished_at   text,
    thinned_after_at   text,
    thinned_after_id   blob
);

create table retention_passes (
    id           integer primary key autoincrement,
    holder       blob not null,
    started_at   text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    finished_at  text,
    runs         integer not null default 0,
    progress     integer not null default 0,
    daemons      integer not null default 0,
    logs         integer not null default 0
);

create table retention_log_deletes (
    log_key      text primary key,
    recorded_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
