-- +goose Up
-- The shared rate limiter: one row per limiter, read and updated atomically
-- by every consumer process (internal/limiter).

CREATE TABLE rate_limiters (
    name                text             PRIMARY KEY CHECK (name <> ''),
    rate                double precision NOT NULL CHECK (rate > 0),
    burst               integer          NOT NULL CHECK (burst >= 1),
    effective_rate      double precision NOT NULL CHECK (effective_rate > 0),
    tokens              double precision NOT NULL,
    updated_at          timestamptz,
    penalty_until       timestamptz,
    decrease_hold_until timestamptz,
    increased_at        timestamptz,
    throttles           bigint           NOT NULL DEFAULT 0,
    settings_updated_at timestamptz      NOT NULL DEFAULT now(),
    CHECK (effective_rate <= rate)
);

COMMENT ON TABLE rate_limiters IS 'One token bucket per limiter (normally one, named provider), shared by every consumer process: processes lease tokens from it in small batches. Set rate and burst with `reconcile limit set`; the other columns are the limiter''s running state.';
COMMENT ON COLUMN rate_limiters.name IS 'Name of the limiter; the consumer uses provider.';
COMMENT ON COLUMN rate_limiters.rate IS 'Configured rate in requests per second: the ceiling the adaptive rate never exceeds. Defaults to 10 when the row is created.';
COMMENT ON COLUMN rate_limiters.burst IS 'Configured burst: the most requests allowed at once after an idle period. Defaults to 10 when the row is created.';
COMMENT ON COLUMN rate_limiters.effective_rate IS 'Adaptive rate in requests per second at which the bucket refills now: halved on a provider throttle, lowered by rate-limit headers, raised additively on sustained success, never above rate.';
COMMENT ON COLUMN rate_limiters.tokens IS 'Tokens in the bucket at updated_at, at most burst; leased tokens are already taken out.';
COMMENT ON COLUMN rate_limiters.updated_at IS 'Instant to which tokens refers (the bucket refills at effective_rate from then on); in the future while a penalty runs; NULL for a bucket never used, which is full.';
COMMENT ON COLUMN rate_limiters.penalty_until IS 'No token is leased before this instant: the latest Retry-After (or exhausted quota) reported by any process.';
COMMENT ON COLUMN rate_limiters.decrease_hold_until IS 'End of the current throttle window: further throttles before it do not lower effective_rate again, and it does not rise before it.';
COMMENT ON COLUMN rate_limiters.increased_at IS 'Last additive increase of effective_rate; NULL before the first.';
COMMENT ON COLUMN rate_limiters.throttles IS 'Number of throttles (HTTP 429) reported by all processes since the row was created.';
COMMENT ON COLUMN rate_limiters.settings_updated_at IS 'When rate and burst were last set.';

-- +goose Down
DROP TABLE rate_limiters;
