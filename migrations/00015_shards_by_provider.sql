-- +goose Up
-- A run's completion counters by provider: each shard of a run keeps one
-- counter row per provider of its items, so a run's figures by provider
-- (items, outcomes, provider calls, throttles) are a sum over a few rows,
-- like its totals, instead of a count of its items at print time. A night
-- of one provider keeps one row per shard, as before; on a night of several
-- the consumers of one provider no longer wait for the counter rows of
-- another's items.

ALTER TABLE run_shards ADD COLUMN provider text NOT NULL DEFAULT '';
COMMENT ON COLUMN run_shards.provider IS 'The provider of the items this row counts (items.provider); empty: the default provider, and the row of a shard without items.';
COMMENT ON TABLE run_shards IS 'Completion bookkeeping: open items of a run and the totals of its finished ones, split over shards (and, within a shard, over the items'' providers) so concurrent consumers do not serialise on one row.';

ALTER TABLE run_shards DROP CONSTRAINT run_shards_pkey;
ALTER TABLE run_shards ADD PRIMARY KEY (run_id, shard, provider);

-- Runs recorded before this migration whose items name providers: their
-- counter rows are counted again from their items, one per shard and
-- provider (the runs are found in run_breakdown, not by reading items).
CREATE TEMP TABLE split_runs ON COMMIT DROP AS
SELECT DISTINCT run_id FROM run_breakdown WHERE provider <> '';

DELETE FROM run_shards s USING split_runs r WHERE s.run_id = r.run_id;

INSERT INTO run_shards (run_id, shard, provider, remaining, matched, mismatched, missing, dead_lettered, cancelled,
                        provider_calls, throttles)
SELECT r.run_id, g.s, coalesce(c.provider, ''), coalesce(c.remaining, 0), coalesce(c.matched, 0),
       coalesce(c.mismatched, 0), coalesce(c.missing, 0), coalesce(c.dead_lettered, 0), coalesce(c.cancelled, 0),
       coalesce(c.provider_calls, 0), coalesce(c.throttles, 0)
  FROM split_runs r
 CROSS JOIN generate_series(0, 15) g(s)
  LEFT JOIN (SELECT run_id, shard, provider,
                    count(*) FILTER (WHERE state IN ('queued', 'retry_scheduled')) AS remaining,
                    count(*) FILTER (WHERE state = 'matched') AS matched,
                    count(*) FILTER (WHERE state = 'mismatched') AS mismatched,
                    count(*) FILTER (WHERE state = 'missing') AS missing,
                    count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
                    count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
                    coalesce(sum(attempts) FILTER (WHERE state NOT IN ('queued', 'retry_scheduled')), 0) AS provider_calls,
                    coalesce(sum(throttles) FILTER (WHERE state NOT IN ('queued', 'retry_scheduled')), 0) AS throttles
               FROM items WHERE run_id IN (SELECT run_id FROM split_runs)
              GROUP BY run_id, shard, provider) c ON c.run_id = r.run_id AND c.shard = g.s;

-- +goose Down
CREATE TEMP TABLE merged_shards ON COMMIT DROP AS
SELECT run_id, shard, sum(remaining)::int AS remaining, sum(matched)::int AS matched, sum(mismatched)::int AS mismatched,
       sum(missing)::int AS missing, sum(dead_lettered)::int AS dead_lettered, sum(cancelled)::int AS cancelled,
       sum(provider_calls)::bigint AS provider_calls, sum(throttles)::bigint AS throttles
  FROM run_shards GROUP BY run_id, shard HAVING count(*) > 1;
DELETE FROM run_shards s USING merged_shards m WHERE s.run_id = m.run_id AND s.shard = m.shard;
INSERT INTO run_shards (run_id, shard, remaining, matched, mismatched, missing, dead_lettered, cancelled, provider_calls, throttles)
SELECT run_id, shard, remaining, matched, mismatched, missing, dead_lettered, cancelled, provider_calls, throttles
  FROM merged_shards;
ALTER TABLE run_shards DROP CONSTRAINT run_shards_pkey;
ALTER TABLE run_shards ADD PRIMARY KEY (run_id, shard);
ALTER TABLE run_shards DROP COLUMN provider;
COMMENT ON TABLE run_shards IS 'Completion bookkeeping: open items of a run, split over shards so concurrent consumers do not serialise on one row.';
