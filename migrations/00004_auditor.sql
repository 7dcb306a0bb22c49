-- +goose Up
-- The auditor's side of the ledger: views for the common audit questions, a
-- read-only group role (reconcile_auditor) and an application role
-- (reconcile_app) that may append to the history but never rewrite it.
-- docs/ledger.md is the handbook for all of it.

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

CREATE VIEW discrepancies AS
SELECT r.run_id,
       r.reconciliation_id,
       r.business_date,
       r.generation,
       i.transaction_id,
       i.account_id,
       d.value ->> 'field'    AS field,
       d.value ->> 'expected' AS expected,
       d.value ->> 'provider' AS provider,
       i.terminal_at          AS checked_at
  FROM items i
  JOIN runs r ON r.run_id = i.run_id
  CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(i.differences) = 'array' THEN i.differences ELSE '[]'::jsonb END) d
 WHERE i.state = 'mismatched';

COMMENT ON VIEW discrepancies IS 'One row per differing field of each mismatched item, with the expected (source) and the provider''s value, from items.differences.';
COMMENT ON COLUMN discrepancies.run_id IS 'The run.';
COMMENT ON COLUMN discrepancies.reconciliation_id IS 'Human name of the run.';
COMMENT ON COLUMN discrepancies.business_date IS 'Business date of the run.';
COMMENT ON COLUMN discrepancies.generation IS 'Generation of the run.';
COMMENT ON COLUMN discrepancies.transaction_id IS 'The mismatched payment.';
COMMENT ON COLUMN discrepancies.account_id IS 'Account of the payment.';
COMMENT ON COLUMN discrepancies.field IS 'The differing field: amount_minor, currency or status.';
COMMENT ON COLUMN discrepancies.expected IS 'The value in the source (the game''s record), as text.';
COMMENT ON COLUMN discrepancies.provider IS 'The value the provider reported, as text.';
COMMENT ON COLUMN discrepancies.checked_at IS 'When the item was found mismatched (items.terminal_at).';

CREATE VIEW dead_lettered_items AS
SELECT r.run_id,
       r.reconciliation_id,
       r.business_date,
       r.generation,
       i.transaction_id,
       i.account_id,
       i.idempotency_key,
       i.attempts,
       i.throttles,
       t.reason,
       t.http_status,
       t.details,
       t.at    AS dead_lettered_at,
       t.actor AS dead_lettered_by
  FROM items i
  JOIN runs r ON r.run_id = i.run_id
  LEFT JOIN transitions t
         ON t.run_id = i.run_id AND t.transaction_id = i.transaction_id AND t.seq = i.history_len
 WHERE i.state = 'dead_lettered';

COMMENT ON VIEW dead_lettered_items IS 'Items currently dead-lettered, with the reason and error of the transition that dead-lettered them. A redriven item leaves this view (its history keeps the dead letter).';
COMMENT ON COLUMN dead_lettered_items.run_id IS 'The run.';
COMMENT ON COLUMN dead_lettered_items.reconciliation_id IS 'Human name of the run.';
COMMENT ON COLUMN dead_lettered_items.business_date IS 'Business date of the run.';
COMMENT ON COLUMN dead_lettered_items.generation IS 'Generation of the run.';
COMMENT ON COLUMN dead_lettered_items.transaction_id IS 'The dead-lettered payment.';
COMMENT ON COLUMN dead_lettered_items.account_id IS 'Account of the payment.';
COMMENT ON COLUMN dead_lettered_items.idempotency_key IS 'Idempotency key sent to the provider for this item.';
COMMENT ON COLUMN dead_lettered_items.attempts IS 'Provider calls made for the item, throttled ones included.';
COMMENT ON COLUMN dead_lettered_items.throttles IS 'Provider calls for the item answered 429.';
COMMENT ON COLUMN dead_lettered_items.reason IS 'Why it was dead-lettered: max_attempts, throttle_deadline, poison, http_400, ...';
COMMENT ON COLUMN dead_lettered_items.http_status IS 'HTTP status of the last provider call; NULL for network errors.';
COMMENT ON COLUMN dead_lettered_items.details IS 'Structured detail of the dead-lettering transition: error text, body excerpt.';
COMMENT ON COLUMN dead_lettered_items.dead_lettered_at IS 'When the item was dead-lettered.';
COMMENT ON COLUMN dead_lettered_items.dead_lettered_by IS 'Consumer (host:pid) that dead-lettered the item.';

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

CREATE VIEW transaction_history AS
SELECT t.transaction_id,
       r.business_date,
       r.generation,
       r.reconciliation_id,
       t.run_id,
       i.account_id,
       t.seq,
       t.at,
       t.from_state,
       t.to_state,
       t.attempt,
       t.http_status,
       t.reason,
       t.retry_after_ms,
       t.details,
       t.actor,
       t.transition_id,
       encode(t.prev_hash, 'hex') AS prev_hash,
       encode(t.hash, 'hex')      AS hash
  FROM transitions t
  JOIN items i ON i.run_id = t.run_id AND i.transaction_id = t.transaction_id
  JOIN runs r ON r.run_id = t.run_id;

COMMENT ON VIEW transaction_history IS 'Every recorded state change of every transaction, across runs and generations, with its run. Order by business_date, generation, seq for the story of one transaction.';
COMMENT ON COLUMN transaction_history.transaction_id IS 'The payment''s transaction id.';
COMMENT ON COLUMN transaction_history.business_date IS 'Business date of the run.';
COMMENT ON COLUMN transaction_history.generation IS 'Generation of the run.';
COMMENT ON COLUMN transaction_history.reconciliation_id IS 'Human name of the run.';
COMMENT ON COLUMN transaction_history.run_id IS 'The run.';
COMMENT ON COLUMN transaction_history.account_id IS 'Account of the payment.';
COMMENT ON COLUMN transaction_history.seq IS 'Position in the item''s history within the run, from 1.';
COMMENT ON COLUMN transaction_history.at IS 'When the change was recorded.';
COMMENT ON COLUMN transaction_history.from_state IS 'State before the change.';
COMMENT ON COLUMN transaction_history.to_state IS 'State after the change.';
COMMENT ON COLUMN transaction_history.attempt IS 'Provider call count of the item at the change (0 for operator actions).';
COMMENT ON COLUMN transaction_history.http_status IS 'HTTP status of the provider call behind the change; NULL for network errors and operator actions.';
COMMENT ON COLUMN transaction_history.reason IS 'Why the state changed (matched, http_503, throttled, max_attempts, redrive, ...).';
COMMENT ON COLUMN transaction_history.retry_after_ms IS 'For retries: the delay chosen before the next attempt, in milliseconds.';
COMMENT ON COLUMN transaction_history.details IS 'Structured detail of the change.';
COMMENT ON COLUMN transaction_history.actor IS 'Who recorded the change: consumer (host:pid) or operator (user@host).';
COMMENT ON COLUMN transaction_history.transition_id IS 'Global insertion order of the change.';
COMMENT ON COLUMN transaction_history.prev_hash IS 'Hex SHA-256 of the previous change of the same item; NULL for the first.';
COMMENT ON COLUMN transaction_history.hash IS 'Hex SHA-256 chaining this change to the previous one (see docs/ledger.md).';

-- Roles are cluster-wide, and several databases of one cluster (parallel
-- test databases, staging next to production) migrate concurrently: a
-- concurrent CREATE ROLE fails with unique_violation rather than
-- duplicate_object, so both mean "already there". Only the creator comments
-- the role: concurrent COMMENT ON ROLE could collide on the shared catalog.
-- A migrating user without CREATEROLE (common on managed servers) skips the
-- roles with a notice; an administrator creates them and migrates again, or
-- grants by hand as docs/ledger.md shows.
-- +goose StatementBegin
DO $$
DECLARE
    can_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user);
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        IF can_create THEN
            BEGIN
                CREATE ROLE reconcile_auditor NOLOGIN;
                COMMENT ON ROLE reconcile_auditor IS 'reconcile: read-only access to the ledger tables and auditor views. Grant it to a login role with `reconcile audit grant ROLE`.';
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        ELSE
            RAISE NOTICE 'role reconcile_auditor not created: % lacks CREATEROLE', current_user;
        END IF;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_app') THEN
        IF can_create THEN
            BEGIN
                CREATE ROLE reconcile_app NOLOGIN;
                COMMENT ON ROLE reconcile_app IS 'reconcile: what the consumer and enqueuer need; may append transitions but never update, delete or truncate them.';
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        ELSE
            RAISE NOTICE 'role reconcile_app not created: % lacks CREATEROLE', current_user;
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd

-- Nobody but the owner gets anything by default.
REVOKE ALL ON runs, items, transitions, run_shards, account_progress, run_completions, account_completions,
              run_summary, discrepancies, dead_lettered_items, account_completion, transaction_history
    FROM PUBLIC;

-- Functions are executable by PUBLIC unless revoked. The queue's and the
-- limiter's functions (earlier migrations) and any later ones (default
-- privileges of the migrating role) are for the application only.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC;
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- +goose StatementBegin
DO $$
BEGIN
    -- The auditor: SELECT on the ledger, table by table, and nothing else.
    -- The queue's and the limiter's tables are deliberately absent.
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT USAGE ON SCHEMA public TO reconcile_auditor;
        GRANT SELECT ON runs, items, transitions, run_shards, account_progress, run_completions, account_completions,
                        run_summary, discrepancies, dead_lettered_items, account_completion, transaction_history
            TO reconcile_auditor;
        -- transition_payload only reads its argument; auditors may recompute hashes in SQL.
        GRANT EXECUTE ON FUNCTION transition_payload(transitions) TO reconcile_auditor;
    END IF;

    -- The application: everything it needs, except rewriting history.
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_app') THEN
        GRANT USAGE ON SCHEMA public TO reconcile_app;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO reconcile_app;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO reconcile_app;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO reconcile_app;
        REVOKE UPDATE, DELETE, TRUNCATE ON transitions FROM reconcile_app;
        REVOKE ALL ON goose_db_version FROM reconcile_app;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO reconcile_app;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO reconcile_app;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO reconcile_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_app') THEN
        ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE EXECUTE ON FUNCTIONS FROM reconcile_app;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE USAGE, SELECT, UPDATE ON SEQUENCES FROM reconcile_app;
        ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM reconcile_app;
        REVOKE ALL ON ALL TABLES IN SCHEMA public FROM reconcile_app;
        REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM reconcile_app;
        REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM reconcile_app;
        REVOKE ALL ON SCHEMA public FROM reconcile_app;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA public FROM reconcile_auditor;
        REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM reconcile_auditor;
        REVOKE ALL ON SCHEMA public FROM reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO PUBLIC;
-- The roles are cluster-wide and may serve other databases: they stay.
DROP VIEW transaction_history, account_completion, dead_lettered_items, discrepancies, run_summary;
