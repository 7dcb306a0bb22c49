package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// cancelChunk is the most items one RecordBatch of a cancel carries, so a
// run of millions does not become one statement of millions of array
// elements.
const cancelChunk = 10000

// Withdrawal reports what CancelRun withdrew.
type Withdrawal struct {
	// TransactionIDs lists the items moved to cancelled.
	TransactionIDs []string
	// IdempotencyKeys are the same items' keys, in the same order: the
	// queue dead-letters their messages by them.
	IdempotencyKeys []string
	// Result is what the changes completed: the run and the accounts they
	// finished, whose completion records were written.
	Result
}

// CancelRun withdraws a run inside the caller's transaction: every open
// item (queued or retry_scheduled) moves to the terminal state cancelled
// with a transition giving reason "cancelled", the operator's note as its
// detail and the actor; the counters count them down and the completion
// records of the accounts and the run they finish are written, as for any
// other outcome. The run row records when, by whom and why. A run with no
// open item is left alone and the result is empty.
//
// It locks the run's counter rows and then its open items, in the order
// consumers lock them, so a consumer recording an item at the same time
// either commits first (and its outcome stands) or finds the item
// cancelled. The caller dead-letters the items' messages in the same
// transaction (queue.DeadLetterKeys), so a delivery in flight cannot
// settle afterwards.
func CancelRun(ctx context.Context, tx DB, runID uuid.UUID, note, actor string, at time.Time) (Withdrawal, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM account_progress WHERE run_id = $1 ORDER BY account_id FOR UPDATE`, runID)
	b.Queue(`SELECT 1 FROM run_shards WHERE run_id = $1 ORDER BY shard, provider FOR UPDATE`, runID)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Withdrawal{}, fmt.Errorf("lock counters of run %s: %w", runID, err)
	}
	rows, err := tx.Query(ctx, `
		SELECT transaction_id, idempotency_key, state FROM items
		 WHERE run_id = $1 AND state IN `+sqlList(OpenStates())+`
		 ORDER BY transaction_id
		   FOR UPDATE`, runID)
	if err != nil {
		return Withdrawal{}, fmt.Errorf("lock open items of run %s: %w", runID, err)
	}
	type open struct {
		ID, Key string
		State   State
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[open])
	if err != nil {
		return Withdrawal{}, fmt.Errorf("lock open items of run %s: %w", runID, err)
	}
	var out Withdrawal
	if len(items) == 0 {
		return out, nil
	}
	var details map[string]any
	if note != "" {
		details = map[string]any{"detail": note}
	}
	for start := 0; start < len(items); start += cancelChunk {
		chunk := items[start:min(start+cancelChunk, len(items))]
		cs := make([]Change, len(chunk))
		for i, it := range chunk {
			cs[i] = Change{RunID: runID, TransactionID: it.ID, From: it.State, To: Cancelled,
				Reason: string(Cancelled), Details: details, Actor: actor, At: at}
			out.TransactionIDs = append(out.TransactionIDs, it.ID)
			out.IdempotencyKeys = append(out.IdempotencyKeys, it.Key)
		}
		res, err := RecordBatch(ctx, tx, cs)
		if err != nil {
			return Withdrawal{}, fmt.Errorf("cancel items of run %s: %w", runID, err)
		}
		out.AccountsCompleted += res.AccountsCompleted
		out.RunsCompleted = append(out.RunsCompleted, res.RunsCompleted...)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE runs SET cancelled_at = coalesce($2, now()), cancelled_by = $3, cancel_reason = $4
		 WHERE run_id = $1`, runID, nullTime(at), actor, note); err != nil {
		return Withdrawal{}, fmt.Errorf("record cancel of run %s: %w", runID, err)
	}
	return out, nil
}
