-- +goose Up
-- The queue: one row per message, kept after it is acked so that an
-- idempotency key is deduplicated forever. A message is 'ready' (available,
-- in flight or delayed, told apart by visible_at and lease), 'acked' or
-- 'dead' (dead-lettered). See internal/queue.

CREATE TABLE queue_messages (
    message_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            uuid        NOT NULL,
    reconciliation_id text        NOT NULL,
    transaction_id    text        NOT NULL,
    idempotency_key   text        NOT NULL UNIQUE,
    attempt           integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    state             text        NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'acked', 'dead')),
    visible_at        timestamptz NOT NULL,
    lease             uuid,
    deliveries        integer     NOT NULL DEFAULT 0 CHECK (deliveries >= 0),
    enqueued_at       timestamptz NOT NULL,
    changed_at        timestamptz NOT NULL,
    reason            text,
    last_error        text
);

-- The claim path: visible ready messages in order. In-flight and delayed
-- messages sit further along the same index (their visible_at is in the
-- future), so its first entry is also the next time anything becomes due.
CREATE INDEX queue_messages_ready ON queue_messages (visible_at, message_id) WHERE state = 'ready';
-- Dead-letter listing and redrive, by run.
CREATE INDEX queue_messages_dead ON queue_messages (run_id, message_id) WHERE state = 'dead';

COMMENT ON TABLE queue_messages IS 'The work queue: one row per message (one per item to check at the provider). Acked rows are kept so an idempotency key is never enqueued twice. Claimed with FOR UPDATE SKIP LOCKED and a visibility timeout.';
COMMENT ON COLUMN queue_messages.message_id IS 'Identifier of the message, in publish order.';
COMMENT ON COLUMN queue_messages.run_id IS 'The run of the message''s item.';
COMMENT ON COLUMN queue_messages.reconciliation_id IS 'The run''s reconciliation id (nightly-YYYY-MM-DD...).';
COMMENT ON COLUMN queue_messages.transaction_id IS 'The item''s transaction id.';
COMMENT ON COLUMN queue_messages.idempotency_key IS 'reconciliation_id:transaction_id; a message with a key already present (in any state) is not published again.';
COMMENT ON COLUMN queue_messages.attempt IS 'Provider attempts made so far for the item: 0 when published, +1 on each rescheduled retry.';
COMMENT ON COLUMN queue_messages.state IS 'ready (available, in flight or delayed), acked (done; kept for deduplication) or dead (dead-lettered, waiting for a redrive).';
COMMENT ON COLUMN queue_messages.visible_at IS 'When a ready message can next be claimed: publish time, retry time, or the end of the current lease''s visibility timeout.';
COMMENT ON COLUMN queue_messages.lease IS 'Token of the current claim; ack, retry, dead-letter and extend must present it. NULL when not claimed.';
COMMENT ON COLUMN queue_messages.deliveries IS 'Claims since the message was published, last rescheduled or redriven. Past the maximum the message is handed out as poison.';
COMMENT ON COLUMN queue_messages.enqueued_at IS 'When the message was first published.';
COMMENT ON COLUMN queue_messages.changed_at IS 'When the message was last published, acked, rescheduled, dead-lettered or redriven (claims do not change it).';
COMMENT ON COLUMN queue_messages.reason IS 'Reason given with the latest retry or dead-letter (for example http_503, max_attempts, poison).';
COMMENT ON COLUMN queue_messages.last_error IS 'Error text recorded when the message was dead-lettered.';

-- +goose Down
DROP TABLE queue_messages;
