-- +goose Up
-- A run's shard counters also count what its open items did, so a run in
-- progress is read from its counter rows as a complete one is, whatever its
-- size: every call and throttle is added to the item's shard row as it is
-- recorded (before, when the item closed), and retry_scheduled counts the
-- items waiting for a retry (the other open items are queued). A requeue no
-- longer takes a dead letter's calls off its shard row. The account rows
-- keep counting their closed items' calls, which their completion records
-- state. Every consumer must run this version: an earlier one would add an
-- item's calls again when it closes.

ALTER TABLE run_shards
    ADD COLUMN retry_scheduled integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT run_shards_retry_scheduled_open CHECK (retry_scheduled BETWEEN 0 AND remaining);

-- Runs open before this migration: add their open items' calls and count
-- their retries, through each open run's range of items' primary key.
UPDATE run_shards p
   SET provider_calls = p.provider_calls + o.calls, throttles = p.throttles + o.throttles,
       retry_scheduled = o.retry_scheduled
  FROM (SELECT run_id, shard, provider, sum(attempts) AS calls, sum(throttles) AS throttles,
               count(*) FILTER (WHERE state = 'retry_scheduled') AS retry_scheduled
          FROM items
         WHERE run_id IN (SELECT run_id FROM run_shards WHERE remaining > 0)
           AND state IN ('queued', 'retry_scheduled')
         GROUP BY run_id, shard, provider) o
 WHERE p.run_id = o.run_id AND p.shard = o.shard AND p.provider = o.provider;

COMMENT ON COLUMN run_shards.provider_calls IS 'Provider calls made for this row''s items, open or terminal, each added as it is recorded.';
COMMENT ON COLUMN run_shards.throttles IS 'Provider calls for this row''s items answered 429, open or terminal.';
COMMENT ON COLUMN run_shards.retry_scheduled IS 'Open items of this row waiting for a retry (state retry_scheduled); the others of remaining are queued.';

-- +goose Down
UPDATE run_shards p
   SET provider_calls = p.provider_calls - o.calls, throttles = p.throttles - o.throttles
  FROM (SELECT run_id, shard, provider, sum(attempts) AS calls, sum(throttles) AS throttles
          FROM items
         WHERE run_id IN (SELECT run_id FROM run_shards WHERE remaining > 0)
           AND state IN ('queued', 'retry_scheduled')
         GROUP BY run_id, shard, provider) o
 WHERE p.run_id = o.run_id AND p.shard = o.shard AND p.provider = o.provider;

ALTER TABLE run_shards DROP CONSTRAINT run_shards_retry_scheduled_open, DROP COLUMN retry_scheduled;

COMMENT ON COLUMN run_shards.provider_calls IS 'Provider calls made for this shard''s terminal items.';
COMMENT ON COLUMN run_shards.throttles IS 'Provider calls for this shard''s terminal items answered 429.';
