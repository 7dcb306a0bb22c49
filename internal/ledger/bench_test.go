package ledger_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// BenchmarkRecordTerminal measures terminal changes recorded by 8 parallel
// goroutines, each in its own transaction, against a server with stock
// durability (DATABASE_URL's, or a throwaway cluster with fsync on):
//
//   - sharded: ledger.Record as it is, counting down one of the run's
//     ledger.Shards shard rows and the item's account row;
//   - sharded_mismatched: the same with every item mismatched, which also
//     adds it to its row of run_breakdown (a match does not);
//   - single_counter: the same plus the naive join, a plain
//     UPDATE … SET remaining = remaining - 1 on one row per run in the same
//     transaction, which every transaction must wait for until the previous
//     one has committed.
//
// Rates are reported as changes/s.
//
//	go test -run '^$' -bench RecordTerminal -benchtime 4000x ./internal/ledger/
func BenchmarkRecordTerminal(b *testing.B) {
	ctx := context.Background()
	pool := durablePool(b)
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_run_counter (run_id uuid PRIMARY KEY, remaining int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		naive bool
		to    ledger.State
	}{{"sharded", false, ledger.Matched}, {"sharded_mismatched", false, ledger.Mismatched}, {"single_counter", true, ledger.Matched}} {
		naive := bc.naive
		b.Run(bc.name, func(b *testing.B) {
			// seedRun always uses the same date and generation 1: move
			// earlier rounds' runs out of the way.
			if _, err := pool.Exec(ctx, `UPDATE runs SET generation = generation + (SELECT max(generation) FROM runs)`); err != nil {
				b.Fatal(err)
			}
			runID := seedRun(b, pool, b.N, max(1, b.N/8))
			if _, err := pool.Exec(ctx, `INSERT INTO bench_run_counter VALUES ($1, $2)`, runID, b.N); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			// RunParallel starts parallelism × GOMAXPROCS goroutines: 8.
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("tx%05d", next.Add(1)-1)
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						_, err := ledger.Record(ctx, tx, ledger.Change{RunID: runID, TransactionID: id, From: ledger.Queued,
							To: bc.to, Called: true, Attempt: 1, HTTPStatus: 200, Reason: string(bc.to), Actor: "bench"})
						if err != nil || !naive {
							return err
						}
						_, err = tx.Exec(ctx, `UPDATE bench_run_counter SET remaining = remaining - 1 WHERE run_id = $1`, runID)
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
			var completions int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM run_completions WHERE run_id = $1`, runID).Scan(&completions); err != nil {
				b.Fatal(err)
			}
			if completions != 1 {
				b.Fatalf("run completions = %d, want 1", completions)
			}
		})
	}
}

// durablePool returns a pool on a freshly migrated database of a durable
// server (see pgtest.Durable).
func durablePool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	return pgtest.Durable(b, 12)
}
