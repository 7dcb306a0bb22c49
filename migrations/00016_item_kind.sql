-- +goose Up
-- A row of a day's export is a payment, a refund or a dispute; the provider
-- keeps each kind as its own object behind its own request. The kind the
-- payment file states is kept on the item; when the file does not state one,
-- the provider's profile tells by the transaction id (Stripe's re_, dp_) at
-- lookup time.

ALTER TABLE items ADD COLUMN kind text NOT NULL DEFAULT ''
    CHECK (kind IN ('', 'payment', 'refund', 'dispute'));

COMMENT ON COLUMN items.kind IS 'What the row is, from the payment file''s kind column: payment, refund or dispute; empty when the file does not say (the provider profile''s id prefixes decide at lookup, else payment). A refund or dispute amount is money going back: negative in the file.';

-- +goose Down
ALTER TABLE items DROP COLUMN kind;
