-- +goose Up
-- The oldest waiting message of a run, which `status` shows while the run
-- is open, is the first available one along this index: found in a few
-- index entries instead of a count of every ready message of the run (the
-- whole night at its start). The run's other figures come from counters
-- (its ledger rows) and from the short ranges of messages in flight or
-- delayed (queue_messages_ready after now) and of dead letters
-- (queue_messages_dead).
CREATE INDEX queue_messages_ready_run ON queue_messages (run_id, enqueued_at) WHERE state = 'ready';

-- +goose Down
DROP INDEX queue_messages_ready_run;
