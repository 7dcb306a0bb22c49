package migrations_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// openCountersBackfill returns 00023's statement that brings the counter
// rows of runs open before it to its schema.
func openCountersBackfill(t *testing.T) string {
	t.Helper()
	sqlFile, err := os.ReadFile("00023_open_counters.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, stmt, _ := strings.Cut(string(sqlFile), "-- their retries, through each open run's range of items' primary key.\n")
	stmt, _, _ = strings.Cut(stmt, ";")
	if !strings.HasPrefix(stmt, "UPDATE run_shards") {
		t.Fatalf("no backfill statement in 00023_open_counters.sql: %q", stmt)
	}
	return stmt
}

// TestOpenCountersBackfillMatchesTheLedger takes the counter rows the
// ledger kept for an open run (open items called, throttled, waiting for a
// retry, a dead letter requeued) back to what they were before 00023 (the
// calls of closed items only, no count of retries), runs 00023's backfill
// and compares the rows it makes with those the ledger kept.
func TestOpenCountersBackfillMatchesTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := recordedRun(t, pool)
	const rows = `SELECT shard, provider, remaining, provider_calls, throttles, retry_scheduled
	                FROM run_shards WHERE run_id = $1`
	kept := rowSet(t, pool, rows, runID)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE run_shards p SET provider_calls = p.provider_calls - o.calls, throttles = p.throttles - o.throttles,
			                        retry_scheduled = 0
			  FROM (SELECT shard, provider, sum(attempts) AS calls, sum(throttles) AS throttles FROM items
			         WHERE run_id = $1 AND state IN ('queued', 'retry_scheduled') GROUP BY shard, provider) o
			 WHERE p.run_id = $1 AND p.shard = o.shard AND p.provider = o.provider AND (o.calls > 0 OR o.throttles > 0)`, runID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			t.Fatal("the run has no open item with calls: nothing to backfill")
		}
		_, err = tx.Exec(ctx, openCountersBackfill(t))
		return err
	})
	if err != nil {
		t.Fatalf("backfill: %v", err)
	}
	filled := rowSet(t, pool, rows, runID)
	if len(kept) != len(filled) {
		t.Fatalf("the ledger kept %d rows, the backfill made %d", len(kept), len(filled))
	}
	for r := range kept {
		if !filled[r] {
			t.Errorf("the ledger's row %s is not the backfill's", r)
		}
	}
}
