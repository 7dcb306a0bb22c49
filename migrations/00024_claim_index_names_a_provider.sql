-- +goose Up
-- A big queue table is analysed between nights, when every message is
-- acked, so the planner counts no ready message and costs any scan of a
-- ready index as nearly free. It planned `status`'s reads of an open night
-- (a run's messages in flight or delayed, its first available one) as full
-- scans of the provider claim index, whose leading column they do not name
-- (every ready message: 16–25 ms on a night of 18,000), instead of the
-- short ranges of queue_messages_ready they need. The claim index now
-- serves only statements that name a provider: its predicate requires one,
-- which the claim's equality on provider implies.
DROP INDEX queue_messages_provider_ready;
CREATE INDEX queue_messages_provider_ready ON queue_messages (provider, visible_at, message_id)
    WHERE state = 'ready' AND provider IS NOT NULL;

-- +goose Down
DROP INDEX queue_messages_provider_ready;
CREATE INDEX queue_messages_provider_ready ON queue_messages (provider, visible_at, message_id) WHERE state = 'ready';
