-- +goose Up
-- What `status` shows of an open run's queue, read from a few entries of
-- this index whatever the night's size: the run's messages in flight or
-- delayed (visible after now) and its first available one (the others are
-- the run's open items less those). Before, every ready message of the run
-- was counted: the whole night at its start.
CREATE INDEX queue_messages_ready_run ON queue_messages (run_id, visible_at) WHERE state = 'ready';

-- +goose Down
DROP INDEX queue_messages_ready_run;
