-- outbox_refuse_adopted_row stays: the adopted tables' copy functions call it until `migrate` makes
-- them again.
DROP TRIGGER outbox_notify_insert ON outbox;
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
CREATE TRIGGER outbox_notify_insert AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
REVOKE SELECT ON outbox_wake FROM PUBLIC;
