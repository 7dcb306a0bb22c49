-- +goose Up
-- The ledger: runs, items, the append-only transition history and the
-- completion join. Auditors read these tables; the consumer writes them.

CREATE TABLE runs (
    run_id            uuid        PRIMARY KEY,
    reconciliation_id text        NOT NULL UNIQUE,
    business_date     date        NOT NULL,
    generation        integer     NOT NULL CHECK (generation >= 1),
    trigger           text        NOT NULL CHECK (trigger IN ('manual', 'cron')),
    triggered_by      text        NOT NULL,
    source            text        NOT NULL,
    source_sha256     text        NOT NULL,
    time_zone         text        NOT NULL,
    item_count        integer     NOT NULL CHECK (item_count >= 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    UNIQUE (business_date, generation)
);

COMMENT ON TABLE runs IS 'One row per reconciliation: a business date and a generation (1 for the nightly run, N+1 for each full manual re-run).';
COMMENT ON COLUMN runs.run_id IS 'Identifier of the run (UUID), referenced by items, transitions, completions and queue messages.';
COMMENT ON COLUMN runs.reconciliation_id IS 'Human name of the run: nightly-YYYY-MM-DD for generation 1, nightly-YYYY-MM-DD-gN for generation N. Prefix of every idempotency key of the run.';
COMMENT ON COLUMN runs.business_date IS 'The day whose payments this run reconciles.';
COMMENT ON COLUMN runs.generation IS '1 for the first run of a date; each `enqueue --rerun all` adds one.';
COMMENT ON COLUMN runs.trigger IS 'What started the run: cron (the scheduler) or manual (an operator).';
COMMENT ON COLUMN runs.triggered_by IS 'Who started the run: operating-system user and host of the enqueuing process.';
COMMENT ON COLUMN runs.source IS 'Where the payments came from: a file path, - for standard input, or table:NAME.';
COMMENT ON COLUMN runs.source_sha256 IS 'SHA-256 of the source bytes as read (hex), so an auditor can match the run to the exact export.';
COMMENT ON COLUMN runs.time_zone IS 'IANA time zone in which the business date was interpreted.';
COMMENT ON COLUMN runs.item_count IS 'Number of payments (items) in the run.';
COMMENT ON COLUMN runs.created_at IS 'When the run was enqueued.';
COMMENT ON COLUMN runs.completed_at IS 'When the last item of the run reached a terminal state; NULL while any item is open. Set again if dead letters are redriven and finish.';

CREATE TABLE items (
    run_id                uuid        NOT NULL,
    transaction_id        text        NOT NULL CHECK (octet_length(transaction_id) BETWEEN 1 AND 255),
    account_id            text        NOT NULL,
    idempotency_key       text        NOT NULL,
    amount_minor          bigint      NOT NULL,
    currency              text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status                text        NOT NULL,
    occurred_at           timestamptz NOT NULL,
    shard                 smallint    NOT NULL,
    state                 text        NOT NULL DEFAULT 'queued'
                          CHECK (state IN ('queued', 'retry_scheduled', 'matched', 'mismatched', 'missing', 'dead_lettered')),
    attempts              integer     NOT NULL DEFAULT 0,
    throttles             integer     NOT NULL DEFAULT 0,
    provider_amount_minor bigint,
    provider_currency     text,
    provider_status       text,
    differences           jsonb,
    last_http_status      integer,
    last_reason           text,
    first_attempt_at      timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    terminal_at           timestamptz,
    history_len           integer     NOT NULL DEFAULT 0,
    history_head          bytea,
    PRIMARY KEY (run_id, transaction_id)
) WITH (fillfactor = 70);

CREATE INDEX items_transaction ON items (transaction_id);
-- The account completion counts an account's items when its last one turns
-- terminal; without this index each count reads the whole run, and a run's
-- consumers slow down in proportion to its size.
CREATE INDEX items_account ON items (run_id, account_id);

COMMENT ON TABLE items IS 'One row per payment of a run: the expected record from the source, the current state and the provider''s answer.';
COMMENT ON COLUMN items.run_id IS 'The run this item belongs to (runs.run_id). Items are written only in the transaction that creates their run and runs are never deleted; there is no foreign key because its per-row check costs a third of a bulk enqueue.';
COMMENT ON COLUMN items.transaction_id IS 'The payment''s transaction id, as in the source (1 to 255 bytes).';
COMMENT ON COLUMN items.account_id IS 'The account (player, merchant) the payment belongs to.';
COMMENT ON COLUMN items.idempotency_key IS 'reconciliation_id:transaction_id, sent as Idempotency-Key on every provider call for this item. Unique by construction (reconciliation_id is unique, transaction_id unique within a run); the queue enforces it forever.';
COMMENT ON COLUMN items.amount_minor IS 'Expected amount in minor units (cents), from the source.';
COMMENT ON COLUMN items.currency IS 'Expected ISO 4217 currency code, from the source.';
COMMENT ON COLUMN items.status IS 'Expected payment status (succeeded, refunded, failed, ...), from the source.';
COMMENT ON COLUMN items.occurred_at IS 'When the payment happened, from the source.';
COMMENT ON COLUMN items.shard IS 'Completion counter shard of this item (see run_shards).';
COMMENT ON COLUMN items.state IS 'Current state: queued, retry_scheduled, or a terminal outcome matched, mismatched, missing, dead_lettered.';
COMMENT ON COLUMN items.attempts IS 'Provider calls made for this item, throttled ones included.';
COMMENT ON COLUMN items.throttles IS 'Provider calls for this item answered 429.';
COMMENT ON COLUMN items.provider_amount_minor IS 'Amount the provider reported (minor units); NULL until answered.';
COMMENT ON COLUMN items.provider_currency IS 'Currency the provider reported; NULL until answered.';
COMMENT ON COLUMN items.provider_status IS 'Status the provider reported; NULL until answered.';
COMMENT ON COLUMN items.differences IS 'For mismatched items: array of {field, expected, provider} objects, one per differing field.';
COMMENT ON COLUMN items.last_http_status IS 'HTTP status of the latest provider call (NULL for network errors or no call yet).';
COMMENT ON COLUMN items.last_reason IS 'Reason of the latest transition (for example http_503, throttled, max_attempts).';
COMMENT ON COLUMN items.first_attempt_at IS 'When the first provider call for this item was made; the throttle deadline counts from here.';
COMMENT ON COLUMN items.updated_at IS 'When the item last changed.';
COMMENT ON COLUMN items.terminal_at IS 'When the item reached its terminal state; NULL while open.';
COMMENT ON COLUMN items.history_len IS 'Number of transitions recorded for this item.';
COMMENT ON COLUMN items.history_head IS 'Hash of the item''s latest transition: the head of its hash chain (NULL before the first).';

CREATE TABLE transitions (
    transition_id  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         uuid        NOT NULL,
    transaction_id text        NOT NULL,
    seq            integer     NOT NULL,
    from_state     text        NOT NULL,
    to_state       text        NOT NULL,
    at             timestamptz NOT NULL DEFAULT now(),
    attempt        integer     NOT NULL,
    http_status    integer,
    reason         text        NOT NULL,
    retry_after_ms bigint,
    details        jsonb,
    actor          text        NOT NULL,
    prev_hash      bytea,
    hash           bytea       NOT NULL,
    FOREIGN KEY (run_id, transaction_id) REFERENCES items (run_id, transaction_id),
    UNIQUE (run_id, transaction_id, seq)
);

COMMENT ON TABLE transitions IS 'Append-only history of every item state change. UPDATE, DELETE and TRUNCATE are rejected. Rows of one item are hash-chained (seq, prev_hash, hash); `reconcile audit verify` recomputes the chains.';
COMMENT ON COLUMN transitions.transition_id IS 'Global insertion order.';
COMMENT ON COLUMN transitions.run_id IS 'The run of the item.';
COMMENT ON COLUMN transitions.transaction_id IS 'The item''s transaction id.';
COMMENT ON COLUMN transitions.seq IS 'Position of this row in the item''s history, from 1.';
COMMENT ON COLUMN transitions.from_state IS 'State before the change.';
COMMENT ON COLUMN transitions.to_state IS 'State after the change.';
COMMENT ON COLUMN transitions.at IS 'When the change was recorded.';
COMMENT ON COLUMN transitions.attempt IS 'Provider call count of the item when the change was recorded (0 for changes without a call, such as a redrive).';
COMMENT ON COLUMN transitions.http_status IS 'HTTP status of the provider call that caused the change; NULL for network errors and operator actions.';
COMMENT ON COLUMN transitions.reason IS 'Why: matched, mismatched, missing, http_503, throttled, timeout, max_attempts, throttle_deadline, poison, http_400, redrive, rerun_failed, ...';
COMMENT ON COLUMN transitions.retry_after_ms IS 'For retries: the delay chosen before the next attempt, in milliseconds; for throttles the Retry-After the provider sent is in details.';
COMMENT ON COLUMN transitions.details IS 'Structured detail: differing fields, error text, body excerpt, Retry-After, next attempt time.';
COMMENT ON COLUMN transitions.actor IS 'Who recorded the change: consumer process (host:pid) or operator (user@host).';
COMMENT ON COLUMN transitions.prev_hash IS 'Hash of the previous transition of the same item; NULL for the first.';
COMMENT ON COLUMN transitions.hash IS 'SHA-256 over prev_hash and the canonical encoding of this row (see docs/ledger.md).';

-- transition_payload is the canonical encoding hashed into the chain. It is
-- reproduced byte for byte by `reconcile audit verify`; change both together.
CREATE FUNCTION transition_payload(t transitions) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(concat_ws(E'\x1f',
        t.run_id::text,
        t.transaction_id,
        t.seq::text,
        t.from_state,
        t.to_state,
        ((extract(epoch FROM t.at) * 1000000)::bigint)::text,
        t.attempt::text,
        coalesce(t.http_status::text, ''),
        t.reason,
        coalesce(t.retry_after_ms::text, ''),
        coalesce(t.details::text, ''),
        t.actor), 'UTF8')
$$;

-- Chain each new transition to its item's previous one. The item row is
-- locked by the state change made in the same transaction, so the chain of
-- one item is written serially without a lock of its own.
-- +goose StatementBegin
CREATE FUNCTION transitions_chain() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    head bytea;
    len  integer;
BEGIN
    SELECT history_head, history_len INTO head, len
      FROM items WHERE run_id = NEW.run_id AND transaction_id = NEW.transaction_id
      FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'transition for unknown item %/%', NEW.run_id, NEW.transaction_id;
    END IF;
    NEW.seq := len + 1;
    NEW.prev_hash := head;
    NEW.hash := sha256(coalesce(head, ''::bytea) || transition_payload(NEW));
    UPDATE items SET history_head = NEW.hash, history_len = NEW.seq
     WHERE run_id = NEW.run_id AND transaction_id = NEW.transaction_id;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER transitions_chain BEFORE INSERT ON transitions
    FOR EACH ROW EXECUTE FUNCTION transitions_chain();

-- +goose StatementBegin
CREATE FUNCTION transitions_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'transitions is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER transitions_no_update_delete BEFORE UPDATE OR DELETE ON transitions
    FOR EACH ROW EXECUTE FUNCTION transitions_append_only();
CREATE TRIGGER transitions_no_truncate BEFORE TRUNCATE ON transitions
    FOR EACH STATEMENT EXECUTE FUNCTION transitions_append_only();

CREATE INDEX transitions_item ON transitions (transaction_id, run_id, seq);
CREATE INDEX transitions_run ON transitions (run_id, transition_id);

-- Completion bookkeeping. Each terminal transition decrements its item's
-- account row and its run shard row; only the transaction that empties a
-- shard touches the run row. No single counter row serialises the consumers.

CREATE TABLE run_shards (
    run_id    uuid     NOT NULL REFERENCES runs (run_id),
    shard     smallint NOT NULL,
    remaining integer  NOT NULL CHECK (remaining >= 0),
    PRIMARY KEY (run_id, shard)
);

COMMENT ON TABLE run_shards IS 'Completion bookkeeping: open items of a run, split over shards so concurrent consumers do not serialise on one row.';
COMMENT ON COLUMN run_shards.run_id IS 'The run.';
COMMENT ON COLUMN run_shards.shard IS 'Shard number (items.shard).';
COMMENT ON COLUMN run_shards.remaining IS 'Items of this shard not yet in a terminal state.';

CREATE TABLE account_progress (
    run_id     uuid    NOT NULL REFERENCES runs (run_id),
    account_id text    NOT NULL,
    item_count integer NOT NULL,
    remaining  integer NOT NULL CHECK (remaining >= 0),
    PRIMARY KEY (run_id, account_id)
);

COMMENT ON TABLE account_progress IS 'Completion bookkeeping per account of a run.';
COMMENT ON COLUMN account_progress.run_id IS 'The run.';
COMMENT ON COLUMN account_progress.account_id IS 'The account.';
COMMENT ON COLUMN account_progress.item_count IS 'Items of this account in the run.';
COMMENT ON COLUMN account_progress.remaining IS 'Items of this account not yet in a terminal state.';

CREATE TABLE run_completions (
    run_id         uuid        PRIMARY KEY REFERENCES runs (run_id),
    round          integer     NOT NULL DEFAULT 1,
    items          integer     NOT NULL,
    matched        integer     NOT NULL,
    mismatched     integer     NOT NULL,
    missing        integer     NOT NULL,
    dead_lettered  integer     NOT NULL,
    provider_calls bigint      NOT NULL,
    throttles      bigint      NOT NULL,
    completed_at   timestamptz NOT NULL,
    completed_by   text        NOT NULL
);

COMMENT ON TABLE run_completions IS 'The completion join: one row per run, written by the consumer in the transaction that moved the run''s last open item to a terminal state.';
COMMENT ON COLUMN run_completions.run_id IS 'The completed run.';
COMMENT ON COLUMN run_completions.round IS '1 when first completed; +1 each time redriven items reopened and then finished the run again.';
COMMENT ON COLUMN run_completions.items IS 'Items in the run.';
COMMENT ON COLUMN run_completions.matched IS 'Items whose provider record equals the expected one.';
COMMENT ON COLUMN run_completions.mismatched IS 'Items whose provider record differs in at least one field.';
COMMENT ON COLUMN run_completions.missing IS 'Items the provider does not know (404).';
COMMENT ON COLUMN run_completions.dead_lettered IS 'Items given up on (permanent errors, attempts or throttle deadline exhausted, poison).';
COMMENT ON COLUMN run_completions.provider_calls IS 'Provider calls made for the run''s items.';
COMMENT ON COLUMN run_completions.throttles IS 'Provider calls answered 429.';
COMMENT ON COLUMN run_completions.completed_at IS 'When the last item reached a terminal state.';
COMMENT ON COLUMN run_completions.completed_by IS 'Consumer (host:pid) that recorded the completion.';

CREATE TABLE account_completions (
    run_id         uuid        NOT NULL REFERENCES runs (run_id),
    account_id     text        NOT NULL,
    round          integer     NOT NULL DEFAULT 1,
    items          integer     NOT NULL,
    matched        integer     NOT NULL,
    mismatched     integer     NOT NULL,
    missing        integer     NOT NULL,
    dead_lettered  integer     NOT NULL,
    provider_calls bigint      NOT NULL,
    throttles      bigint      NOT NULL,
    completed_at   timestamptz NOT NULL,
    completed_by   text        NOT NULL,
    PRIMARY KEY (run_id, account_id)
);

COMMENT ON TABLE account_completions IS 'The completion join per account: one row per account of a run, written in the transaction that moved the account''s last open item to a terminal state.';
COMMENT ON COLUMN account_completions.run_id IS 'The run.';
COMMENT ON COLUMN account_completions.account_id IS 'The completed account.';
COMMENT ON COLUMN account_completions.round IS '1 when first completed; +1 each time redriven items reopened and then finished the account again.';
COMMENT ON COLUMN account_completions.items IS 'Items of the account in the run.';
COMMENT ON COLUMN account_completions.matched IS 'Matched items of the account.';
COMMENT ON COLUMN account_completions.mismatched IS 'Mismatched items of the account.';
COMMENT ON COLUMN account_completions.missing IS 'Items of the account missing at the provider.';
COMMENT ON COLUMN account_completions.dead_lettered IS 'Dead-lettered items of the account.';
COMMENT ON COLUMN account_completions.provider_calls IS 'Provider calls made for the account''s items.';
COMMENT ON COLUMN account_completions.throttles IS 'Provider calls for the account''s items answered 429.';
COMMENT ON COLUMN account_completions.completed_at IS 'When the account''s last item reached a terminal state.';
COMMENT ON COLUMN account_completions.completed_by IS 'Consumer (host:pid) that recorded the completion.';

-- +goose Down
DROP TABLE account_completions, run_completions, account_progress, run_shards;
DROP TABLE transitions;
DROP FUNCTION transitions_append_only(), transitions_chain(), transition_payload(transitions);
DROP TABLE items, runs;
