-- +goose Up
-- A limit set for a while (`reconcile limit set --for 2h`): the settings to
-- return to, and when.

ALTER TABLE rate_limiters
    ADD COLUMN settings_expire_at timestamptz,
    ADD COLUMN restore_rate       double precision CHECK (restore_rate > 0),
    ADD COLUMN restore_burst      integer CHECK (restore_burst >= 1),
    ADD CONSTRAINT rate_limiters_restore_complete
        CHECK ((settings_expire_at IS NULL) = (restore_rate IS NULL) AND (restore_rate IS NULL) = (restore_burst IS NULL));

COMMENT ON COLUMN rate_limiters.settings_expire_at IS 'When the rate and burst set for a while (limit set --for) give way to restore_rate and restore_burst; NULL for settings that stay until changed. A running consumer restores them within seconds of this time and records it in rate_limiter_history.';
COMMENT ON COLUMN rate_limiters.restore_rate IS 'The rate in force before the temporary one, restored at settings_expire_at; NULL without an expiry.';
COMMENT ON COLUMN rate_limiters.restore_burst IS 'The burst in force before the temporary one, restored at settings_expire_at; NULL without an expiry.';

-- +goose Down
ALTER TABLE rate_limiters DROP CONSTRAINT rate_limiters_restore_complete,
    DROP COLUMN restore_burst, DROP COLUMN restore_rate, DROP COLUMN settings_expire_at;
