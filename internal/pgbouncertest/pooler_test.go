package pgbouncertest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
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
	directURL string
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
	return &bundle{direct: direct, pooled: pooled, directURL: conn, pooledURL: through}
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
	if s, err := q.Stats(ctx); err != nil || s.Available != int64(dead) {
		t.Fatalf("stats: %+v, %v", s, err)
	}
	if s, err := q.ExactStats(ctx); err != nil || s.Available != int64(dead) || s.Total != total {
		t.Fatalf("exact stats: %+v, %v", s, err)
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
	if err := limiter.SaveSettings(ctx, b.pooled, limiter.DefaultName, limiter.Settings{Rate: 50, Burst: 5}, limiter.SetBy{Actor: "test"}); err != nil {
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

// TestListenerThroughTransactionPooler: through the pooler alone, the
// listener polls and says so once at info; with a direct listen URL it
// listens, and a publish through the pooler wakes it.
func TestListenerThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	polling := queue.New(b.pooled, queue.Config{Logger: logger})
	for range 2 {
		l, err := polling.Listen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Polls() {
			t.Fatal("a listener through a transaction pooler listens")
		}
		if err := l.Wait(ctx, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		l.Close(ctx)
	}
	if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"level":"INFO"`) ||
		!strings.Contains(lines[0], "poll") {
		t.Fatalf("want one info line about polling, got:\n%s", logs.String())
	}

	q := queue.New(b.pooled, queue.Config{ListenURL: b.directURL})
	l, err := q.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	if l.Polls() {
		t.Fatal("a listener with a direct listen URL polls")
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- l.Wait(ctx, time.Minute) }()
	run := uuid.New()
	// Publish until the listener wakes: a publish made before it blocks
	// makes it return at once, after it blocks its notification wakes it.
	for {
		tx := uuid.NewString()
		if _, err := q.Publish(ctx, b.pooled, []queue.Message{{RunID: run, ReconciliationID: "r", TransactionID: tx, IdempotencyKey: "r:" + tx}}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited > 20*time.Second {
				t.Fatalf("woken after %v", waited)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestEveryExecModeThroughTransactionPooler runs publish (both paths),
// claim, ack and release with each of pgx's exec modes named in the
// connection string: every parameter must be encodable without the server's
// help too.
func TestEveryExecModeThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			pool, err := dbconn.Open(ctx, dbconn.Config{URL: b.pooledURL + " default_query_exec_mode=" + mode})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			switch mode {
			case "cache_statement", "describe_exec":
				// Named statements clash on a transaction pooler, and
				// describe_exec runs an unnamed statement prepared in an
				// earlier round trip, which may have gone to another server
				// connection: these modes are for direct connections and
				// session pooling.
				return
			}
			q := queue.New(pool, queue.Config{})
			run := uuid.New()
			for _, n := range []int{5, 1200} {
				msgs := make([]queue.Message, n)
				for i := range msgs {
					tx := fmt.Sprintf("%s-%d-%d", mode, n, i)
					msgs[i] = queue.Message{RunID: run, ReconciliationID: "r", TransactionID: tx, IdempotencyKey: "r:" + tx}
				}
				if res, err := q.Publish(ctx, pool, msgs); err != nil || res.Published != n {
					t.Fatalf("publish %d: %+v, %v", n, res, err)
				}
			}
			ds, err := q.Claim(ctx, 64)
			if err != nil || len(ds) != 64 {
				t.Fatalf("claim: %d, %v", len(ds), err)
			}
			if err := q.Release(ctx, ds[32:]); err != nil {
				t.Fatal(err)
			}
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				stale, err := q.AckBatch(ctx, tx, ds[:32])
				if len(stale) > 0 {
					var l string
					_ = b.direct.QueryRow(ctx, `SELECT lease::text FROM queue_messages WHERE message_id = $1`, stale[0].ID).Scan(&l)
					return fmt.Errorf("%d stale; lease %s in the table, %s claimed", len(stale), l, stale[0].Lease)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]int64, 32)
			for i, d := range ds[:32] {
				ids[i] = d.ID
			}
			if n := b.count(t, `SELECT count(*) FROM queue_messages WHERE message_id = ANY ($1) AND state = 'acked'`, ids); n != 32 {
				t.Fatalf("%d acked, want 32", n)
			}
		})
	}
	// No publish left a staging table behind on a server connection.
	if n := b.count(t, `SELECT count(*) FROM pg_class WHERE relname = 'queue_publish_staging'`); n != 0 {
		t.Fatalf("%d staging tables outlived their transaction", n)
	}
}
