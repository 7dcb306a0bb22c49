-- +goose Up
-- Running consumers announce themselves: each upserts its row every few
-- seconds, so `reconcile status` can tell a run nobody works on (no consumer
-- seen lately) from one that is merely slow.

CREATE TABLE consumers (
    consumer_id text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    last_seen   timestamptz NOT NULL
);

COMMENT ON TABLE consumers IS 'Heartbeats of `reconcile consume` processes: one row per process, refreshed every few seconds while it runs. Rows of stopped processes stay until pruned; last_seen says how old they are.';
COMMENT ON COLUMN consumers.consumer_id IS 'The process: host:pid.';
COMMENT ON COLUMN consumers.host IS 'Host name of the process.';
COMMENT ON COLUMN consumers.pid IS 'Process id.';
COMMENT ON COLUMN consumers.started_at IS 'When the process started consuming.';
COMMENT ON COLUMN consumers.last_seen IS 'The process''s latest heartbeat.';

-- +goose Down
DROP TABLE consumers;
