CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('outbox.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('outbox_events', '');
    END IF;
    RETURN NULL;
END;
$$;
DROP TABLE outbox_wake;
