package consume_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestWrongBaseURLStopsTheNight points the consumer at a wrong base path:
// every lookup is answered 404 "no such route", a body the built-in
// contract's profile does not know as its own. Within the first 20 items
// the circuit opens with a WARN naming the URL and the body; no item is
// recorded missing, no attempt is counted, and far fewer calls are made
// than items. With the right URL the night then reconciles in full.
func TestWrongBaseURLStopsTheNight(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 200, shares: providersim.Shares{Missing: 0.05}})
	right := b.url
	b.url = right + "/api"
	logs := &logBuffer{}
	cfg := consume.Config{Concurrency: 4, Circuit: circuit.Config{ProbeBase: 50 * time.Millisecond, ProbeCap: 200 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	c, _ := b.consumer(t, "", 1000, 50, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	whileRunning(ctx, t, done, "the circuit to open", func() bool { return len(logs.lines("circuit open, calls stopped")) > 0 })
	// Probes keep finding no route: the circuit stays open.
	whileRunning(ctx, t, done, "a third probe", func() bool { return c.Circuits()[0].Probes >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	opened := logs.lines("circuit open, calls stopped")
	if len(opened) != 1 || !strings.Contains(opened[0], "level=WARN") || !strings.Contains(opened[0], b.url) ||
		!strings.Contains(opened[0], "no such route") || !strings.Contains(opened[0], "wrong base URL") {
		t.Errorf("opening warning: %q; want one WARN naming %s and the body", opened, b.url)
	}
	if st := c.Circuits()[0]; !st.Open || st.Why != circuit.NotFound {
		t.Errorf("circuit %+v, want open for not found", st)
	}
	var terminal, charged, held int
	if err := b.pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM items WHERE run_id = $1 AND terminal_at IS NOT NULL),
		       (SELECT count(*) FROM queue_messages WHERE run_id = $1 AND attempt > 0),
		       (SELECT count(DISTINCT transaction_id) FROM transitions WHERE run_id = $1 AND reason = $2)`,
		b.run.RunID, consume.ReasonNotFoundHeld).Scan(&terminal, &charged, &held); err != nil {
		t.Fatal(err)
	}
	if terminal != 0 || charged != 0 || held == 0 || held >= 20 {
		t.Errorf("%d items terminal, %d messages charged an attempt, %d items held; want 0, 0, 1 to 19", terminal, charged, held)
	}
	if calls := b.sim.Stats().Calls; calls != 0 {
		t.Errorf("%d calls reached the provider's lookups", calls)
	}
	if n := len(b.calls.calls); n > 60 {
		t.Errorf("%d calls to the wrong URL for 200 items, want a few dozen", n)
	}

	// The right URL: everything is reconciled, nothing to redrive.
	b.url = right
	good, _ := b.consumer(t, "", 1000, 50, consume.Config{Concurrency: 4})
	if err := runWithin(t, good, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
}

// whileRunning waits until cond holds, failing the test if the consumer
// whose Run reports on done ends first or ctx does.
func whileRunning(ctx context.Context, t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("consumer ended while waiting for %s: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("no %s before the test's deadline", what)
		case <-tick.C:
		}
	}
}

// TestFirstMissingItemsAreHeldThenRecorded: a run whose very first items
// are truly missing at the provider (the built-in contract's profile knows
// no not-found body of its own) holds them until the run is proven by the
// items found, then records them missing: the rule costs a call per held
// item, no outcome.
func TestFirstMissingItemsAreHeldThenRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 120, unknown: 5})
	c, _ := b.consumer(t, "", 1000, 50, consume.Config{Concurrency: 1,
		Circuit: circuit.Config{ProbeBase: 20 * time.Millisecond}})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
	if st := c.Circuits()[0]; st.Open {
		t.Errorf("circuit open: %+v", st)
	}
	var held int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(DISTINCT transaction_id) FROM transitions WHERE run_id = $1 AND reason = $2`,
		b.run.RunID, consume.ReasonNotFoundHeld).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 5 {
		t.Errorf("%d items held, want the 5 first ones", held)
	}
	t.Logf("%d items held before the run was proven", held)
}
