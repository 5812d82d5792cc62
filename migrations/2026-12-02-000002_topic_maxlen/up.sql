-- Per-topic stream trimming: when set, each XADD into the topic's stream trims it to about
-- this many entries (MAXLEN ~); null falls back to redis.maxlen.
ALTER TABLE outbox_topics
    ADD COLUMN maxlen bigint CONSTRAINT outbox_topics_maxlen_positive CHECK (maxlen IS NULL OR maxlen > 0);
