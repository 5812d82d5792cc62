-- The partition count of a topic, as recorded by the relays: NULL until a relay configured
-- with the topic records it (a topic never configured has one partition). `run` refuses a
-- configured count that differs; `outbox-relay repartition` changes it.
ALTER TABLE outbox_topics
    ADD COLUMN partitions integer
        CONSTRAINT outbox_topics_partitions_range CHECK (partitions IS NULL OR partitions BETWEEN 1 AND 1024);
