package migrations_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// TestBreakdownBackfillMatchesTheLedger fills run_breakdown for a run the
// ledger recorded (every outcome, a requeue) with 00012's statement for
// runs recorded before it, and compares the rows with those the ledger
// kept.
func TestBreakdownBackfillMatchesTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	sqlFile, err := os.ReadFile("00012_run_breakdown.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, backfill, _ := strings.Cut(string(sqlFile), "-- Runs recorded before this migration: one scan of their items.\n")
	backfill, _, ok := strings.Cut(backfill, ";")
	if !ok || !strings.HasPrefix(backfill, "INSERT INTO run_breakdown") {
		t.Fatalf("no backfill statement in 00012_run_breakdown.sql: %q", backfill)
	}

	runID := recordedRun(t, pool)

	const rows = `SELECT shard, provider, currency, item_count, mismatched, missing, dead_lettered, cancelled,
	                     mismatched_minor, missing_minor, dead_lettered_minor FROM run_breakdown WHERE run_id = $1`
	read := func() map[string]bool { return rowSet(t, pool, rows, runID) }
	kept := read()
	if _, err := pool.Exec(ctx, `DELETE FROM run_breakdown WHERE run_id = $1`, runID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, backfill); err != nil {
		t.Fatalf("backfill: %v", err)
	}
	filled := read()
	if len(kept) == 0 || len(kept) != len(filled) {
		t.Fatalf("the ledger kept %d rows, the backfill made %d", len(kept), len(filled))
	}
	for r := range kept {
		if !filled[r] {
			t.Errorf("the ledger's row %s is not the backfill's", r)
		}
	}
}

// rowSet returns the rows of query as text, as a set.
func rowSet(t *testing.T, pool *pgxpool.Pool, query string, args ...any) map[string]bool {
	t.Helper()
	rs, err := pool.Query(context.Background(), `SELECT r::text FROM (`+query+`) r`, args...)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range texts {
		out[s] = true
	}
	return out
}

// recordedRun records a run of 36 items of three providers (the default
// one among them) and two currencies through the ledger: every outcome, six
// items still queued, and a requeued dead letter.
func recordedRun(t *testing.T, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	runID := uuid.New()
	at := time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)
	states := []ledger.State{ledger.Matched, ledger.Mismatched, ledger.Missing, ledger.DeadLettered, ledger.Matched, ledger.Cancelled}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count)
			VALUES ($1, 'nightly-2026-10-24', '2026-10-24', 1, 'manual', 'test', 'x.csv', '', 'UTC', 36)`, runID); err != nil {
			return err
		}
		for i := range 36 {
			id := fmt.Sprintf("tx%02d", i)
			if _, err := tx.Exec(ctx, `
				INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard, provider)
				VALUES ($1, $2, 'acc', $3, $4, $5, 'succeeded', $6, $7, $8)`,
				runID, id, "k:"+id, 100+i, []string{"EUR", "USD"}[i%2], at, ledger.ShardOf(id), []string{"", "stripe", "paypal"}[i%3]); err != nil {
				return err
			}
		}
		if err := ledger.InitCounters(ctx, tx, runID); err != nil {
			return err
		}
		var cs []ledger.Change
		for i := range 30 { // six stay open: two wait for a retry after a throttle, four were never called
			c := ledger.Change{RunID: runID, TransactionID: fmt.Sprintf("tx%02d", i), From: ledger.Queued,
				To: states[i%len(states)], Called: true, Attempt: 1, Reason: "test", Actor: "test", At: at}
			if i >= 28 {
				c.To, c.Throttled = ledger.RetryScheduled, true
			}
			cs = append(cs, c)
		}
		if _, err := ledger.RecordBatch(ctx, tx, cs); err != nil {
			return err
		}
		_, err := ledger.Requeue(ctx, tx, runID, []string{"tx03"}, "redrive", "test", at)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return runID
}
