-- The consumer inbox: one row per (consumer group, event) whose effect has committed. A
-- consumer inserts the row in the same transaction as the effect, so a redelivered event
-- finds it and is skipped. The consumer library (outbox-consumer, `inbox::ensure_table`)
-- runs this same file on the consumer's own database, hence IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS outbox_inbox (
    consumer_group text NOT NULL,
    event_id uuid NOT NULL,
    topic text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, event_id)
);

-- Retention deletes the oldest rows first.
CREATE INDEX IF NOT EXISTS outbox_inbox_processed_at ON outbox_inbox (processed_at);
