-- +goose Up
-- Several providers in one night: each item and its queue message record the
-- provider that answers for it (from the payment file's provider column; ''
-- is the default provider), so consumers claim per provider and one
-- provider's pause or outage never holds up another's items. Each provider's
-- circuit (see internal/circuit) is kept in a row for `status`.

ALTER TABLE items ADD COLUMN provider text NOT NULL DEFAULT '';
ALTER TABLE queue_messages ADD COLUMN provider text NOT NULL DEFAULT '';

-- The claim path of one provider: its visible ready messages in order.
CREATE INDEX queue_messages_provider_ready ON queue_messages (provider, visible_at, message_id) WHERE state = 'ready';

COMMENT ON COLUMN items.provider IS 'Provider that answers for this payment, by its name in the providers file (the payment file''s provider column); empty: the default provider.';
COMMENT ON COLUMN queue_messages.provider IS 'The item''s provider (items.provider), so consumers claim each provider''s messages at that provider''s own pace; empty: the default provider.';

CREATE TABLE provider_circuits (
    provider      text        PRIMARY KEY,
    url           text        NOT NULL,
    open          boolean     NOT NULL,
    opened_at     timestamptz,
    cause         text        NOT NULL,
    next_probe_at timestamptz,
    probes        integer     NOT NULL CHECK (probes >= 0),
    failures      integer     NOT NULL CHECK (failures >= 0),
    changed_at    timestamptz NOT NULL,
    changed_by    text        NOT NULL
);

COMMENT ON TABLE provider_circuits IS 'The circuit of each provider as last changed by a consumer: open while calls fail for reasons that are not about the item (connection refused, DNS, TLS, timeouts, 5xx across items). Read by `reconcile status`.';
COMMENT ON COLUMN provider_circuits.provider IS 'Provider name in the providers file; empty: the default (single) provider.';
COMMENT ON COLUMN provider_circuits.url IS 'Base URL of the provider the consumer called.';
COMMENT ON COLUMN provider_circuits.open IS 'True while the circuit is open: no calls but one probe at a backed-off interval.';
COMMENT ON COLUMN provider_circuits.opened_at IS 'When the circuit opened; NULL when closed.';
COMMENT ON COLUMN provider_circuits.cause IS 'The failure that opened the circuit, or the latest one since (connection refused, timeout, http 503); empty when closed.';
COMMENT ON COLUMN provider_circuits.next_probe_at IS 'Earliest time of the next probe call; NULL when closed.';
COMMENT ON COLUMN provider_circuits.probes IS 'Probe calls let through since the circuit opened.';
COMMENT ON COLUMN provider_circuits.failures IS 'Failed calls (probes and calls already in flight) since the circuit opened.';
COMMENT ON COLUMN provider_circuits.changed_at IS 'When a consumer last changed the circuit (opened, failed a probe, closed).';
COMMENT ON COLUMN provider_circuits.changed_by IS 'The consumer (host:pid) that made the change.';

-- +goose Down
DROP TABLE provider_circuits;
DROP INDEX queue_messages_provider_ready;
ALTER TABLE queue_messages DROP COLUMN provider;
ALTER TABLE items DROP COLUMN provider;
