package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"time"

	"github.com/google/uuid"
)

// ErrNoItem is returned by VerifyItem for an item that does not exist.
var ErrNoItem = errors.New("no such item")

// Link is one transition of an item's chain as VerifyItem found it.
type Link struct {
	Seq        int       `json:"seq"`
	From       string    `json:"from_state"`
	To         string    `json:"to_state"`
	At         time.Time `json:"at"`
	Attempt    int       `json:"attempt"`
	HTTPStatus *int      `json:"http_status"`
	Reason     string    `json:"reason"`
	// RetryAfterMS is the delay chosen before the next attempt, for retries.
	RetryAfterMS *int64 `json:"retry_after_ms"`
	// Details is the transition's JSON details as stored; empty for none.
	Details string `json:"details"`
	Actor   string `json:"actor"`
	// PrevHash and Hash are the stored hashes, hex.
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	// OK is true when the stored prev_hash is the previous row's recomputed
	// hash and the stored hash is the recomputed hash of this row.
	OK bool `json:"ok"`
}

// ItemChain is the verified history of one item.
type ItemChain struct {
	RunID         uuid.UUID `json:"run_id"`
	TransactionID string    `json:"transaction_id"`
	Links         []Link    `json:"links"`
	// Break is the first thing found wrong with the chain (the same checks
	// Verify makes, head and length against the item row included); nil
	// when it verified.
	Break *Break `json:"break"`
}

// OK reports whether the chain verified.
func (c ItemChain) OK() bool { return c.Break == nil }

// VerifyItem reads one item's transitions with db (best a read-only
// transaction, so both reads see one snapshot) and
// recomputes their chain with the same code as Verify, so a page can show a
// single transaction's history with each link checked. It returns ErrNoItem
// when the item does not exist.
func VerifyItem(ctx context.Context, db Querier, runID uuid.UUID, transactionID string) (ItemChain, error) {
	out := ItemChain{RunID: runID, TransactionID: transactionID, Links: []Link{}}
	item, err := readItem(ctx, db, runID, transactionID)
	if err != nil {
		return out, err
	}
	var (
		c       chain
		payload []byte
	)
	c.start(item)
	err = readTransitions(ctx, db, runID, transactionID, func(row *transitionRow) error {
		before := c.broken
		payload = row.appendPayload(payload[:0], item)
		c.add(row, payload)
		l := Link{Seq: *row.seq, From: deref(row.fromState), To: deref(row.toState),
			At: time.UnixMicro(derefInt(row.atMicros)), Attempt: derefInt(row.attempt), HTTPStatus: row.httpStatus,
			Reason: deref(row.reason), RetryAfterMS: row.retryAfterMS, Details: deref(row.details),
			Actor: deref(row.actor), PrevHash: hex.EncodeToString(row.prevHash), Hash: hex.EncodeToString(row.hash)}
		l.OK = before == nil && c.broken == nil
		out.Links = append(out.Links, l)
		return nil
	})
	if err != nil {
		return out, err
	}
	if b, ok := c.finish(); !ok {
		out.Break = &b
	}
	return out, nil
}
