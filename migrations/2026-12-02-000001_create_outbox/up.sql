-- The outbox table producers write into, in their own business transactions.
-- Producers set topic, payload, partition_key, headers and optionally available_at;
-- the relay owns every other column.
CREATE TABLE outbox (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- Insertion order: per-key ordering compares seq, never timestamps (clocks tie and skew).
    seq           bigint      GENERATED ALWAYS AS IDENTITY,
    topic         text        NOT NULL,
    payload       jsonb       NOT NULL,
    partition_key text,
    headers       jsonb       DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    dead_at       timestamptz,
    CONSTRAINT outbox_topic_valid CHECK (
        char_length(topic) BETWEEN 1 AND 255 AND topic !~ '[[:space:][:cntrl:]]'
    )
);

-- The claim scan walks pending rows in insertion order; the partial index holds only them,
-- so published rows waiting for retention cost the claimer nothing.
CREATE INDEX outbox_pending_seq_idx ON outbox (seq)
    WHERE published_at IS NULL AND dead_at IS NULL;

-- "Is there an earlier pending event with my key?" is answered from this index.
CREATE INDEX outbox_pending_key_idx ON outbox (topic, partition_key, seq)
    WHERE published_at IS NULL AND dead_at IS NULL AND partition_key IS NOT NULL;

-- Retention deletes the oldest published rows first.
CREATE INDEX outbox_published_at_idx ON outbox (published_at)
    WHERE published_at IS NOT NULL;

-- Dead letters are listed newest first by the admin.
CREATE INDEX outbox_dead_at_idx ON outbox (dead_at)
    WHERE dead_at IS NOT NULL;

-- One notification per inserting statement (not per row): a bulk insert of 10k rows wakes
-- the relays once. Postgres delivers it at commit, never for a rolled-back transaction.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify_insert
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- Enqueue from any language: SELECT outbox_enqueue('order.created', '{"id": 1}', 'order-1');
CREATE FUNCTION outbox_enqueue(
    topic text,
    payload jsonb,
    partition_key text DEFAULT NULL,
    headers jsonb DEFAULT '{}'::jsonb
) RETURNS uuid LANGUAGE sql AS $$
    INSERT INTO outbox (topic, payload, partition_key, headers)
    VALUES ($1, $2, $3, COALESCE($4, '{}'::jsonb))
    RETURNING id;
$$;

-- Per-topic state steered from the admin. A topic without a row is active.
CREATE TABLE outbox_topics (
    topic      text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Heartbeats of the running relay replicas.
CREATE TABLE outbox_replicas (
    instance_id  text        PRIMARY KEY,
    version      text        NOT NULL,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);
