package enqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/queue"
)

// TestCancelWithdrawsARun cancels a run of five items: one matched, one
// waiting for a retry, one claimed by a consumer (in flight) and two
// queued. The four open ones end cancelled through recorded transitions,
// their messages are dead-lettered (the in-flight delivery can no longer
// settle), the counters and the completion join count them, redrive leaves
// them alone, and the hash chains still verify.
func TestCancelWithdrawsARun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(5, 2)))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := b.queue.Claim(ctx, 3)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: %d deliveries, %v", len(ds), err)
	}
	matched, retry, inFlight := ds[0], ds[1], ds[2]
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := ledger.Record(ctx, tx, ledger.Change{RunID: matched.RunID, TransactionID: matched.TransactionID,
			From: ledger.Queued, To: ledger.Matched, Called: true, Attempt: 1, Reason: "matched", Actor: "test"}); err != nil {
			return err
		}
		if err := b.queue.Ack(ctx, tx, matched); err != nil {
			return err
		}
		if _, err := ledger.Record(ctx, tx, ledger.Change{RunID: retry.RunID, TransactionID: retry.TransactionID,
			From: ledger.Queued, To: ledger.RetryScheduled, Called: true, Attempt: 1, Reason: "http_503", Actor: "test"}); err != nil {
			return err
		}
		retry.Attempt++
		return b.queue.RetryAt(ctx, tx, retry, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), "http_503")
	})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := b.enq.Cancel(ctx, enqueue.CancelRequest{Date: day.AddDays(1), Reason: "x"}); !errors.Is(err, enqueue.ErrNoRun) {
		t.Errorf("cancel of a date without a run: err = %v, want ErrNoRun", err)
	}
	got, err := b.enq.Cancel(ctx, enqueue.CancelRequest{Date: day, Reason: "wrong export"})
	if err != nil {
		t.Fatal(err)
	}
	if got.RunID != res.RunID || got.Cancelled != 4 || got.DeadLettered != 4 {
		t.Fatalf("cancel = %+v, want 4 items and 4 messages of run %s", got, res.RunID)
	}

	// The consumer holding the in-flight message comes back too late.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.queue.Ack(ctx, tx, inFlight) })
	if !errors.Is(err, queue.ErrStaleLease) {
		t.Errorf("late ack of the in-flight message: err = %v, want ErrStaleLease", err)
	}
	// Nothing is left to call the provider for.
	if again, err := b.queue.Claim(ctx, 10); err != nil || len(again) != 0 {
		t.Errorf("claim after cancel: %d deliveries, %v; want none", len(again), err)
	}

	for _, c := range []struct {
		what string
		sql  string
		want int
	}{
		{"cancelled items", `SELECT count(*) FROM items WHERE state = 'cancelled'`, 4},
		{"matched items", `SELECT count(*) FROM items WHERE state = 'matched'`, 1},
		{"cancel transitions with actor and reason", `SELECT count(*) FROM transitions
			WHERE to_state = 'cancelled' AND reason = 'cancelled' AND actor = 'tester@host' AND details ->> 'detail' = 'wrong export'`, 4},
		{"cancel transitions from retry_scheduled", `SELECT count(*) FROM transitions
			WHERE from_state = 'retry_scheduled' AND to_state = 'cancelled'`, 1},
		{"dead letters with reason cancelled", `SELECT count(*) FROM queue_messages WHERE state = 'dead' AND reason = 'cancelled' AND lease IS NULL`, 4},
		{"open items in the counters", `SELECT sum(remaining) FROM run_shards`, 0},
		{"cancelled in the counters", `SELECT sum(cancelled) FROM account_progress`, 4},
		{"run completion", `SELECT count(*) FROM run_completions WHERE items = 5 AND matched = 1 AND cancelled = 4`, 1},
		{"account completions", `SELECT count(*) FROM account_completions`, 2},
		{"run marked cancelled", `SELECT count(*) FROM runs WHERE cancelled_at IS NOT NULL AND completed_at IS NOT NULL
			AND cancelled_by = 'tester@host' AND cancel_reason = 'wrong export'`, 1},
		{"run summary", `SELECT cancelled FROM run_summary`, 4},
	} {
		if n := b.count(t, c.sql); n != c.want {
			t.Errorf("%s = %d, want %d", c.what, n, c.want)
		}
	}

	// A redrive leaves a cancelled run's dead letters alone.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		n, err := enqueue.Requeue(ctx, b.queue, tx, queue.Filter{}, "redrive", "test")
		if n != 0 {
			t.Errorf("redrive after cancel requeued %d items, want 0", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Cancelling the complete run again changes nothing.
	again, err := b.enq.Cancel(ctx, enqueue.CancelRequest{Date: day, Reason: "again"})
	if err != nil || again.Cancelled != 0 {
		t.Errorf("second cancel = %+v, %v; want nothing cancelled", again, err)
	}
	rep, err := audit.Verify(ctx, b.pool, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Transitions != 6 {
		t.Errorf("audit verify: %+v, want intact chains and 6 transitions", rep)
	}
}
