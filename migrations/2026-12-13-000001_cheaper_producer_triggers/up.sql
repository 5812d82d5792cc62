-- What every producer's insert pays for the relay's NOTIFY, made smaller.
--
-- While a relay is busy (outbox_wake.busy_until ahead) the trigger does not notify, but
-- finding that out was a query per statement, in a SECURITY DEFINER function. Now a session
-- that read busy_until remembers it (capped to a second) in a setting named for this schema,
-- and the trigger's WHEN clause, which Postgres evaluates without calling any function body,
-- skips the trigger until then; `outbox.notify = off` skips it the same way. The relay only
-- ever moves busy_until later (and at most a second ahead), so a session never stays quiet
-- longer than it would have by reading the table each time.
--
-- The function runs as the producer (it sets a session setting, which a function with a SET
-- clause could not keep), so every role may read outbox_wake: it holds one timestamp.
GRANT SELECT ON outbox_wake TO PUBLIC;

DROP TRIGGER outbox_notify_insert ON outbox;

DO $migration$
DECLARE
    setting text := 'outbox.quiet_until_' || left(md5(current_schema()), 12);
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER AS $body$
DECLARE
    quiet_until double precision;
    now_epoch double precision := pg_catalog.date_part('epoch', pg_catalog.clock_timestamp());
BEGIN
    SELECT pg_catalog.date_part('epoch', w.busy_until) INTO quiet_until FROM %1$I.outbox_wake AS w;
    IF quiet_until > now_epoch THEN
        PERFORM pg_catalog.set_config(%2$L, LEAST(quiet_until, now_epoch + 1)::text, false);
    ELSE
        PERFORM pg_catalog.pg_notify('outbox_events', '');
    END IF;
    RETURN NULL;
END
$body$$f$, current_schema(), setting);

    EXECUTE format($f$
CREATE TRIGGER outbox_notify_insert AFTER INSERT ON outbox FOR EACH STATEMENT
    WHEN (pg_catalog.current_setting('outbox.notify', true) IS DISTINCT FROM 'off'
          AND pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())
              >= COALESCE(NULLIF(pg_catalog.current_setting(%1$L, true), '')::double precision,
                          '-infinity'::double precision))
    EXECUTE FUNCTION outbox_notify()$f$, setting);
END
$migration$;

-- The refusal of a bad row of an adopted table, raised from inside the copy's one statement
-- (a CASE calls it only for a bad row): the error names the table and the column. VOLATILE, so
-- the planner never evaluates it ahead of the rows.
CREATE FUNCTION outbox_refuse_adopted_row(message text, sqlstate text, column_name text, val anyelement)
RETURNS anyelement LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = message, ERRCODE = sqlstate, COLUMN = column_name;
END
$$;

-- The adopted tables' copy functions are made again, as one statement calling the function
-- above, by the `migrate` that applies this: their registry entries match no configuration now.
UPDATE outbox_adopted_tables SET spec = spec || '{"made_before_one_statement_copy": true}';
