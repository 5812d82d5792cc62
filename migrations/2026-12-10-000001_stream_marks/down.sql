ALTER TABLE outbox_topics DROP COLUMN repair_below;
DROP TABLE outbox_stream_marks;
