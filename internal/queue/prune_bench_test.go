package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// BenchmarkPruneAcked deletes 1,000,000 acked messages of a run completed
// 100 days ago while a consumer claims and acks another run's messages, 64
// at a time, and reports the prune's time and the consumer's claim rate
// before and during the prune (stock durability, as BenchmarkQueue).
//
//	nice -n 10 go test -run '^$' -bench PruneAcked -benchtime 1x -timeout 30m ./internal/queue/
func BenchmarkPruneAcked(b *testing.B) {
	ctx := context.Background()
	pool := durablePool(b)
	q := New(pool, Config{})
	const acked, open = 1_000_000, 400_000
	old, live := uuid.New(), uuid.New()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256,
		                   time_zone, item_count, created_at, completed_at)
		 VALUES ($1, 'nightly-2026-01-10', '2026-01-10', 1, 'cron', 'bench', 'x', '', 'UTC', 0, now() - interval '101 days', now() - interval '100 days'),
		        ($2, 'nightly-2026-10-24', '2026-10-24', 1, 'cron', 'bench', 'x', '', 'UTC', 0, now(), NULL)`, []any{old, live}},
		// The old run's messages, acked, then the live run's, ready: the
		// prune walks ids that the consumer's claims do not touch.
		{`INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, state, visible_at, enqueued_at, changed_at)
		 SELECT $1, 'nightly-2026-01-10', 'tx' || i, 'nightly-2026-01-10:tx' || i, 'acked', now(), now(), now()
		   FROM generate_series(1, $2) i`, []any{old, acked}},
		{`INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, state, visible_at, enqueued_at, changed_at)
		 SELECT $1, 'nightly-2026-10-24', 'tx' || i, 'nightly-2026-10-24:tx' || i, 'ready', now(), now(), now()
		   FROM generate_series(1, $2) i`, []any{live, open}},
		{`VACUUM ANALYZE queue_messages`, nil},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			b.Fatal(err)
		}
	}
	claimAck := func() (int, error) {
		ds, err := q.Claim(ctx, 64)
		if err != nil || len(ds) == 0 {
			return 0, err
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := q.AckBatch(ctx, tx, ds)
			return err
		})
		return len(ds), err
	}
	// The consumer's rate alone: 20,000 messages.
	t0 := time.Now()
	for n := 0; n < 20_000; {
		k, err := claimAck()
		if err != nil || k == 0 {
			b.Fatalf("claim and ack: %d, %v", k, err)
		}
		n += k
	}
	before := 20_000 / time.Since(t0).Seconds()

	var claimed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			k, err := claimAck()
			if err != nil || k == 0 {
				b.Errorf("claim and ack during the prune: %d, %v (raise open?)", k, err)
				return
			}
			claimed.Add(int64(k))
		}
	})
	b.ResetTimer()
	t0 = time.Now()
	res, err := q.PruneAcked(ctx, []uuid.UUID{old}, 0, false)
	elapsed := time.Since(t0)
	during := float64(claimed.Load()) / elapsed.Seconds()
	b.StopTimer()
	close(stop)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	if res.Messages != acked {
		b.Fatalf("pruned %d messages, want %d", res.Messages, acked)
	}
	b.ReportMetric(elapsed.Seconds(), "prune_s")
	b.ReportMetric(float64(acked)/elapsed.Seconds(), "pruned_msgs/s")
	b.ReportMetric(before, "acked_msgs/s_before")
	b.ReportMetric(during, "acked_msgs/s_during")
	b.Logf("pruned %d messages in %d batches in %s; consumer claimed and acked %.0f msgs/s before, %.0f during",
		res.Messages, res.Batches, elapsed.Round(time.Millisecond), before, during)
}
