-- +goose Up
-- Reconciling from the provider's own list for the date. A consumer in list
-- mode pages through the provider's list of a run's business date (plus a
-- margin) and stores each page's records in provider_records together with
-- the listing's cursor in run_listings, in one transaction: a crash resumes
-- from the last stored page, and a lease on the listing keeps a second
-- process from fetching a page twice. Items with a listed record are judged
-- against it without a call; items without one are looked up by id; a
-- listed record without an item becomes an item of its own whose outcome is
-- unexpected: the provider has it, the payment file does not.

ALTER TABLE items DROP CONSTRAINT items_state_check;
ALTER TABLE items ADD CONSTRAINT items_state_check
    CHECK (state IN ('queued', 'retry_scheduled', 'matched', 'mismatched', 'missing', 'dead_lettered', 'cancelled',
                     'unexpected'));

ALTER TABLE run_shards ADD COLUMN unexpected integer NOT NULL DEFAULT 0 CHECK (unexpected >= 0);
ALTER TABLE account_progress ADD COLUMN unexpected integer NOT NULL DEFAULT 0 CHECK (unexpected >= 0);
ALTER TABLE run_completions ADD COLUMN unexpected integer NOT NULL DEFAULT 0 CHECK (unexpected >= 0);
ALTER TABLE account_completions ADD COLUMN unexpected integer NOT NULL DEFAULT 0 CHECK (unexpected >= 0);
ALTER TABLE completion_rounds ADD COLUMN unexpected integer NOT NULL DEFAULT 0 CHECK (unexpected >= 0);

COMMENT ON COLUMN run_shards.unexpected IS 'Records the provider listed for the run that no payment of the file matches, counted on shard 0.';
COMMENT ON COLUMN account_progress.unexpected IS 'Unexpected items (listed by the provider, absent from the file) of this account.';
COMMENT ON COLUMN run_completions.unexpected IS 'Records the provider listed for the date that the payment file lacks (items with outcome unexpected).';
COMMENT ON COLUMN account_completions.unexpected IS 'Unexpected items of the account.';
COMMENT ON COLUMN completion_rounds.unexpected IS 'Unexpected items at this completion.';

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
       r.cancel_reason,
       coalesce(s.unexpected, 0)      AS unexpected
  FROM runs r
  LEFT JOIN LATERAL (
        SELECT count(*) FILTER (WHERE i.state = 'queued')          AS queued,
               count(*) FILTER (WHERE i.state = 'retry_scheduled') AS retry_scheduled,
               count(*) FILTER (WHERE i.state = 'matched')         AS matched,
               count(*) FILTER (WHERE i.state = 'mismatched')      AS mismatched,
               count(*) FILTER (WHERE i.state = 'missing')         AS missing,
               count(*) FILTER (WHERE i.state = 'dead_lettered')   AS dead_lettered,
               count(*) FILTER (WHERE i.state = 'cancelled')       AS cancelled,
               count(*) FILTER (WHERE i.state = 'unexpected')      AS unexpected,
               count(*) FILTER (WHERE i.state IN ('queued', 'retry_scheduled')) AS open_items,
               sum(i.attempts)::bigint                             AS provider_calls,
               sum(i.throttles)::bigint                            AS throttles
          FROM items i
         WHERE i.run_id = r.run_id
       ) s ON true
  LEFT JOIN run_completions c ON c.run_id = r.run_id;

COMMENT ON COLUMN run_summary.unexpected IS 'Records the provider listed for the date that the payment file lacks (list mode).';

CREATE TABLE provider_records (
    run_id         uuid        NOT NULL REFERENCES runs (run_id),
    provider       text        NOT NULL,
    record_id      text        NOT NULL CHECK (octet_length(record_id) BETWEEN 1 AND 255),
    amount_minor   bigint      NOT NULL,
    currency       text        NOT NULL,
    status         text        NOT NULL,
    kind           text        NOT NULL,
    page           integer     NOT NULL CHECK (page >= 1),
    listed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, provider, record_id)
);

COMMENT ON TABLE provider_records IS 'The provider''s own records of a run''s business date, as its list answered them (list mode): one row per record, however often pages shifted while listing. Written only with the listing''s cursor (run_listings) in one transaction.';
COMMENT ON COLUMN provider_records.run_id IS 'The run whose business date was listed.';
COMMENT ON COLUMN provider_records.provider IS 'The provider listed, by its name in the providers file; empty: the default provider.';
COMMENT ON COLUMN provider_records.record_id IS 'The provider''s id of the record: the transaction id the join matches against items.transaction_id.';
COMMENT ON COLUMN provider_records.amount_minor IS 'The provider''s amount in ISO 4217 minor units (negative for refunds and disputes), converted exactly as a lookup converts it.';
COMMENT ON COLUMN provider_records.currency IS 'The provider''s currency code.';
COMMENT ON COLUMN provider_records.status IS 'The provider''s status in the ledger''s vocabulary (through the profile''s status map and rules).';
COMMENT ON COLUMN provider_records.kind IS 'Kind of the object listed: payment, refund or dispute.';
COMMENT ON COLUMN provider_records.page IS 'The page of the listing that first brought the record (1 for the first page).';
COMMENT ON COLUMN provider_records.listed_at IS 'When the page that first brought the record was stored.';

CREATE TABLE run_listings (
    run_id        uuid        NOT NULL REFERENCES runs (run_id),
    provider      text        NOT NULL,
    state         text        NOT NULL DEFAULT 'listing' CHECK (state IN ('listing', 'done', 'failed')),
    window_from   timestamptz NOT NULL,
    window_to     timestamptz NOT NULL CHECK (window_to > window_from),
    cursor        text        NOT NULL DEFAULT '',
    pages         integer     NOT NULL DEFAULT 0 CHECK (pages >= 0),
    records       integer     NOT NULL DEFAULT 0 CHECK (records >= 0),
    calls         integer     NOT NULL DEFAULT 0 CHECK (calls >= 0),
    leased_by     text,
    lease_until   timestamptz,
    lease_token   uuid,
    reason        text,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    PRIMARY KEY (run_id, provider)
);

COMMENT ON TABLE run_listings IS 'One listing of the provider''s records per run and provider (list mode): its window, the cursor of the next page, and the lease of the one process allowed to fetch it.';
COMMENT ON COLUMN run_listings.run_id IS 'The run listed.';
COMMENT ON COLUMN run_listings.provider IS 'The provider listed; empty: the default provider.';
COMMENT ON COLUMN run_listings.state IS 'listing while pages remain; done once the last page and the unexpected items are stored; failed when the provider refused the listing (its items are then looked up one by one).';
COMMENT ON COLUMN run_listings.window_from IS 'Start of the listed time window: the business date''s midnight in the run''s time zone, less the list margin.';
COMMENT ON COLUMN run_listings.window_to IS 'End of the listed time window (exclusive): the next midnight plus the list margin.';
COMMENT ON COLUMN run_listings.cursor IS 'What the next page is asked with (a cursor, a last id, a page number); empty before the first page.';
COMMENT ON COLUMN run_listings.pages IS 'Pages stored so far.';
COMMENT ON COLUMN run_listings.records IS 'Records the stored pages brought, a record seen twice (pages shifting) counted once.';
COMMENT ON COLUMN run_listings.calls IS 'Provider calls the listing made, throttled and failed ones included.';
COMMENT ON COLUMN run_listings.leased_by IS 'Consumer (host:pid) that holds the listing''s lease; NULL when none.';
COMMENT ON COLUMN run_listings.lease_until IS 'When the lease runs out (database clock); another consumer may then take the listing over from its cursor.';
COMMENT ON COLUMN run_listings.lease_token IS 'Token of the current lease: a page is stored only by the holder of this token, so a process whose lease ran out cannot store a page twice.';
COMMENT ON COLUMN run_listings.reason IS 'Why the listing failed (state failed).';
COMMENT ON COLUMN run_listings.started_at IS 'When the listing was opened.';
COMMENT ON COLUMN run_listings.finished_at IS 'When the listing reached done or failed.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON provider_records, run_listings TO reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP VIEW run_summary;
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
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON run_summary TO reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd
DROP TABLE run_listings;
DROP TABLE provider_records;
ALTER TABLE completion_rounds DROP COLUMN unexpected;
ALTER TABLE account_completions DROP COLUMN unexpected;
ALTER TABLE run_completions DROP COLUMN unexpected;
ALTER TABLE account_progress DROP COLUMN unexpected;
ALTER TABLE run_shards DROP COLUMN unexpected;
ALTER TABLE items DROP CONSTRAINT items_state_check;
ALTER TABLE items ADD CONSTRAINT items_state_check
    CHECK (state IN ('queued', 'retry_scheduled', 'matched', 'mismatched', 'missing', 'dead_lettered', 'cancelled'));
