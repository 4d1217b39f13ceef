-- Live `tokens` changes: every API process keeps the service tokens in memory (shared/src/tokens.rs) and re-reads
-- them when this notification says they changed, instead of polling the table four times a second.
--
-- Only the columns an API's map holds fire it (`update of`): `last_used_at`, which every API writes about once a
-- second per token in use, would otherwise make each use-flush wake every API process for a read of the whole
-- table. The payload names no token: a listener re-reads them all (a few rows), so it cannot act on half a change.
-- Row-level, so that an update matching no row (a second revocation) notifies nothing; PostgreSQL folds the
-- identical payloads of one transaction into one notification, delivered at commit like every other, so a listener
-- never re-reads before the change is visible.
create function service_tokens_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('scrinalia_events', json_build_object('kind', 'tokens')::text);
    return null;
end;
$$;
create trigger service_tokens_notify
    after insert or delete or update of name, role, hash, expires_at, revoked_at on service_tokens
    for each row execute function service_tokens_notify();
