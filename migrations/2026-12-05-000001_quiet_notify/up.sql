-- NOTIFY serializes the commits of every transaction that notifies (migration 3), which caps
-- producers committing one event per transaction while the trigger notifies.
-- A relay that is already claiming continuously gains nothing from being woken, so while
-- events arrive faster than relay.quiet_above per second a replica writes busy_until (a second
-- ahead, renewed while the rate lasts) and polls every 5 ms itself; until then the trigger
-- does not notify. A replica that dies while announcing delays new events by at most that second
-- plus the others' poll interval; nothing is lost either way (notifications only wake).
CREATE TABLE outbox_wake (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    busy_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO outbox_wake DEFAULT VALUES;

-- SECURITY DEFINER: a producer role allowed only to INSERT into outbox must not fail for lack
-- of SELECT on outbox_wake. clock_timestamp(), not now(): a long producer transaction would
-- otherwise compare with its own start time.
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF current_setting('outbox.notify', true) IS DISTINCT FROM 'off'
       AND NOT EXISTS (SELECT 1 FROM outbox_wake WHERE busy_until > clock_timestamp()) THEN
        PERFORM pg_notify('outbox_events', '');
    END IF;
    RETURN NULL;
END;
$$;
