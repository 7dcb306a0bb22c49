-- +goose Up
-- What a new consumer process starts from: how often the provider refused
-- the limit set since it was set, and the provider's rate and bucket as the
-- consumers last measured them. A throttle stored from an earlier night is
-- history; these are what that night learned.

ALTER TABLE rate_limiters
    ADD COLUMN refusals       integer          NOT NULL DEFAULT 0 CHECK (refusals >= 0),
    ADD COLUMN estimate       double precision CHECK (estimate > 0),
    ADD COLUMN estimate_burst double precision CHECK (estimate_burst > 0);

COMMENT ON COLUMN rate_limiters.refusals IS 'Throttles counted since rate and burst were last set (limit set, a providers file, consume --rate --save): the limit set is trusted until the provider refuses it twice, then the consumers measure the provider''s limit.';
COMMENT ON COLUMN rate_limiters.estimate IS 'The provider''s rate in requests per second as the consumers last measured it between two throttles; a consumer started after its pause begins at it. NULL while the limit set is trusted or before any measurement; cleared when rate and burst are set.';
COMMENT ON COLUMN rate_limiters.estimate_burst IS 'The provider''s bucket in requests as measured with estimate: what it lets through at once after a pause. NULL with estimate.';

-- +goose Down
ALTER TABLE rate_limiters DROP COLUMN estimate_burst, DROP COLUMN estimate, DROP COLUMN refusals;
