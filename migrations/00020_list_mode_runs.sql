-- +goose Up
-- List mode, two more things a run records.
--
-- How its items are checked: the mode of the first consumer that claimed
-- one of them (consume --mode). Later consumers follow it, so a consumer
-- in lookup mode cannot complete by lookups a run that another is listing,
-- and a consumer in list mode does not list a run others look up.

ALTER TABLE runs ADD COLUMN check_mode text CHECK (check_mode IN ('lookup', 'list', 'auto'));

COMMENT ON COLUMN runs.check_mode IS 'How the run''s items are checked against the provider, chosen by the first consumer to claim one of them (consume --mode): lookup (each item by its id), list (the provider''s list of the date first) or auto (list where the provider''s profile has a list request). Later consumers follow it. NULL until a consumer claims one of its items.';

-- A run's breakdown counts its unexpected items (list mode: records the
-- provider listed that the payment file lacks) and sums the provider's
-- amounts of them, by provider and currency: what is at stake for such a
-- record is the amount the provider holds, as the file has none. The
-- transaction that records a listing's unexpected items adds them here, on
-- the shard that counts them in run_shards.

ALTER TABLE run_breakdown ADD COLUMN unexpected integer NOT NULL DEFAULT 0 CHECK (unexpected >= 0);
ALTER TABLE run_breakdown ADD COLUMN unexpected_minor bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN run_breakdown.unexpected IS 'Unexpected items: records the provider listed for the run that no payment of the file matches (list mode).';
COMMENT ON COLUMN run_breakdown.unexpected_minor IS 'Sum of the provider''s amounts (items.provider_amount_minor, minor units of currency) of the unexpected items.';

-- Runs whose unexpected items were recorded before this migration: one
-- scan of their items.
INSERT INTO run_breakdown AS b (run_id, shard, provider, currency, item_count, unexpected, unexpected_minor)
SELECT run_id, shard, provider, currency, count(*), count(*), coalesce(sum(provider_amount_minor), 0)
  FROM items
 WHERE state = 'unexpected'
 GROUP BY run_id, shard, provider, currency
    ON CONFLICT (run_id, shard, provider, currency) DO UPDATE
   SET item_count = b.item_count + excluded.item_count, unexpected = excluded.unexpected,
       unexpected_minor = excluded.unexpected_minor;

-- +goose Down
DELETE FROM run_breakdown WHERE item_count = unexpected AND unexpected > 0;
UPDATE run_breakdown SET item_count = item_count - unexpected WHERE unexpected > 0;
ALTER TABLE run_breakdown DROP COLUMN unexpected_minor;
ALTER TABLE run_breakdown DROP COLUMN unexpected;
ALTER TABLE runs DROP COLUMN check_mode;
