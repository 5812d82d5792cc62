DROP INDEX outbox_parking_idx;
ALTER TABLE outbox_topics DROP COLUMN park_on_dead;
