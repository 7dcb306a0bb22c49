-- +goose Up
-- What the scheduler did at each tick (internal/schedule): which business
-- date it reconciled, whether it created the run, found it, skipped the tick
-- or failed (a missing source file, an unreadable table). `reconcile status`
-- shows the latest failures.

CREATE TABLE schedule_ticks (
    tick_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scheduled_at  timestamptz NOT NULL,
    business_date date        NOT NULL,
    catch_up      boolean     NOT NULL,
    outcome       text        NOT NULL CHECK (outcome IN ('enqueued', 'existing', 'skipped', 'failed')),
    run_id        uuid,
    source        text        NOT NULL,
    error         text,
    scheduler     text        NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX schedule_ticks_failed ON schedule_ticks (recorded_at DESC) WHERE outcome = 'failed';
CREATE INDEX schedule_ticks_date ON schedule_ticks (business_date, recorded_at DESC);

COMMENT ON TABLE schedule_ticks IS 'One row per scheduler tick handled by one `reconcile schedule` process: the business date it reconciled and what came of it. Several schedulers each record their own row for the same tick; only one of them creates the run.';
COMMENT ON COLUMN schedule_ticks.tick_id IS 'Insertion order.';
COMMENT ON COLUMN schedule_ticks.scheduled_at IS 'The instant the cron expression fired (for a catch-up, the missed firing time).';
COMMENT ON COLUMN schedule_ticks.business_date IS 'The date the tick reconciles: the firing day in the scheduler''s time zone plus its date offset.';
COMMENT ON COLUMN schedule_ticks.catch_up IS 'True when the tick was missed while no scheduler ran and was caught up at start-up.';
COMMENT ON COLUMN schedule_ticks.outcome IS 'enqueued (this scheduler created the run), existing (the date had a run already), skipped (another enqueue of the date held its lock) or failed (see error).';
COMMENT ON COLUMN schedule_ticks.run_id IS 'The run created or found; NULL when skipped or failed.';
COMMENT ON COLUMN schedule_ticks.source IS 'The source the tick read or tried to read: a file path or table:NAME.';
COMMENT ON COLUMN schedule_ticks.error IS 'Why the tick failed (for example a missing source file); NULL otherwise.';
COMMENT ON COLUMN schedule_ticks.scheduler IS 'The scheduler process that handled the tick (host:pid).';
COMMENT ON COLUMN schedule_ticks.recorded_at IS 'When the outcome was recorded.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON schedule_ticks TO reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE schedule_ticks;
