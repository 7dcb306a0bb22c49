package pgbouncertest_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgbouncertest"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/report"
	"github.com/reconcile/reconcile/internal/schedule"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a database reached both directly and through a PgBouncer in
// transaction pooling mode.
type bundle struct {
	direct    *pgxpool.Pool
	pooled    *pgxpool.Pool
	pooledURL string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	conn := pgtest.ConnString(t)
	through := pgbouncertest.Start(t, conn, pgbouncertest.Config{PoolSize: 4})
	ctx := context.Background()
	direct, err := dbconn.Open(ctx, dbconn.Config{URL: conn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	pooled, err := dbconn.Open(ctx, dbconn.Config{URL: through, MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pooled.Close)
	return &bundle{direct: direct, pooled: pooled, pooledURL: through}
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.direct.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestQueueThroughTransactionPooler publishes through both publish paths
// (arrays and COPY with its staging table) and lets four claimers, sharing
// fewer server connections than they hold client connections, settle every
// message with each kind of settlement.
func TestQueueThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	q := queue.New(b.pooled, queue.Config{})
	run := uuid.New()
	msgs := func(from, n int) []queue.Message {
		out := make([]queue.Message, n)
		for i := range out {
			tx := fmt.Sprintf("tx%05d", from+i)
			out[i] = queue.Message{RunID: run, ReconciliationID: "nightly-2026-10-24", TransactionID: tx, IdempotencyKey: "nightly-2026-10-24:" + tx}
		}
		return out
	}
	// Publish twice each way, so that a second publish meets a server
	// connection that an earlier one left behind.
	for i, batch := range [][]queue.Message{msgs(0, 10), msgs(10, 1500), msgs(1510, 10), msgs(1520, 1500), msgs(0, 1200)} {
		res, err := q.Publish(ctx, b.pooled, batch)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if i == 4 && (res.Published != 0 || res.Duplicates != 1200) {
			t.Fatalf("republish: %+v, want 1200 duplicates", res)
		}
	}
	const total = 3020
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for {
				ds, err := q.Claim(ctx, 32)
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					return
				}
				err = pgx.BeginFunc(ctx, b.pooled, func(tx pgx.Tx) error {
					switch w {
					case 0:
						for _, d := range ds {
							if err := q.Ack(ctx, tx, d); err != nil {
								return err
							}
						}
						return nil
					case 1:
						return q.DeadLetter(ctx, tx, ds[0], "test", "boom")
					default:
						stale, err := q.AckBatch(ctx, tx, ds)
						if len(stale) > 0 {
							return fmt.Errorf("%d stale", len(stale))
						}
						return err
					}
				})
				if err != nil {
					errs <- err
					return
				}
				if w == 1 {
					if err := q.Release(ctx, ds[1:]); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	dead := b.count(t, `SELECT count(*) FROM queue_messages WHERE state = 'dead'`)
	if acked := b.count(t, `SELECT count(*) FROM queue_messages WHERE state = 'acked'`); acked+dead != total || dead == 0 {
		t.Fatalf("%d acked + %d dead, want %d in all", acked, dead, total)
	}
	tx, err := b.pooled.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := q.Redrive(ctx, tx, queue.Filter{RunID: run})
	if err != nil || len(moved) != dead {
		t.Fatalf("redrive: %d moved, %v; want %d", len(moved), err, dead)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := q.Stats(ctx); err != nil || s.Available != int64(dead) || s.Total != total {
		t.Fatalf("stats: %+v, %v", s, err)
	}
}

// TestEnqueueScheduleStatusThroughTransactionPooler enqueues a date by
// hand, ticks two schedulers at once for another date, and reads the status,
// all through the pooler.
func TestEnqueueScheduleStatusThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, d := range []string{"2026-10-23", "2026-10-24"} {
		var sb strings.Builder
		sb.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at\n")
		for i := range 1500 {
			fmt.Fprintf(&sb, "tx_%s_%04d,acc_%d,%d,EUR,succeeded,%sT10:%02d:00Z\n", d, i, i%7, 100+i, d, i%60)
		}
		if err := os.WriteFile(filepath.Join(dir, "payments-"+d+".csv"), []byte(sb.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	q := queue.New(b.pooled, queue.Config{})
	enq, err := enqueue.New(b.pooled, enqueue.Config{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	d23, _ := payments.ParseDate("2026-10-23")
	path := filepath.Join(dir, "payments-2026-10-23.csv")
	res, err := enq.Enqueue(ctx, enqueue.Request{Date: d23, Source: path, Open: func() (_ io.ReadCloser, err error) { return os.Open(path) }})
	if err != nil || res.Items != 1500 {
		t.Fatalf("enqueue: %+v, %v", res, err)
	}

	spec, err := schedule.ParseSpec("0 2 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	src, err := schedule.FileTemplate(filepath.Join(dir, "payments-{date}.csv"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	ticks := make([]schedule.Tick, 3)
	for i := range ticks {
		s, err := schedule.New(b.pooled, enq, schedule.Config{Spec: spec, DateOffset: -1, Source: src, Name: fmt.Sprint("s", i)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { ticks[i] = s.Tick(ctx, at, false) })
	}
	wg.Wait()
	enqueued := 0
	for _, tk := range ticks {
		switch tk.Outcome {
		case schedule.Enqueued:
			enqueued++
		case schedule.Existing, schedule.Skipped:
		default:
			t.Fatalf("tick: %+v", tk)
		}
	}
	if enqueued != 1 {
		t.Fatalf("%d ticks enqueued the date, want 1: %+v", enqueued, ticks)
	}
	// No server connection is left holding the date's lock: a session lock
	// taken and released through a transaction pooler may be released on
	// another server connection than the one that took it.
	class, _ := schedule.LockKey(d23)
	if n := b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid::int4 = $1`, class); n != 0 {
		t.Fatalf("%d schedule locks still held after the ticks", n)
	}
	if n := b.count(t, `SELECT count(*) FROM queue_messages`); n != 3000 {
		t.Fatalf("%d messages, want 3000", n)
	}
	if err := limiter.SaveSettings(ctx, b.pooled, limiter.DefaultName, limiter.Settings{Rate: 50, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	st, err := report.LoadStatus(ctx, b.pooled, report.StatusOptions{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != 2 {
		t.Fatalf("status shows %d runs, want 2", len(st.Runs))
	}
}
