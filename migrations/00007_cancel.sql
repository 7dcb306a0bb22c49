-- +goose Up
-- Withdrawing a run: `reconcile cancel` (and `enqueue --rerun all` for the
-- generation it supersedes) moves every open item to the terminal state
-- cancelled through a recorded transition, dead-letters its message with
-- reason cancelled, and records who withdrew the run and why. The counters
-- and the completion records count cancelled items like any other outcome,
-- so the completion join of a cancelled run is still written.

ALTER TABLE items DROP CONSTRAINT items_state_check;
ALTER TABLE items ADD CONSTRAINT items_state_check
    CHECK (state IN ('queued', 'retry_scheduled', 'matched', 'mismatched', 'missing', 'dead_lettered', 'cancelled'));
COMMENT ON COLUMN items.state IS 'Current state: queued, retry_scheduled, or a terminal outcome matched, mismatched, missing, dead_lettered, cancelled.';

ALTER TABLE runs
    ADD COLUMN cancelled_at  timestamptz,
    ADD COLUMN cancelled_by  text,
    ADD COLUMN cancel_reason text;
COMMENT ON COLUMN runs.cancelled_at IS 'When the run was withdrawn (`reconcile cancel`, or superseded by `enqueue --rerun all`); NULL if never.';
COMMENT ON COLUMN runs.cancelled_by IS 'Who withdrew the run (user@host); NULL if never.';
COMMENT ON COLUMN runs.cancel_reason IS 'Why the run was withdrawn, as the operator gave it (or "superseded by generation N"); NULL if never.';

ALTER TABLE run_shards ADD COLUMN cancelled integer NOT NULL DEFAULT 0 CHECK (cancelled >= 0);
ALTER TABLE account_progress ADD COLUMN cancelled integer NOT NULL DEFAULT 0 CHECK (cancelled >= 0);
ALTER TABLE run_completions ADD COLUMN cancelled integer NOT NULL DEFAULT 0 CHECK (cancelled >= 0);
ALTER TABLE account_completions ADD COLUMN cancelled integer NOT NULL DEFAULT 0 CHECK (cancelled >= 0);
COMMENT ON COLUMN run_shards.cancelled IS 'Terminal items of this shard that were cancelled (the run was withdrawn before they were checked).';
COMMENT ON COLUMN account_progress.cancelled IS 'Terminal items of this account that were cancelled.';
COMMENT ON COLUMN run_completions.cancelled IS 'Items withdrawn by a cancel before they were checked.';
COMMENT ON COLUMN account_completions.cancelled IS 'Cancelled items of the account.';

-- New columns go at the end of a replaced view.
CREATE OR REPLACE VIEW run_summary AS
SELECT r.run_id,
       r.reconciliation_id,
       r.business_date,
       r.generation,
       r.trigger,
       r.triggered_by,
       r.source,
       r.item_count,
       coalesce(s.queued, 0)          AS queued,
       coalesce(s.retry_scheduled, 0) AS retry_scheduled,
       coalesce(s.matched, 0)         AS matched,
       coalesce(s.mismatched, 0)      AS mismatched,
       coalesce(s.missing, 0)         AS missing,
       coalesce(s.dead_lettered, 0)   AS dead_lettered,
       coalesce(s.open_items, 0)      AS open_items,
       coalesce(s.provider_calls, 0)  AS provider_calls,
       coalesce(s.throttles, 0)       AS throttles,
       r.created_at,
       r.completed_at,
       r.completed_at - r.created_at  AS duration,
       c.round                        AS completion_round,
       c.completed_by,
       coalesce(s.cancelled, 0)       AS cancelled,
       r.cancelled_at,
       r.cancelled_by,
       r.cancel_reason
  FROM runs r
  LEFT JOIN LATERAL (
        SELECT count(*) FILTER (WHERE i.state = 'queued')          AS queued,
               count(*) FILTER (WHERE i.state = 'retry_scheduled') AS retry_scheduled,
               count(*) FILTER (WHERE i.state = 'matched')         AS matched,
               count(*) FILTER (WHERE i.state = 'mismatched')      AS mismatched,
               count(*) FILTER (WHERE i.state = 'missing')         AS missing,
               count(*) FILTER (WHERE i.state = 'dead_lettered')   AS dead_lettered,
               count(*) FILTER (WHERE i.state = 'cancelled')       AS cancelled,
               count(*) FILTER (WHERE i.state IN ('queued', 'retry_scheduled')) AS open_items,
               sum(i.attempts)::bigint                             AS provider_calls,
               sum(i.throttles)::bigint                            AS throttles
          FROM items i
         WHERE i.run_id = r.run_id
       ) s ON true
  LEFT JOIN run_completions c ON c.run_id = r.run_id;

COMMENT ON COLUMN run_summary.cancelled IS 'Items withdrawn by a cancel before they were checked.';
COMMENT ON COLUMN run_summary.cancelled_at IS 'When the run was withdrawn; NULL if never.';
COMMENT ON COLUMN run_summary.cancelled_by IS 'Who withdrew the run; NULL if never.';
COMMENT ON COLUMN run_summary.cancel_reason IS 'Why the run was withdrawn; NULL if never.';

CREATE OR REPLACE VIEW account_completion AS
SELECT r.run_id,
       r.reconciliation_id,
       r.business_date,
       r.generation,
       coalesce(p.account_id, c.account_id) AS account_id,
       coalesce(p.item_count, c.items)      AS items,
       p.remaining,
       c.account_id IS NOT NULL AND coalesce(p.remaining, 0) = 0 AS completed,
       c.round,
       c.matched,
       c.mismatched,
       c.missing,
       c.dead_lettered,
       c.provider_calls,
       c.throttles,
       c.completed_at,
       c.completed_by,
       c.cancelled
  FROM account_progress p
  FULL JOIN account_completions c ON c.run_id = p.run_id AND c.account_id = p.account_id
  JOIN runs r ON r.run_id = coalesce(p.run_id, c.run_id);

COMMENT ON COLUMN account_completion.cancelled IS 'Cancelled items of the account; NULL until completed.';

-- +goose Down
DROP VIEW account_completion, run_summary;
ALTER TABLE account_completions DROP COLUMN cancelled;
ALTER TABLE run_completions DROP COLUMN cancelled;
ALTER TABLE account_progress DROP COLUMN cancelled;
ALTER TABLE run_shards DROP COLUMN cancelled;
ALTER TABLE runs DROP COLUMN cancelled_at, DROP COLUMN cancelled_by, DROP COLUMN cancel_reason;
ALTER TABLE items DROP CONSTRAINT items_state_check;
ALTER TABLE items ADD CONSTRAINT items_state_check
    CHECK (state IN ('queued', 'retry_scheduled', 'matched', 'mismatched', 'missing', 'dead_lettered'));

-- The views as 00004_auditor.sql made them.
CREATE VIEW run_summary AS
SELECT r.run_id,
       r.reconciliation_id,
       r.business_date,
       r.generation,
       r.trigger,
       r.triggered_by,
       r.source,
       r.item_count,
       coalesce(s.queued, 0)          AS queued,
       coalesce(s.retry_scheduled, 0) AS retry_scheduled,
       coalesce(s.matched, 0)         AS matched,
       coalesce(s.mismatched, 0)      AS mismatched,
       coalesce(s.missing, 0)         AS missing,
       coalesce(s.dead_lettered, 0)   AS dead_lettered,
       coalesce(s.open_items, 0)      AS open_items,
       coalesce(s.provider_calls, 0)  AS provider_calls,
       coalesce(s.throttles, 0)       AS throttles,
       r.created_at,
       r.completed_at,
       r.completed_at - r.created_at  AS duration,
       c.round                        AS completion_round,
       c.completed_by
  FROM runs r
  LEFT JOIN LATERAL (
        SELECT count(*) FILTER (WHERE i.state = 'queued')          AS queued,
               count(*) FILTER (WHERE i.state = 'retry_scheduled') AS retry_scheduled,
               count(*) FILTER (WHERE i.state = 'matched')         AS matched,
               count(*) FILTER (WHERE i.state = 'mismatched')      AS mismatched,
               count(*) FILTER (WHERE i.state = 'missing')         AS missing,
               count(*) FILTER (WHERE i.state = 'dead_lettered')   AS dead_lettered,
               count(*) FILTER (WHERE i.state IN ('queued', 'retry_scheduled')) AS open_items,
               sum(i.attempts)::bigint                             AS provider_calls,
               sum(i.throttles)::bigint                            AS throttles
          FROM items i
         WHERE i.run_id = r.run_id
       ) s ON true
  LEFT JOIN run_completions c ON c.run_id = r.run_id;

COMMENT ON VIEW run_summary IS 'One row per run (business date and generation): who started it, item counts by current state, provider calls, throttles and completion. Counts are live: they change while consumers work.';
COMMENT ON COLUMN run_summary.run_id IS 'The run (runs.run_id).';
COMMENT ON COLUMN run_summary.reconciliation_id IS 'Human name of the run, e.g. nightly-2026-10-24 or nightly-2026-10-24-g2.';
COMMENT ON COLUMN run_summary.business_date IS 'The day whose payments the run reconciles.';
COMMENT ON COLUMN run_summary.generation IS '1 for the first run of the date, N for the N-th full run of it.';
COMMENT ON COLUMN run_summary.trigger IS 'cron (the scheduler) or manual (an operator).';
COMMENT ON COLUMN run_summary.triggered_by IS 'Who started the run (user and host of the enqueuing process).';
COMMENT ON COLUMN run_summary.source IS 'Where the payments came from (file path, - for stdin, table:NAME).';
COMMENT ON COLUMN run_summary.item_count IS 'Payments in the run, as recorded at enqueue time.';
COMMENT ON COLUMN run_summary.queued IS 'Items waiting for their first (or redriven) provider call.';
COMMENT ON COLUMN run_summary.retry_scheduled IS 'Items waiting for a retry after a throttle or a transient error.';
COMMENT ON COLUMN run_summary.matched IS 'Items whose provider record equals the expected one.';
COMMENT ON COLUMN run_summary.mismatched IS 'Items whose provider record differs in at least one field (see discrepancies).';
COMMENT ON COLUMN run_summary.missing IS 'Items the provider does not know (HTTP 404).';
COMMENT ON COLUMN run_summary.dead_lettered IS 'Items given up on (see dead_lettered_items).';
COMMENT ON COLUMN run_summary.open_items IS 'Items not yet in a terminal state (queued + retry_scheduled).';
COMMENT ON COLUMN run_summary.provider_calls IS 'Provider calls made for the run''s items, throttled ones included.';
COMMENT ON COLUMN run_summary.throttles IS 'Provider calls answered 429 Too Many Requests.';
COMMENT ON COLUMN run_summary.created_at IS 'When the run was enqueued.';
COMMENT ON COLUMN run_summary.completed_at IS 'When the last item reached a terminal state; NULL while items are open.';
COMMENT ON COLUMN run_summary.duration IS 'completed_at - created_at; NULL while the run is open.';
COMMENT ON COLUMN run_summary.completion_round IS 'run_completions.round: 1 when first completed, +1 each time redriven items finished the run again; NULL if never completed.';
COMMENT ON COLUMN run_summary.completed_by IS 'Consumer (host:pid) that recorded the completion; NULL if never completed.';

CREATE VIEW account_completion AS
SELECT r.run_id,
       r.reconciliation_id,
       r.business_date,
       r.generation,
       coalesce(p.account_id, c.account_id) AS account_id,
       coalesce(p.item_count, c.items)      AS items,
       p.remaining,
       c.account_id IS NOT NULL AND coalesce(p.remaining, 0) = 0 AS completed,
       c.round,
       c.matched,
       c.mismatched,
       c.missing,
       c.dead_lettered,
       c.provider_calls,
       c.throttles,
       c.completed_at,
       c.completed_by
  FROM account_progress p
  FULL JOIN account_completions c ON c.run_id = p.run_id AND c.account_id = p.account_id
  JOIN runs r ON r.run_id = coalesce(p.run_id, c.run_id);

COMMENT ON VIEW account_completion IS 'One row per account of each run: open items and, once the account''s last item is terminal, its completion record (the per-account join).';
COMMENT ON COLUMN account_completion.run_id IS 'The run.';
COMMENT ON COLUMN account_completion.reconciliation_id IS 'Human name of the run.';
COMMENT ON COLUMN account_completion.business_date IS 'Business date of the run.';
COMMENT ON COLUMN account_completion.generation IS 'Generation of the run.';
COMMENT ON COLUMN account_completion.account_id IS 'The account.';
COMMENT ON COLUMN account_completion.items IS 'Items of the account in the run.';
COMMENT ON COLUMN account_completion.remaining IS 'Items of the account not yet terminal.';
COMMENT ON COLUMN account_completion.completed IS 'True when the account''s completion record exists and no item is open.';
COMMENT ON COLUMN account_completion.round IS '1 when first completed, +1 each time redriven items finished the account again; NULL until completed.';
COMMENT ON COLUMN account_completion.matched IS 'Matched items of the account; NULL until completed.';
COMMENT ON COLUMN account_completion.mismatched IS 'Mismatched items of the account; NULL until completed.';
COMMENT ON COLUMN account_completion.missing IS 'Items of the account missing at the provider; NULL until completed.';
COMMENT ON COLUMN account_completion.dead_lettered IS 'Dead-lettered items of the account; NULL until completed.';
COMMENT ON COLUMN account_completion.provider_calls IS 'Provider calls for the account''s items; NULL until completed.';
COMMENT ON COLUMN account_completion.throttles IS 'Provider calls for the account''s items answered 429; NULL until completed.';
COMMENT ON COLUMN account_completion.completed_at IS 'When the account''s last item reached a terminal state.';
COMMENT ON COLUMN account_completion.completed_by IS 'Consumer (host:pid) that recorded the account''s completion.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON run_summary, account_completion TO reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd
