-- Service tokens that an admin creates and revokes through the API, without a restart (shared/src/tokens.rs).
--
-- Only the SHA-256 hash of the secret is stored, in the same `sha256:<hex>` form as `[[auth.tokens]]`. The name is
-- the actor of the holder's writes, so it stays unique for good, a revoked token's included: an audit entry names
-- one token only. A revocation is kept on the row (who and when), never deleted, so `GET /api/tokens` shows it.
-- `last_used_at` is written by each API process in batches, at most once a second per token.
create table service_tokens (
    id            uuid primary key,
    name          text not null unique,
    role          text not null check (role in ('viewer', 'operator', 'admin')),
    hash          text not null unique,
    created_by    text not null,
    created_at    timestamptz not null default now(),
    expires_at    timestamptz,
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    revoked_by    text
);
