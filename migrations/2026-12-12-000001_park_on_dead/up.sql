-- A topic whose dead events park their keys (contract section 13): `park_on_dead` on its
-- `[[topics]]` entry, recorded here at start so that every replica's claim reads one answer,
-- as it reads the pause flag.
ALTER TABLE outbox_topics ADD COLUMN park_on_dead boolean NOT NULL DEFAULT false;

-- The claim's probe "is an earlier event of this key dead?" for such topics. Dead events not
-- discarded are few (an operator acts on them), so the index stays small and the probe costs
-- one descent when nothing is dead.
CREATE INDEX outbox_parking_idx ON outbox (topic, partition_key, seq)
    WHERE dead_at IS NOT NULL AND discarded_at IS NULL;
