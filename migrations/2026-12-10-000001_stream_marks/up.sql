-- How far each stream is known to reach: the last entry id a relay appended there. A stream
-- whose last generated id is below its mark lost entries (restart from an older snapshot,
-- failover without waiting, flush); the relay repairs it from the rows retention keeps.
-- One small row per stream, saved about once a second: its WAL is per second, not per event.
CREATE TABLE outbox_stream_marks (
    stream      text        PRIMARY KEY,
    entry_ms    bigint      NOT NULL,
    entry_seq   bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- While a topic's lost events are published again, its newer events wait: only rows up to
-- this seq are claimed (set by the repair, cleared once none of them is pending).
ALTER TABLE outbox_topics ADD COLUMN repair_below bigint;
