-- +goose Up
-- The morning message: an outbox of announcements about runs, written in the
-- transaction that completes a run (and in the one that finds it past its
-- deadline), so that a crash neither loses an announcement nor invents one.
-- Processes started with --notify deliver each announcement to each of their
-- webhooks and record every delivery here (see internal/outbox and
-- internal/notify).

ALTER TABLE runs ADD COLUMN deadline_at timestamptz;
COMMENT ON COLUMN runs.deadline_at IS 'When the run should be complete: its enqueue time plus the --deadline of the first consumer or scheduler that saw it open with one; NULL when none did. A run still open then is announced once as run.deadline_missed.';

CREATE TABLE notifications (
    event_id   uuid        PRIMARY KEY,
    run_id     uuid        NOT NULL REFERENCES runs (run_id),
    type       text        NOT NULL CHECK (type IN ('run.completed', 'run.deadline_missed')),
    round      integer     CHECK (round >= 1),
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    CHECK ((type = 'run.completed') = (round IS NOT NULL))
);

-- One announcement per completion round, and one missed deadline per run,
-- however many processes see it.
CREATE UNIQUE INDEX notifications_completed ON notifications (run_id, round) WHERE type = 'run.completed';
CREATE UNIQUE INDEX notifications_deadline ON notifications (run_id) WHERE type = 'run.deadline_missed';
-- Deliverers look for the announcements of the last day; status and the
-- console for those of a few runs.
CREATE INDEX notifications_created ON notifications (created_at);
CREATE INDEX notifications_run ON notifications (run_id);

COMMENT ON TABLE notifications IS 'Announcements of runs for webhooks (the outbox): one row per completion round of a run, written in the transaction that completed it, and at most one per run that was still open at its deadline. Never changed once written.';
COMMENT ON COLUMN notifications.event_id IS 'The announcement''s id: the webhook-id header of every delivery attempt of it, to every webhook, so that a receiver can drop a repeat.';
COMMENT ON COLUMN notifications.run_id IS 'The run announced.';
COMMENT ON COLUMN notifications.type IS 'run.completed (the last open item of the run reached a terminal state) or run.deadline_missed (the run was still open at runs.deadline_at).';
COMMENT ON COLUMN notifications.round IS 'For run.completed: the completion round (1, then +1 each time redriven items finished the run again; see completion_rounds). NULL for run.deadline_missed.';
COMMENT ON COLUMN notifications.payload IS 'What the announcement says, as JSON: the run, its date and generation, counts by outcome, amounts at stake per currency, dead letters by reason, provider calls and times (see docs/deploy.md for the fields). Its data member of every delivery.';
COMMENT ON COLUMN notifications.created_at IS 'When the completion (or the missed deadline) was recorded.';

CREATE TABLE notification_deliveries (
    event_id        uuid        NOT NULL REFERENCES notifications (event_id),
    destination     text        NOT NULL,
    target          text        NOT NULL,
    format          text        NOT NULL CHECK (format IN ('standard', 'slack')),
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL,
    lease           uuid,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    PRIMARY KEY (event_id, destination)
);

-- The claim path: a destination's pending deliveries in due order.
CREATE INDEX notification_deliveries_due ON notification_deliveries (destination, next_attempt_at) WHERE state = 'pending';

COMMENT ON TABLE notification_deliveries IS 'Each announcement''s delivery to each webhook: claimed with FOR UPDATE SKIP LOCKED and a lease by the processes started with that --notify URL, retried with capped backoff, given up (failed) after a bounded number of attempts.';
COMMENT ON COLUMN notification_deliveries.event_id IS 'The announcement (notifications.event_id).';
COMMENT ON COLUMN notification_deliveries.destination IS 'The webhook: the first 16 hex digits of the SHA-256 of its URL. The URL itself is not stored: it can hold a credential (a Slack webhook''s path does).';
COMMENT ON COLUMN notification_deliveries.target IS 'The webhook''s URL with its path and query hidden (https://hooks.example.com/...), for people.';
COMMENT ON COLUMN notification_deliveries.format IS 'Body sent: standard (a Standard Webhooks JSON event) or slack (a Slack message with text and blocks).';
COMMENT ON COLUMN notification_deliveries.state IS 'pending (waiting for an attempt or in one), delivered (the webhook answered 2xx) or failed (given up).';
COMMENT ON COLUMN notification_deliveries.attempts IS 'Attempts started so far, an attempt cut short by a crash included.';
COMMENT ON COLUMN notification_deliveries.next_attempt_at IS 'When a pending delivery can next be claimed: when it was created, its retry time, or the end of the current attempt''s lease.';
COMMENT ON COLUMN notification_deliveries.lease IS 'Token of the attempt in progress; settling the attempt must present it. NULL when none is.';
COMMENT ON COLUMN notification_deliveries.last_status IS 'HTTP status of the latest answer; NULL when none came (timeout, connection refused).';
COMMENT ON COLUMN notification_deliveries.last_error IS 'Why the latest attempt failed (the status and a body excerpt, or the network error without the URL); NULL after a success.';
COMMENT ON COLUMN notification_deliveries.created_at IS 'When a process with this webhook first took the announcement up.';
COMMENT ON COLUMN notification_deliveries.finished_at IS 'When the delivery succeeded or was given up; NULL while pending.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON notifications, notification_deliveries TO reconcile_auditor;
    END IF;
    -- The console's cancel can complete a run, whose announcement is
    -- written in the same transaction (00018 grants the same when it runs
    -- after this one).
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_console') THEN
        GRANT INSERT ON notifications TO reconcile_console;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE notification_deliveries;
DROP TABLE notifications;
ALTER TABLE runs DROP COLUMN deadline_at;
