package queue

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// BenchmarkQueue measures publish and claim+ack against a PostgreSQL server
// with stock durability (fsync and synchronous_commit on): the server of
// DATABASE_URL when set, otherwise a throwaway cluster started with
// pgserver.Config{Durable: true}. Rates are reported as msgs/s.
//
//	go test -run '^$' -bench Queue -benchtime 20000x ./internal/queue/
func BenchmarkQueue(b *testing.B) {
	ctx := context.Background()
	pool := durablePool(b)
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		b.Fatal(err)
	}
	b.Logf("server: fsync=%s synchronous_commit=%s", fsync, syncCommit)
	q := New(pool, Config{})
	reset := func(b *testing.B) {
		b.Helper()
		if _, err := pool.Exec(ctx, `TRUNCATE queue_messages`); err != nil {
			b.Fatal(err)
		}
	}
	rate := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	}

	b.Run("publish/batch=100", func(b *testing.B) {
		reset(b)
		ms := messages(uuid.New(), "nightly-2026-10-24", 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i += 100 {
			if _, err := q.Publish(ctx, pool, ms[i:min(i+100, b.N)]); err != nil {
				b.Fatal(err)
			}
		}
		rate(b)
	})
	b.Run("publish/batch=100/publishers=4", func(b *testing.B) {
		reset(b)
		ms := messages(uuid.New(), "nightly-2026-10-24", 0, b.N)
		b.ResetTimer()
		parallel(b, 4, func(w int) error {
			for i := w * 100; i < b.N; i += 4 * 100 {
				if _, err := q.Publish(ctx, pool, ms[i:min(i+100, b.N)]); err != nil {
					return err
				}
			}
			return nil
		})
		rate(b)
	})
	b.Run("publish/one_copy", func(b *testing.B) {
		reset(b)
		ms := messages(uuid.New(), "nightly-2026-10-24", 0, b.N)
		b.ResetTimer()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := q.publishCopy(ctx, tx, ms)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		rate(b)
	})
	claimAck := func(perMessage bool) func(b *testing.B) {
		return func(b *testing.B) {
			reset(b)
			if _, err := q.Publish(ctx, pool, messages(uuid.New(), "nightly-2026-10-24", 0, b.N)); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE queue_messages`); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			parallel(b, 4, func(int) error {
				for {
					ds, err := q.Claim(ctx, 100)
					if err != nil || len(ds) == 0 {
						return err
					}
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if !perMessage {
							_, err := q.AckBatch(ctx, tx, ds)
							return err
						}
						for _, d := range ds {
							if err := q.Ack(ctx, tx, d); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						return err
					}
				}
			})
			rate(b)
		}
	}
	b.Run("claim_ack/consumers=4/batch=100/ack_batch", claimAck(false))
	b.Run("claim_ack/consumers=4/batch=100/ack_each", claimAck(true))
}

// parallel runs fn(0..n-1) in n goroutines and fails b on the first error.
func parallel(b *testing.B, n int, fn func(worker int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range n {
		wg.Go(func() {
			if err := fn(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// durablePool returns a pool on a freshly migrated database of a durable
// server (see pgtest.Durable).
func durablePool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	return pgtest.Durable(b, 0)
}
