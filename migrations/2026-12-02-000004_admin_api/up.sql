-- The admin API (issue 4): listing and searching events by keyset, discarding dead letters,
-- idempotent enqueue, and an audit log of every steering action.

-- A discarded event is a dead letter an operator gave up on: it keeps its row (for the
-- record) but is never retried, and retention deletes it like a published row.
ALTER TABLE outbox ADD COLUMN discarded_at timestamptz;

-- Keyset pagination of the event list, newest first (`seq < cursor ORDER BY seq DESC`).
-- seq never changes, so these cost an index insert per event and nothing at publish
-- beyond what the non-HOT published_at update already costs.
CREATE INDEX outbox_seq_idx ON outbox (seq);
CREATE INDEX outbox_topic_seq_idx ON outbox (topic, seq);
-- Search by partition key and the per-key timeline (earlier and later events of a key).
CREATE INDEX outbox_key_seq_idx ON outbox (partition_key, seq) WHERE partition_key IS NOT NULL;
-- Dead letters listed newest first; only dead rows, so it stays small.
CREATE INDEX outbox_dead_seq_idx ON outbox (seq) WHERE dead_at IS NOT NULL;
-- Retention deletes discarded rows like published ones.
CREATE INDEX outbox_discarded_at_idx ON outbox (discarded_at) WHERE discarded_at IS NOT NULL;

-- Groups dead letters by the shape of their error: uuids and numbers removed, so
-- "timeout after 5012 ms on 10.0.0.7" and "... 4990 ms on 10.0.0.9" fall together.
CREATE FUNCTION outbox_error_fingerprint(error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(
        regexp_replace(
            regexp_replace(coalesce(error, ''),
                '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<uuid>', 'gi'),
            '0x[0-9a-f]+', '<hex>', 'gi'),
        '[0-9]+', '<n>', 'g');
$$;

-- Idempotency keys of `POST /api/v1/events`, written in the same transaction as the event.
-- request_hash identifies the body, so a key reused with another body is refused.
CREATE TABLE outbox_idempotency (
    key          text        PRIMARY KEY,
    request_hash bytea       NOT NULL,
    event_id     uuid        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_idempotency_created_at_idx ON outbox_idempotency (created_at);

-- Who did what through the admin (API or UI), written in the same transaction as the action.
CREATE TABLE outbox_audit (
    id     bigserial   PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    who    text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL,
    detail jsonb       NOT NULL DEFAULT '{}'::jsonb
);
