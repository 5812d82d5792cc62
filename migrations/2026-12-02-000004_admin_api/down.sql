DROP TABLE outbox_audit;
DROP TABLE outbox_idempotency;
DROP FUNCTION outbox_error_fingerprint(text);
DROP INDEX outbox_discarded_at_idx;
DROP INDEX outbox_dead_seq_idx;
DROP INDEX outbox_key_seq_idx;
DROP INDEX outbox_topic_seq_idx;
DROP INDEX outbox_seq_idx;
ALTER TABLE outbox DROP COLUMN discarded_at;
