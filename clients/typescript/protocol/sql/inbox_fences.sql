-- Fences of the consumer inbox: per (consumer group, topic, partition) of a partitioned
-- topic, the highest lease epoch a consumer has raised it to. A consumer that takes a
-- partition raises the row to its epoch before it handles anything; each effect transaction
-- checks, before it commits, that the row still holds its own epoch (SELECT ... FOR SHARE,
-- so a raise waits for transactions that passed the check). A consumer that lost the
-- partition can therefore never commit an effect for it. The consumer library
-- (outbox-consumer, `inbox::ensure_table`) runs this same file on the consumer's own
-- database, hence IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS outbox_inbox_fences (
    consumer_group text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    epoch bigint NOT NULL,
    raised_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);
