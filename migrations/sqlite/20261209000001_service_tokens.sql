-- Service tokens (see the PostgreSQL migration and shared/src/tokens.rs for the reasons). UUIDs as blobs and
-- times as ISO-8601 text, as everywhere in this schema.
create table service_tokens (
    id            blob primary key,
    name          text not null unique,
    role          text not null check (role in ('viewer', 'operator', 'admin')),
    hash          text not null unique,
    created_by    text not null,
    created_at    text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    expires_at    text,
    last_used_at  text,
    revoked_at    text,
    revoked_by    text
);
