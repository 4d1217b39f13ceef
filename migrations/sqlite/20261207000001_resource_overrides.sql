-- Audited overrides of a shared resource's capacity (see the PostgreSQL migration of the same name for the
-- design). SQLite serialises writers, so a change and a claim's count cannot interleave.

create table resource_overrides (
    resource    text primary key,
    capacity    integer not null check (capacity >= 1),
    updated_by  text not null,
    updated_at  text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

create table resource_override_audit (
    id          integer primary key autoincrement,
    resource    text not null,
    actor       text not null,
    at          text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    before      integer check (before >= 1),
    after       integer check (after >= 1),
    reason      text not null check (length(trim(reason)) > 0)
);
create index resource_override_audit_resource on resource_override_audit (resource, id desc);

create trigger resource_override_audit_no_update before update on resource_override_audit
begin
    select raise(abort, 'the resource override audit trail is append-only');
end;
create trigger resource_override_audit_no_delete before delete on resource_override_audit
begin
    select raise(abort, 'the resource override audit trail is append-only');
end;
