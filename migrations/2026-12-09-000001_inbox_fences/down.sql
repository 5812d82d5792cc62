DROP TABLE IF EXISTS outbox_inbox_fences;
