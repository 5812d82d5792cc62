ALTER TABLE outbox_topics DROP COLUMN IF EXISTS maxlen;
