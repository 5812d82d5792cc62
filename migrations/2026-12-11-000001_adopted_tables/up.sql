-- Adopted tables (contract section 12): `migrate` installs, on each table listed in
-- `[[tables]]`, a statement trigger that copies every inserted row into `outbox`, in the
-- inserting transaction (so a row the transaction deletes again is still copied, and a rolled
-- back one never is). The copy keeps the table it came from.
ALTER TABLE outbox ADD COLUMN source_table text;

-- What `migrate` prepared, per configured table name: `run` compares it with the settings.
CREATE TABLE outbox_adopted_tables (
    name          text        PRIMARY KEY,
    spec          jsonb       NOT NULL,
    function_name text        NOT NULL,
    adopted_at    timestamptz NOT NULL DEFAULT now()
);

-- The stable id of a row whose id column is not a uuid: a UUID (version 8, RFC 9562) made of
-- the SHA-256 of the table name and the value, so the same row always gets the same id.
CREATE FUNCTION outbox_derived_uuid(tbl text, val text) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (substr(h, 1, 12) || '8' || substr(h, 14, 3)
            || substr('89ab', (('x' || substr(h, 17, 1))::bit(4)::int % 4) + 1, 1)
            || substr(h, 18, 15))::uuid
    FROM (SELECT encode(sha256(convert_to(tbl || chr(1) || val, 'UTF8')), 'hex') AS h) AS s
$$;

-- A text payload: the JSON it holds, or else the text as a JSON string.
CREATE FUNCTION outbox_text_payload(t text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN t::jsonb;
EXCEPTION WHEN invalid_text_representation THEN
    RETURN to_jsonb(t);
END
$$;
