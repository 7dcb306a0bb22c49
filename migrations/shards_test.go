package migrations_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// TestShardsByProviderBackfillMatchesTheLedger folds the counter rows the
// ledger kept for a run of three providers back into one row per shard, as
// they were before 00015, runs 00015's statements for such runs (and
// 00023's, which brings rows of that time to this schema), and compares
// the rows they make with those the ledger kept.
func TestShardsByProviderBackfillMatchesTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	sqlFile, err := os.ReadFile("00015_shards_by_provider.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, backfill, _ := strings.Cut(string(sqlFile), "-- provider (the runs are found in run_breakdown, not by reading items).\n")
	backfill, _, _ = strings.Cut(backfill, "-- +goose Down")
	stmts := strings.Split(strings.TrimSpace(backfill), ";")
	if len(stmts) != 4 || !strings.HasPrefix(strings.TrimSpace(stmts[2]), "INSERT INTO run_shards") {
		t.Fatalf("no backfill statements in 00015_shards_by_provider.sql: %q", backfill)
	}

	runID := recordedRun(t, pool)
	const rows = `SELECT shard, provider, remaining, matched, mismatched, missing, dead_lettered, cancelled,
	                     provider_calls, throttles, retry_scheduled FROM run_shards WHERE run_id = $1`
	read := func() map[string]bool { return rowSet(t, pool, rows, runID) }
	kept := read()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The rows as a ledger before 00015 kept them: one per shard.
		if _, err := tx.Exec(ctx, `
			WITH gone AS (DELETE FROM run_shards WHERE run_id = $1 RETURNING *)
			INSERT INTO run_shards (run_id, shard, provider, remaining, matched, mismatched, missing, dead_lettered,
			                        cancelled, provider_calls, throttles)
			SELECT run_id, shard, '', sum(remaining), sum(matched), sum(mismatched), sum(missing), sum(dead_lettered),
			       sum(cancelled), sum(provider_calls), sum(throttles)
			  FROM gone GROUP BY run_id, shard`, runID); err != nil {
			return err
		}
		for _, s := range stmts[:3] {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, openCountersBackfill(t))
		return err
	})
	if err != nil {
		t.Fatalf("backfill: %v", err)
	}
	filled := read()
	providers := map[string]bool{}
	for r := range kept {
		providers[strings.Split(r, ",")[1]] = true
	}
	if len(providers) != 3 || len(kept) != len(filled) {
		t.Fatalf("the ledger kept %d rows of %d providers, the backfill made %d", len(kept), len(providers), len(filled))
	}
	for r := range kept {
		if !filled[r] {
			t.Errorf("the ledger's row %s is not the backfill's", r)
		}
	}
}
