-- +goose Up
-- The completion counters carry the totals of their finished items, so an
-- account's or a run's completion record is read from its counter rows
-- instead of counted from the items. Each terminal transition adds its item's
-- outcome, calls and throttles to the rows it counts down; a requeue takes
-- them out again. Nothing reads items by account any more, so their index
-- goes, and a bulk enqueue no longer pays for it.

ALTER TABLE account_progress
    ADD COLUMN matched        integer NOT NULL DEFAULT 0 CHECK (matched >= 0),
    ADD COLUMN mismatched     integer NOT NULL DEFAULT 0 CHECK (mismatched >= 0),
    ADD COLUMN missing        integer NOT NULL DEFAULT 0 CHECK (missing >= 0),
    ADD COLUMN dead_lettered  integer NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    ADD COLUMN provider_calls bigint  NOT NULL DEFAULT 0 CHECK (provider_calls >= 0),
    ADD COLUMN throttles      bigint  NOT NULL DEFAULT 0 CHECK (throttles >= 0);

ALTER TABLE run_shards
    ADD COLUMN matched        integer NOT NULL DEFAULT 0 CHECK (matched >= 0),
    ADD COLUMN mismatched     integer NOT NULL DEFAULT 0 CHECK (mismatched >= 0),
    ADD COLUMN missing        integer NOT NULL DEFAULT 0 CHECK (missing >= 0),
    ADD COLUMN dead_lettered  integer NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    ADD COLUMN provider_calls bigint  NOT NULL DEFAULT 0 CHECK (provider_calls >= 0),
    ADD COLUMN throttles      bigint  NOT NULL DEFAULT 0 CHECK (throttles >= 0);

-- Runs recorded before this migration: fill the totals from their items.
UPDATE account_progress p
   SET matched = t.matched, mismatched = t.mismatched, missing = t.missing,
       dead_lettered = t.dead_lettered, provider_calls = t.provider_calls, throttles = t.throttles
  FROM (SELECT run_id, account_id,
               count(*) FILTER (WHERE state = 'matched') AS matched,
               count(*) FILTER (WHERE state = 'mismatched') AS mismatched,
               count(*) FILTER (WHERE state = 'missing') AS missing,
               count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
               sum(attempts) AS provider_calls, sum(throttles) AS throttles
          FROM items
         WHERE state IN ('matched', 'mismatched', 'missing', 'dead_lettered')
         GROUP BY run_id, account_id) t
 WHERE p.run_id = t.run_id AND p.account_id = t.account_id;

UPDATE run_shards s
   SET matched = t.matched, mismatched = t.mismatched, missing = t.missing,
       dead_lettered = t.dead_lettered, provider_calls = t.provider_calls, throttles = t.throttles
  FROM (SELECT run_id, shard,
               count(*) FILTER (WHERE state = 'matched') AS matched,
               count(*) FILTER (WHERE state = 'mismatched') AS mismatched,
               count(*) FILTER (WHERE state = 'missing') AS missing,
               count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
               sum(attempts) AS provider_calls, sum(throttles) AS throttles
          FROM items
         WHERE state IN ('matched', 'mismatched', 'missing', 'dead_lettered')
         GROUP BY run_id, shard) t
 WHERE s.run_id = t.run_id AND s.shard = t.shard;

DROP INDEX items_account;

-- One index serves both the uniqueness of an item's sequence numbers and the
-- lookup of a transaction's history by id; two cost every transition an
-- extra index insertion.
ALTER TABLE transitions DROP CONSTRAINT transitions_run_id_transaction_id_seq_key;
DROP INDEX transitions_item;
CREATE UNIQUE INDEX transitions_item ON transitions (transaction_id, run_id, seq);

COMMENT ON COLUMN account_progress.matched IS 'Terminal items of this account that matched.';
COMMENT ON COLUMN account_progress.mismatched IS 'Terminal items of this account that mismatched.';
COMMENT ON COLUMN account_progress.missing IS 'Terminal items of this account missing at the provider.';
COMMENT ON COLUMN account_progress.dead_lettered IS 'Terminal items of this account that were dead-lettered (a requeue takes them out again).';
COMMENT ON COLUMN account_progress.provider_calls IS 'Provider calls made for this account''s terminal items.';
COMMENT ON COLUMN account_progress.throttles IS 'Provider calls for this account''s terminal items answered 429.';
COMMENT ON COLUMN run_shards.matched IS 'Terminal items of this shard that matched.';
COMMENT ON COLUMN run_shards.mismatched IS 'Terminal items of this shard that mismatched.';
COMMENT ON COLUMN run_shards.missing IS 'Terminal items of this shard missing at the provider.';
COMMENT ON COLUMN run_shards.dead_lettered IS 'Terminal items of this shard that were dead-lettered (a requeue takes them out again).';
COMMENT ON COLUMN run_shards.provider_calls IS 'Provider calls made for this shard''s terminal items.';
COMMENT ON COLUMN run_shards.throttles IS 'Provider calls for this shard''s terminal items answered 429.';

-- +goose Down
DROP INDEX transitions_item;
CREATE INDEX transitions_item ON transitions (transaction_id, run_id, seq);
ALTER TABLE transitions ADD UNIQUE (run_id, transaction_id, seq);
CREATE INDEX items_account ON items (run_id, account_id);
ALTER TABLE run_shards
    DROP COLUMN matched, DROP COLUMN mismatched, DROP COLUMN missing,
    DROP COLUMN dead_lettered, DROP COLUMN provider_calls, DROP COLUMN throttles;
ALTER TABLE account_progress
    DROP COLUMN matched, DROP COLUMN mismatched, DROP COLUMN missing,
    DROP COLUMN dead_lettered, DROP COLUMN provider_calls, DROP COLUMN throttles;
