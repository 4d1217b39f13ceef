-- Audited overrides of a shared resource's capacity. The catalogue's `[[resources]]` capacity stays the default;
-- a row here replaces it for every claim from the next one on, without a restart. A claim reads the row after
-- taking the resource's advisory lock (`resource.<name>`), and a change takes the same lock, so a change and a
-- claim never interleave: a lowered capacity applies to the next claim, and runs already holding are not stopped.
--
-- Every change (a set, or a reset back to the catalogue) appends one row to resource_override_audit in the same
-- transaction, naming who, when (the database clock) and why; `before`/`after` are the overridden capacities,
-- null meaning "the catalogue's". The trail is append-only, like the worker overrides' trail.

create table resource_overrides (
    resource    text primary key,
    capacity    integer not null check (capacity >= 1),
    updated_by  text not null,
    updated_at  timestamptz not null default now()
);

create table resource_override_audit (
    id          bigserial primary key,
    resource    text not null,
    actor       text not null,
    at          timestamptz not null default now(),
    before      integer check (before >= 1),
    after       integer check (after >= 1),
    reason      text not null check (length(trim(reason)) > 0)
);
create index resource_override_audit_resource on resource_override_audit (resource, id desc);

-- The audit trail is append-only: the database refuses to rewrite history.
create function resource_override_audit_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the resource override audit trail is append-only';
end;
$$;
create trigger resource_override_audit_no_rewrite
    before update or delete on resource_override_audit
    for each row execute function resource_override_audit_append_only();
