-- The outbox is a queue: every publish leaves a dead row version (the UPDATE that marks it,
-- or the DELETE of delete mode), and the pending indexes keep entries for published rows
-- until a vacuum. Postgres's default waits for dead versions to reach 20% of the table,
-- which a table holding days of published rows rarely does, so the dead versions pile up and
-- commit-to-stream latency grows the longer the relay runs.
-- A fixed threshold lets autovacuum visit the table about once a naptime (a minute) under
-- load, and every few thousand events when quiet. Setting these takes only a
-- SHARE UPDATE EXCLUSIVE lock: producers and relays go on during the migration.
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 10000
);
