ALTER TABLE outbox_topics DROP COLUMN partitions;
