-- +goose Up
-- A redrive that reopens a completed run (or account) and finishes it again
-- used to overwrite its completion record, so a day that was complete at the
-- audit looked as if it had been completed only later. The first record now
-- stays as it was written; each later completion adds a row here, and
-- runs.first_completed_at keeps the first completion time while
-- runs.completed_at follows the current one (NULL while reopened).

CREATE TABLE completion_rounds (
    round_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         uuid        NOT NULL REFERENCES runs (run_id),
    account_id     text,
    round          integer     NOT NULL CHECK (round >= 2),
    items          integer     NOT NULL,
    matched        integer     NOT NULL,
    mismatched     integer     NOT NULL,
    missing        integer     NOT NULL,
    dead_lettered  integer     NOT NULL,
    cancelled      integer     NOT NULL,
    provider_calls bigint      NOT NULL,
    throttles      bigint      NOT NULL,
    completed_at   timestamptz NOT NULL,
    completed_by   text        NOT NULL
);

CREATE INDEX completion_rounds_run ON completion_rounds (run_id, account_id, round);

COMMENT ON TABLE completion_rounds IS 'Later completions of a run or of an account: one row each time redriven items reopened it and it finished again (round 2, 3, ...). Round 1 is the row in run_completions or account_completions, which is never changed afterwards.';
COMMENT ON COLUMN completion_rounds.round_id IS 'Insertion order.';
COMMENT ON COLUMN completion_rounds.run_id IS 'The run.';
COMMENT ON COLUMN completion_rounds.account_id IS 'The account for an account''s completion; NULL for the run''s.';
COMMENT ON COLUMN completion_rounds.round IS 'Which completion this is: 2 for the first after the original, and so on.';
COMMENT ON COLUMN completion_rounds.items IS 'Items of the run (or account).';
COMMENT ON COLUMN completion_rounds.matched IS 'Matched items when this round completed.';
COMMENT ON COLUMN completion_rounds.mismatched IS 'Mismatched items when this round completed.';
COMMENT ON COLUMN completion_rounds.missing IS 'Items missing at the provider when this round completed.';
COMMENT ON COLUMN completion_rounds.dead_lettered IS 'Dead-lettered items when this round completed.';
COMMENT ON COLUMN completion_rounds.cancelled IS 'Cancelled items when this round completed.';
COMMENT ON COLUMN completion_rounds.provider_calls IS 'Provider calls made for the items, all rounds included.';
COMMENT ON COLUMN completion_rounds.throttles IS 'Provider calls answered 429, all rounds included.';
COMMENT ON COLUMN completion_rounds.completed_at IS 'When the last reopened item reached a terminal state again.';
COMMENT ON COLUMN completion_rounds.completed_by IS 'Consumer (host:pid) or operator that recorded this completion.';

ALTER TABLE runs ADD COLUMN first_completed_at timestamptz;
UPDATE runs r SET first_completed_at = c.completed_at FROM run_completions c WHERE c.run_id = r.run_id;
COMMENT ON COLUMN runs.first_completed_at IS 'When the run first completed (its round 1 in run_completions); unlike completed_at, a later redrive never clears it.';
COMMENT ON COLUMN runs.completed_at IS 'When the run last completed; NULL while any item is open, also while redriven items reopen it (first_completed_at keeps the first completion).';
COMMENT ON COLUMN run_completions.round IS 'Completions so far: 1 when first completed, +1 each time redriven items reopened and then finished the run again. This row keeps round 1''s values; later rounds are in completion_rounds.';
COMMENT ON COLUMN account_completions.round IS 'Completions so far: 1 when first completed, +1 each time redriven items finished the account again. This row keeps round 1''s values; later rounds are in completion_rounds.';

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor') THEN
        GRANT SELECT ON completion_rounds TO reconcile_auditor;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE runs DROP COLUMN first_completed_at;
DROP TABLE completion_rounds;
