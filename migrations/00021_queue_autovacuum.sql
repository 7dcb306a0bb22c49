-- +goose Up
-- queue_messages holds the open work and the acked messages of the
-- retention window (`prune --older-than 90d` keeps about 90 nights). Acking
-- a message changes its state, a column of the partial indexes' predicates,
-- so every ack leaves a dead entry in the ready index until a vacuum. At
-- PostgreSQL's default scale factor (20% of the table) autovacuum comes
-- about every 18 nights, and until it does every scan of the ready index
-- (claims, `status`'s open counts) walks the dead entries of the nights
-- since. 1% of a 90-night table is about one night's messages: autovacuum
-- now comes once a night, after the acks, whatever a night's size.
ALTER TABLE queue_messages SET (autovacuum_vacuum_scale_factor = 0.01);

-- +goose Down
ALTER TABLE queue_messages RESET (autovacuum_vacuum_scale_factor);
