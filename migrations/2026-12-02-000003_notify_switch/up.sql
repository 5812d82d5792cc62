-- NOTIFY has a price on the producer side: Postgres serializes the commits of all
-- transactions that notify (a database-wide lock held through the commit's WAL flush).
-- Where producers commit many small transactions concurrently, that lock caps their commit
-- rate well below what they reach without it: switch it off and let the relays poll instead
-- (relay.poll_interval, e.g. 50ms):
--   ALTER DATABASE mydb SET outbox.notify = 'off';   -- new sessions; 'on' or RESET to undo
-- Reading a setting takes no lock, so the check itself costs the producers nothing.
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('outbox.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('outbox_events', '');
    END IF;
    RETURN NULL;
END;
$$;
