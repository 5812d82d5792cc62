-- Keyset indexes over every row (as migration 4 made them) have two costs:
--
-- * The claimer's window scan ("the oldest pending rows by seq") could be planned on the full
--   `outbox_seq_idx` instead of the pending-only index, filtering out every published row it
--   walks past. On a freshly loaded table the statistics say "all pending", the two indexes
--   look the same, and a plan cached on that walks ever more published rows as the drain goes
--   on.
-- * Marking an event published writes a new row version, and every index whose predicate the
--   new version satisfies gets an entry: three more per event for these.
--
-- They are replaced by indexes of settled rows only (published or dead): a pending row is in
-- the pending indexes of migration 1, a settled one in these, and no pending scan can use
-- them. The admin's lists merge the two sides (a merge of two index scans, still keyset).
-- Listing by topic walks `seq` and filters: a topic index would add an entry to every publish.
-- Figures (`outbox-relay bench`) are in docs/perf-journal.md.
DROP INDEX outbox_seq_idx;
DROP INDEX outbox_topic_seq_idx;
DROP INDEX outbox_key_seq_idx;

CREATE INDEX outbox_settled_seq_idx ON outbox (seq)
    WHERE published_at IS NOT NULL OR dead_at IS NOT NULL;
CREATE INDEX outbox_settled_key_seq_idx ON outbox (partition_key, seq)
    WHERE partition_key IS NOT NULL AND (published_at IS NOT NULL OR dead_at IS NOT NULL);
