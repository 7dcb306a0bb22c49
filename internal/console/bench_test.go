package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/sample"
)

// BenchmarkPages renders every page of the console 20 times against a run of
// RECONCILE_CONSOLE_BENCH_ITEMS items (default 1,000,000) and prints each
// page's median and slowest server time and its number of queries:
//
//	nice go test -run '^$' -bench BenchmarkPages -benchtime 1x -timeout 60m ./internal/console/
//
// The run is recorded through ledger.RecordBatch as a consumer would (one
// terminal transition per item, 1,000 items/s of ledger time): 3% mismatched,
// 2% missing, 0.5% dead-lettered, the rest matched; the limiter's history
// holds a change a second over the run and a week of another limiter's.
// Exports, audit
// verification and bundles read whole runs and are not page views.
func BenchmarkPages(b *testing.B) {
	items := 1_000_000
	if s := os.Getenv("RECONCILE_CONSOLE_BENCH_ITEMS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		items = n
	}
	ctx := context.Background()
	pool := pgtest.Durable(b, 8)
	q := queue.New(pool, queue.Config{})
	d, _ := payments.ParseDate("2026-10-24")
	var csv bytes.Buffer
	if err := sample.Write(&csv, payments.FormatCSV, sample.Config{Date: d, Count: items, Seed: 7}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q})
	if err != nil {
		b.Fatal(err)
	}
	res, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: "bench.csv", Format: payments.FormatCSV,
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(csv.Bytes())), nil }})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("enqueued %d items in %s", res.Items, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	var dead, ids []string
	rows, err := pool.Query(ctx, `SELECT transaction_id FROM items WHERE run_id = $1 ORDER BY transaction_id`, res.RunID)
	if err != nil {
		b.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)
	const batch = 2000
	for lo := 0; lo < len(ids); lo += batch {
		var cs []ledger.Change
		for i := lo; i < min(lo+batch, len(ids)); i++ {
			c := ledger.Change{RunID: res.RunID, TransactionID: ids[i], From: ledger.Queued, Called: true, Attempt: 1,
				Actor: "bench:1", At: t0.Add(time.Duration(i) * time.Millisecond), HTTPStatus: 200}
			switch i % 200 {
			case 0, 1, 2, 3, 4, 5:
				c.To, c.Reason = ledger.Mismatched, "mismatched"
				c.Provider = &ledger.Provider{AmountMinor: 1, Currency: "EUR", Status: "succeeded"}
				c.Differences = []ledger.Difference{{Field: "amount_minor", Expected: "2", Provider: "1"}}
			case 6, 7, 8, 9:
				c.To, c.Reason, c.HTTPStatus = ledger.Missing, "missing", 404
			case 10:
				c.To, c.Reason, c.HTTPStatus = ledger.DeadLettered, "http_400", 400
				c.Details = map[string]any{"detail": "HTTP 400"}
				dead = append(dead, ids[i])
			default:
				c.To, c.Reason = ledger.Matched, "matched"
			}
			cs = append(cs, c)
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ledger.RecordBatch(ctx, tx, cs)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	// The fixture settles the queue in two statements rather than through
	// a million claims: the pages read only the dead letters' rows.
	if _, err := pool.Exec(ctx, `UPDATE queue_messages SET state = CASE WHEN transaction_id = ANY($2) THEN 'dead' ELSE 'acked' END,
		reason = CASE WHEN transaction_id = ANY($2) THEN 'http_400' END WHERE run_id = $1`, res.RunID, dead); err != nil {
		b.Fatal(err)
	}
	// The limiter's history: an operator's limit set before the run, one
	// change a second over the run's 1,000 s (more than a chart reads),
	// and a week of another limiter's changes, one every 3 s.
	if err := limiter.SaveSettings(ctx, pool, limiter.DefaultName, limiter.Settings{Rate: 1200, Burst: 50},
		limiter.SetBy{Actor: "ops@bench", Reason: "the contract"}); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO rate_limiter_history (limiter, recorded_at, cause, rate, estimate, detail)
		SELECT $2, $1::timestamptz + n * interval '1 second', CASE WHEN n % 10 = 0 THEN 'throttle' ELSE 'probe' END,
		       900 + n % 10 * 20, 1100, 'change ' || n
		  FROM generate_series(0, $3::int / 1000) n
		UNION ALL
		SELECT 'provider:other', $1::timestamptz - interval '6 days' + n * interval '3 seconds', 'probe', 50, NULL, 'other ' || n
		  FROM generate_series(1, 200000) n`, t0, limiter.DefaultName, items); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	b.Logf("recorded %d outcomes in %s", len(ids), time.Since(start).Round(time.Millisecond))

	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	h, err := New(Config{Pool: pool, Queue: q, Auth: Auth{Users: map[string]string{"alice": string(hash)}, Operators: []string{"alice"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	cookie, err := h.auth.sessions.create(ctx, "alice", "bench")
	if err != nil {
		b.Fatal(err)
	}
	var msg int64
	if err := pool.QueryRow(ctx, `SELECT min(message_id) FROM queue_messages WHERE state = 'dead'`).Scan(&msg); err != nil {
		b.Fatal(err)
	}
	run := "/runs/" + res.RunID.String()
	pages := []struct{ name, target string }{
		{"runs", "/"},
		{"run", run},
		{"discrepancies", run + "/discrepancies"},
		{"discrepancies, one account", run + "/discrepancies?outcome=all&account=acct_000042"},
		{"discrepancies, page 10", run + "/discrepancies?after=" + ids[len(ids)/2]},
		{"discrepancies, one provider", run + "/discrepancies?outcome=all&provider=(default)"},
		{"dead letters", run + "/dead-letters"},
		{"dead letters, one reason", run + "/dead-letters?reason=http_400&after=" + strconv.FormatInt(msg+100, 10)},
		{"transaction", txLink(res.RunID, dead[0])},
		{"limits", "/limits"},
		{"limits, one limiter's history", "/limits?limiter=" + limiter.DefaultName},
		{"audit (form)", "/audit"},
		{"redrive preview (group)", run + "/redrive?reason=http_400"},
		{"rerun preview", run + "/rerun?mode=failed"},
	}
	fmt.Printf("console pages on a run of %d items (median and max of 20 requests, server time)\n", items)
	fmt.Printf("%-28s %10s %10s %8s\n", "page", "median", "max", "queries")
	for _, p := range pages {
		var times []time.Duration
		queries := ""
		for range 20 {
			r := httptest.NewRequest("GET", "http://console.test"+p.target, nil)
			r.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
			w := httptest.NewRecorder()
			t := time.Now()
			h.ServeHTTP(w, r)
			times = append(times, time.Since(t))
			if w.Code != http.StatusOK {
				b.Fatalf("%s: status %d: %s", p.target, w.Code, w.Body)
			}
			queries = w.Header().Get("X-Console-Queries")
		}
		slices.Sort(times)
		fmt.Printf("%-28s %10s %10s %8s\n", p.name, times[len(times)/2].Round(10*time.Microsecond),
			times[len(times)-1].Round(10*time.Microsecond), queries)
	}
}
