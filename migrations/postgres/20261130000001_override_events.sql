-- Live `override` events: other browsers learn that an operator set or cleared a worker's override.
--
-- The trigger is on the audit trail rather than on worker_overrides because every change made through the API
-- (`change_override`) appends exactly one audit row, in the same transaction as the change, whereas
-- worker_overrides sees an upsert for a set and a delete for a clear, and nothing at all for a clear of a worker
-- that had no override. One audit row is therefore exactly one event, a clear included. The notification is
-- delivered at commit, like those of the initial migration, so a listener never hears of a change it cannot read.
create function worker_override_audit_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('scrinalia_events', json_build_object('kind', 'override', 'worker', new.worker, 'actor', new.actor, 'action', new.action)::text);
    return null;
end;
$$;
create trigger worker_override_audit_notify after insert on worker_override_audit
    for each row execute function worker_override_audit_notify();
