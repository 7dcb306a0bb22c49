package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/ledger"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgbouncertest"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// TestCommandsThroughTransactionPooler runs enqueue, two consumers sharing
// the run, status and report through a PgBouncer in transaction pooling
// mode, with the run entry point: every item gets the simulator's outcome,
// exactly once. Each consumer's listener polls and says so once at info.
func TestCommandsThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	// A consumer that cannot record never finishes: bound the whole test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	direct := pgtest.ConnString(t)
	through := pgbouncertest.Start(t, direct, pgbouncertest.Config{PoolSize: 6})
	const date, n = "2026-10-24", 600
	d, _ := payments.ParseDate(date)
	day, err := generateDemoDay(d, n, 7)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "payments.csv")
	if err := os.WriteFile(src, day.csv, 0o600); err != nil {
		t.Fatal(err)
	}
	sim, err := demoSim(day, 7, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	getenv := func(k string) string {
		switch k {
		case "DATABASE_URL":
			return through
		case "RECONCILE_PROVIDER_URL":
			return srv.URL
		}
		return ""
	}
	reconcile := func(args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, args, getenv, strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	if _, stderr, err := reconcile("enqueue", "--date", date, "--source", src, "--log-level", "error"); err != nil {
		t.Fatalf("enqueue: %v\n%s", err, stderr)
	}
	var wg sync.WaitGroup
	logs := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, logs[i], errs[i] = reconcile("consume", "--until-done", "--concurrency", "4", "--rate", "2000",
				"--backoff-base", "10ms", "--backoff-cap", "50ms", "--progress", "off", "--log-format", "json")
		})
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("consumer %d: %v\n%s", i, errs[i], lastLines(logs[i], 5))
		}
		if c := strings.Count(logs[i], "cannot keep a LISTEN"); c != 1 {
			t.Errorf("consumer %d said %d times that it polls, want once:\n%s", i, c, logs[i])
		}
		if strings.Contains(logs[i], `"level":"WARN"`) || strings.Contains(logs[i], `"level":"ERROR"`) {
			t.Errorf("consumer %d warned:\n%s", i, logs[i])
		}
	}
	if out, stderr, err := reconcile("status", "--date", date, "--log-level", "error"); err != nil || !strings.Contains(out, "nightly-"+date) {
		t.Fatalf("status: %v\n%s%s", err, out, stderr)
	}
	if _, stderr, err := reconcile("report", "--date", date, "--format", "json", "--log-level", "error"); err != nil {
		t.Fatalf("report: %v\n%s", err, stderr)
	}

	pool, err := pgxpool.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT transaction_id, state FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.State{}
	for rows.Next() {
		var id string
		var state ledger.State
		if err := rows.Scan(&id, &state); err != nil {
			t.Fatal(err)
		}
		got[id] = state
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d items, want %d", len(got), n)
	}
	for _, r := range day.records {
		if want := sim.Truth(r.ID).Outcome; got[r.ID] != want {
			t.Errorf("%s: %s, want %s", r.ID, got[r.ID], want)
		}
	}
	var terminal int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM transitions
	 WHERE to_state IN ('matched', 'mismatched', 'missing', 'dead_lettered')`).Scan(&terminal); err != nil {
		t.Fatal(err)
	}
	if terminal != n {
		t.Errorf("%d terminal transitions, want %d (one per item)", terminal, n)
	}
	if _, stderr, err := reconcile("audit", "verify", "--log-level", "error"); err != nil {
		t.Fatalf("audit verify: %v\n%s", err, stderr)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
