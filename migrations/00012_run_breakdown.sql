-- +goose Up
-- A run's outcomes by provider and its amounts at stake by currency, kept
-- like its completion counters: each terminal transition of an item that did
-- not match adds its outcome and expected amount to the row of its shard,
-- provider and currency; a requeue takes them out again. A match, the
-- outcome of most items, writes no row here: the matched items of a complete
-- run are item_count less the others. The console reads a few rows per run
-- instead of every item. The rows of a shard change only under the lock of
-- its run_shards row, which every recording transaction takes first, so
-- they add no contention of their own.

CREATE TABLE run_breakdown (
    run_id              uuid     NOT NULL REFERENCES runs (run_id),
    shard               smallint NOT NULL,
    provider            text     NOT NULL,
    currency            text     NOT NULL,
    item_count          integer  NOT NULL CHECK (item_count >= 0),
    mismatched          integer  NOT NULL DEFAULT 0 CHECK (mismatched >= 0),
    missing             integer  NOT NULL DEFAULT 0 CHECK (missing >= 0),
    dead_lettered       integer  NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    cancelled           integer  NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    mismatched_minor    bigint   NOT NULL DEFAULT 0,
    missing_minor       bigint   NOT NULL DEFAULT 0,
    dead_lettered_minor bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, shard, provider, currency)
);

COMMENT ON TABLE run_breakdown IS 'A run''s items by shard, provider and currency, with the outcomes of those that did not match and their expected amounts. Kept by the same statements as run_shards; a match writes nothing here.';
COMMENT ON COLUMN run_breakdown.run_id IS 'The run.';
COMMENT ON COLUMN run_breakdown.shard IS 'Shard number (items.shard).';
COMMENT ON COLUMN run_breakdown.provider IS 'The items'' provider (items.provider); empty: the default provider.';
COMMENT ON COLUMN run_breakdown.currency IS 'The items'' expected currency (items.currency).';
COMMENT ON COLUMN run_breakdown.item_count IS 'Items of this shard, provider and currency in the run.';
COMMENT ON COLUMN run_breakdown.mismatched IS 'Terminal items that mismatched.';
COMMENT ON COLUMN run_breakdown.missing IS 'Terminal items missing at the provider.';
COMMENT ON COLUMN run_breakdown.dead_lettered IS 'Terminal items that were dead-lettered (a requeue takes them out again).';
COMMENT ON COLUMN run_breakdown.cancelled IS 'Terminal items cancelled with their run.';
COMMENT ON COLUMN run_breakdown.mismatched_minor IS 'Sum of the expected amounts (items.amount_minor, minor units of currency) of the mismatched items.';
COMMENT ON COLUMN run_breakdown.missing_minor IS 'Sum of the expected amounts of the items missing at the provider.';
COMMENT ON COLUMN run_breakdown.dead_lettered_minor IS 'Sum of the expected amounts of the dead-lettered items.';

-- Runs recorded before this migration: one scan of their items.
INSERT INTO run_breakdown (run_id, shard, provider, currency, item_count, mismatched, missing, dead_lettered,
                           cancelled, mismatched_minor, missing_minor, dead_lettered_minor)
SELECT run_id, shard, provider, currency, count(*),
       count(*) FILTER (WHERE state = 'mismatched'), count(*) FILTER (WHERE state = 'missing'),
       count(*) FILTER (WHERE state = 'dead_lettered'), count(*) FILTER (WHERE state = 'cancelled'),
       coalesce(sum(amount_minor) FILTER (WHERE state = 'mismatched'), 0),
       coalesce(sum(amount_minor) FILTER (WHERE state = 'missing'), 0),
       coalesce(sum(amount_minor) FILTER (WHERE state = 'dead_lettered'), 0)
  FROM items
 GROUP BY run_id, shard, provider, currency;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON run_breakdown TO reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE run_breakdown;
