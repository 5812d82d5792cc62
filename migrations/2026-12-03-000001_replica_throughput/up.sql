-- Each replica reports its own throughput with its heartbeat, so the admin (whichever
-- replica serves the page) can show every replica's rate and the cluster's last hour
-- without a metrics system: events published in the last 60 s, and per-minute counts
-- of the last hour as {"minute": <unix minute of the last slot>, "published": [60 counts],
-- "failed": [60 counts]}, oldest first.
ALTER TABLE outbox_replicas
    ADD COLUMN published_last_minute bigint NOT NULL DEFAULT 0,
    ADD COLUMN throughput jsonb NOT NULL DEFAULT '{}'::jsonb;
