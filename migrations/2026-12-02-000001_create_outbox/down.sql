DROP TABLE IF EXISTS outbox_replicas;
DROP TABLE IF EXISTS outbox_topics;
DROP FUNCTION IF EXISTS outbox_enqueue(text, jsonb, text, jsonb);
DROP TRIGGER IF EXISTS outbox_notify_insert ON outbox;
DROP FUNCTION IF EXISTS outbox_notify();
DROP TABLE IF EXISTS outbox;
