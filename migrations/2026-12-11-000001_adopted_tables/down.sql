DROP FUNCTION outbox_text_payload(text);
DROP FUNCTION outbox_derived_uuid(text, text);
DROP TABLE outbox_adopted_tables;
ALTER TABLE outbox DROP COLUMN source_table;
