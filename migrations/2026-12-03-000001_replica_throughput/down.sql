ALTER TABLE outbox_replicas DROP COLUMN throughput, DROP COLUMN published_last_minute;
