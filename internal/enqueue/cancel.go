package enqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
)

// CancelRequest describes the withdrawal of a run.
type CancelRequest struct {
	// Date is the business date. Required.
	Date payments.Date
	// Generation selects the run of the date. Defaults to 0: the latest.
	Generation int
	// Reason says why, for the ledger. Required.
	Reason string
}

// CancelResult describes what a cancel did.
type CancelResult struct {
	ledger.Run
	// Cancelled is the number of open items withdrawn; 0 when the run was
	// complete already and nothing changed.
	Cancelled int
	// DeadLettered is the number of their queue messages dead-lettered.
	DeadLettered int
}

// Cancel withdraws a run in one transaction: its open items reach the
// terminal state cancelled through recorded transitions (actor and reason),
// their messages are dead-lettered with reason cancelled (a delivery in
// flight can no longer settle), and the completion join is written. No
// provider call is made for them afterwards. A run with no open item is
// left as it is. It returns ErrNoRun (wrapped) when the date has no such
// run.
func (e *Enqueuer) Cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	if req.Date.IsZero() {
		return CancelResult{}, errors.New("cancel: no business date")
	}
	if req.Reason == "" {
		return CancelResult{}, errors.New("cancel: no reason")
	}
	var res CancelResult
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := ledger.LockRun(ctx, tx, req.Date, req.Generation)
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("cancel %s: %w", req.Date, ErrNoRun)
		}
		if err != nil {
			return err
		}
		res = CancelResult{Run: run}
		res.Cancelled, res.DeadLettered, err = cancelRun(ctx, e.cfg.Queue, tx, run, req.Reason, e.cfg.Actor)
		return err
	})
	if err != nil {
		return CancelResult{}, err
	}
	if res.Cancelled > 0 {
		e.cfg.Logger.Info("run cancelled", "run_id", res.RunID, "reconciliation_id", res.ReconciliationID,
			"items", res.Cancelled, "reason", req.Reason)
	}
	return res, nil
}

// cancelRun withdraws the open items of run, locked by the caller, in tx:
// first the ledger (which locks the items as consumers do), then their
// messages. It returns the items cancelled and the messages dead-lettered.
func cancelRun(ctx context.Context, q *queue.Queue, tx pgx.Tx, run ledger.Run, note, actor string) (items, messages int, err error) {
	w, err := ledger.CancelRun(ctx, tx, run.RunID, note, actor, time.Time{})
	if err != nil {
		return 0, 0, err
	}
	n, err := q.DeadLetterKeys(ctx, tx, w.IdempotencyKeys, queue.ReasonCancelled, note)
	if err != nil {
		return 0, 0, fmt.Errorf("dead-letter messages of run %s: %w", run.ReconciliationID, err)
	}
	return len(w.TransactionIDs), n, nil
}
