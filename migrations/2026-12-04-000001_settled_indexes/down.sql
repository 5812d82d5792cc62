DROP INDEX outbox_settled_seq_idx;
DROP INDEX outbox_settled_key_seq_idx;
CREATE INDEX outbox_seq_idx ON outbox (seq);
CREATE INDEX outbox_topic_seq_idx ON outbox (topic, seq);
CREATE INDEX outbox_key_seq_idx ON outbox (partition_key, seq) WHERE partition_key IS NOT NULL;
