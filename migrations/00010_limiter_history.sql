-- +goose Up
-- Limit discovery: the calls accepted by the provider, counted by every
-- consumer process, measure its rate between two throttles; every change of
-- the effective rate is kept with its cause (internal/limiter).

ALTER TABLE rate_limiters
    ADD COLUMN accepted           bigint NOT NULL DEFAULT 0,
    ADD COLUMN throttled_at       timestamptz,
    ADD COLUMN throttled_accepted bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN rate_limiters.accepted IS 'Calls the provider accepted (any answer but a throttle), reported by all processes with their leases: the rate between two throttles is the difference of this count over the time between them.';
COMMENT ON COLUMN rate_limiters.throttled_at IS 'When the latest throttle that lowered the rate was counted (further throttles inside its hold are the same event); NULL before the first.';
COMMENT ON COLUMN rate_limiters.throttled_accepted IS 'The accepted count at throttled_at.';

CREATE TABLE rate_limiter_history (
    id          bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    limiter     text             NOT NULL,
    recorded_at timestamptz      NOT NULL DEFAULT now(),
    cause       text             NOT NULL CHECK (cause IN ('throttle', 'probe', 'hint', 'limit set', 'estimate')),
    rate        double precision NOT NULL CHECK (rate >= 0),
    estimate    double precision CHECK (estimate >= 0),
    burst       double precision CHECK (burst >= 0),
    detail      text             NOT NULL DEFAULT '',
    actor       text,
    reason      text
);

CREATE INDEX rate_limiter_history_limiter_recorded_at ON rate_limiter_history (limiter, recorded_at);
CREATE INDEX rate_limiter_history_recorded_at ON rate_limiter_history (recorded_at);

COMMENT ON TABLE rate_limiter_history IS 'Every change of a limiter''s effective rate with its cause, appended by the consumer processes (a few rows a minute while a limit is being found, one a minute or less while it holds) and by `reconcile limit set`. Pruned by recorded_at with the queue''s retention.';
COMMENT ON COLUMN rate_limiter_history.id IS 'Order of recording.';
COMMENT ON COLUMN rate_limiter_history.limiter IS 'Name of the limiter (rate_limiters.name); not a foreign key, so the history outlives a deleted row.';
COMMENT ON COLUMN rate_limiter_history.recorded_at IS 'When the change took effect; the retention column: rows older than the retention are deleted.';
COMMENT ON COLUMN rate_limiter_history.cause IS 'Why the rate changed: throttle (a 429 not expected: start-up, or the limit fell), probe (a probe started, grew, or found the limit unchanged), hint (the provider''s rate-limit headers pace the limiter), limit set (an operator set the rate), estimate (a measurement between two 429s changed the estimate).';
COMMENT ON COLUMN rate_limiter_history.rate IS 'Effective rate from then on, requests per second.';
COMMENT ON COLUMN rate_limiter_history.estimate IS 'The provider''s rate as estimated then, requests per second; NULL when unknown.';
COMMENT ON COLUMN rate_limiter_history.burst IS 'The provider''s burst as estimated then, requests; NULL when unknown.';
COMMENT ON COLUMN rate_limiter_history.detail IS 'A sentence for people.';
COMMENT ON COLUMN rate_limiter_history.actor IS 'Who set the limit (limit set: the operator, user@host or user@console); NULL for the consumers'' own changes.';
COMMENT ON COLUMN rate_limiter_history.reason IS 'Why the operator set it, as given with the change; NULL when none was given or for the consumers'' own changes.';

-- +goose Down
DROP TABLE rate_limiter_history;
ALTER TABLE rate_limiters DROP COLUMN throttled_accepted, DROP COLUMN throttled_at, DROP COLUMN accepted;
