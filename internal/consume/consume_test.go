package consume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/sample"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var day = payments.Date{Year: 2026, Month: time.October, Day: 24}

// fastPolicy retries quickly so tests finish in seconds.
var fastPolicy = decision.Policy{MaxAttempts: 4, BackoffBase: 5 * time.Millisecond, BackoffCap: 40 * time.Millisecond,
	ThrottleDeadline: time.Hour}

type testBundle struct {
	pool  *pgxpool.Pool
	queue *queue.Queue
	sim   *providersim.Server
	calls *callRecorder
	url   string
	run   enqueue.Result
	ids   []string
}

type options struct {
	items      int
	shares     providersim.Shares
	limit      string
	burst      int
	simToken   string
	visibility time.Duration
	latency    providersim.Latency
	deliveries int
	// unknown leaves the first unknown payments of the day out of the
	// simulator's dataset: it answers them 404.
	unknown int
	// extra adds records to the simulator's dataset that the day lacks:
	// the unexpected ones of list mode.
	extra []provider.Record
	// list configures the simulator's list.
	list providersim.ListConfig
}

// setup enqueues a generated day and starts a simulator that knows it.
func setup(t *testing.T, o options) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	var buf bytes.Buffer
	if err := sample.Write(&buf, payments.FormatCSV, sample.Config{Date: day, Count: o.items, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	content := buf.Bytes()

	r, err := payments.NewReader(bytes.NewReader(content), "day.csv", payments.Options{Format: payments.FormatCSV, BusinessDate: day})
	if err != nil {
		t.Fatal(err)
	}
	var records []provider.Record
	var ids []string
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
		ids = append(ids, p.TransactionID)
	}
	sched, err := providersim.ParseSchedule(o.limit)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := providersim.New(providersim.Config{Records: append(records[o.unknown:], o.extra...), Seed: 11, Shares: o.shares, Limit: sched, Burst: o.burst,
		Token: provider.Secret(o.simToken), Latency: o.latency, List: o.list})
	if err != nil {
		t.Fatal(err)
	}
	rec := &callRecorder{next: sim}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)

	q := queue.New(pool, queue.Config{Visibility: o.visibility, MaxDeliveries: o.deliveries})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	run, err := enq.Enqueue(ctx, enqueue.Request{Date: day, Source: "day.csv",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content)), nil }})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{pool: pool, queue: q, sim: sim, calls: rec, url: srv.URL, run: run, ids: ids}
}

// callRecorder notes when each provider call arrived and how it was
// answered, in front of the simulator.
type callRecorder struct {
	next  http.Handler
	mu    sync.Mutex
	calls []call
}

type call struct {
	at         time.Time
	status     int
	retryAfter string
}

func (r *callRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	r.next.ServeHTTP(sw, req)
	r.mu.Lock()
	r.calls = append(r.calls, call{at: at, status: sw.status, retryAfter: w.Header().Get("Retry-After")})
	r.mu.Unlock()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// consumer builds a consumer against the bundle's simulator.
func (b *testBundle) consumer(t *testing.T, token string, rate float64, burst int, cfg consume.Config) (*consume.Consumer, *limiter.Shared) {
	t.Helper()
	ctx := context.Background()
	client, err := provider.New(provider.Config{BaseURL: b.url, Token: provider.Secret(token), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := limiter.SaveSettings(ctx, b.pool, limiter.DefaultName, limiter.Settings{Rate: rate, Burst: burst}, limiter.SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.Open(ctx, b.pool, limiter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	if cfg.Policy == (decision.Policy{}) {
		cfg.Policy = fastPolicy
	}
	cfg.UntilDone = true
	cfg.IdleWait = cmpDuration(cfg.IdleWait, 200*time.Millisecond)
	c, err := consume.New(b.pool, b.queue, lim, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, lim
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func runWithin(t *testing.T, c *consume.Consumer, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("consumer did not finish within %s", d)
	}
	return err
}

// checkInvariants compares every item with the simulator's truth and checks
// the history, the join and the queue.
func (b *testBundle) checkInvariants(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rows, err := b.pool.Query(ctx, `SELECT transaction_id, state, idempotency_key FROM items WHERE run_id = $1`, b.run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.State{}
	keys := map[string]string{}
	for rows.Next() {
		var id, state, key string
		if err := rows.Scan(&id, &state, &key); err != nil {
			t.Fatal(err)
		}
		got[id], keys[id] = ledger.State(state), key
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(b.ids) {
		t.Fatalf("%d items, want %d", len(got), len(b.ids))
	}
	wrong := 0
	for _, id := range b.ids {
		want := b.sim.Truth(id).Outcome
		if got[id] != want {
			wrong++
			if wrong <= 5 {
				t.Errorf("item %q: state %s, want %s", id, got[id], want)
			}
		}
		if b.sim.CallsForKey(keys[id]) == 0 {
			t.Errorf("item %q: no provider call carried its idempotency key %q", id, keys[id])
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d items have the wrong outcome", wrong, len(b.ids))
	}
	var terminalTwice, runCompletions int
	if err := b.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM (SELECT transaction_id FROM transitions
		          WHERE run_id = $1 AND to_state IN ('matched', 'mismatched', 'missing', 'dead_lettered')
		          GROUP BY transaction_id HAVING count(*) > 1) x),
		       (SELECT count(*) FROM run_completions WHERE run_id = $1)`, b.run.RunID).Scan(&terminalTwice, &runCompletions); err != nil {
		t.Fatal(err)
	}
	if terminalTwice != 0 {
		t.Errorf("%d items have more than one terminal transition", terminalTwice)
	}
	if runCompletions != 1 {
		t.Errorf("run completions = %d, want 1", runCompletions)
	}
	stats, err := b.queue.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var dead int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE run_id = $1 AND state = 'dead_lettered'`, b.run.RunID).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if stats.Available != 0 || stats.InFlight != 0 || stats.Delayed != 0 || stats.DeadLettered != int64(dead) {
		t.Errorf("queue after the run: %+v; want empty but for %d dead letters", stats, dead)
	}
}

func TestConsumeRecordsTheKnownOutcomeOfEveryItem(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 600, shares: providersim.Shares{Mismatch: 0.05, Missing: 0.03, BadRequest: 0.01, BadBody: 0.01, Transient: 0.05}})
	c, _ := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 6})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
	snap := c.Snapshot()
	if snap.Retried == 0 || snap.DeadLettered == 0 || snap.Outcomes["mismatched"] == 0 {
		t.Errorf("fault mix not exercised: %+v", snap)
	}
	// The consumer announced itself for `reconcile status`.
	var beats int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM consumers WHERE pid = $1 AND last_seen >= started_at`,
		os.Getpid()).Scan(&beats); err != nil || beats != 1 {
		t.Errorf("heartbeat rows of this process = %d, %v; want 1", beats, err)
	}
}

func TestConsumeStopsOnRefusedCredentialsAndLeavesEverythingQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 50, simToken: "right-token"})
	c, _ := b.consumer(t, "wrong-token", 1000, 100, consume.Config{Concurrency: 4})
	err := runWithin(t, c, 30*time.Second)
	if !errors.Is(err, consume.ErrProviderAuth) {
		t.Fatalf("err = %v, want ErrProviderAuth", err)
	}
	if msg := err.Error(); !bytes.Contains([]byte(msg), []byte("403")) || bytes.Contains([]byte(msg), []byte("wrong-token")) {
		t.Errorf("error %q should name the status and never the token", msg)
	}
	ctx := context.Background()
	var transitions, notQueued int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM transitions), (SELECT count(*) FROM items WHERE state <> 'queued')`).
		Scan(&transitions, &notQueued); err != nil {
		t.Fatal(err)
	}
	stats, err := b.queue.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if transitions != 0 || notQueued != 0 || stats.DeadLettered != 0 || stats.Available != 50 {
		t.Fatalf("after a refused key: %d transitions, %d items not queued, queue %+v; want all 50 untouched and available",
			transitions, notQueued, stats)
	}
}

// TestDuplicateDeliveriesRecordOneOutcome turns lease renewal off and makes
// many calls outlast the visibility timeout, so messages are redelivered to
// other workers while the first call is still running: each item must still
// get exactly one outcome.
func TestDuplicateDeliveriesRecordOneOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 40, latency: providersim.Latency{Jitter: 1500 * time.Millisecond},
		visibility: time.Second, deliveries: 1000})
	c, _ := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 16, LeaseRenewal: -1})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
	if s := c.Snapshot(); s.Stale == 0 {
		t.Errorf("no stale result was dropped (%+v): the test did not produce duplicate deliveries", s)
	}
}

// TestTwoConsumersShareTheLimit runs two consumers, each with its own
// limiter handle on the same row, against a simulator that enforces the same
// limit: together they must finish without exceeding it much.
func TestTwoConsumersShareTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 120, limit: "40", burst: 5})
	c1, _ := b.consumer(t, "", 40, 5, consume.Config{Concurrency: 4})
	c2, _ := b.consumer(t, "", 40, 5, consume.Config{Concurrency: 4})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*consume.Consumer{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runWithin(t, c, time.Minute)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b.checkInvariants(t)
	st := b.sim.Stats()
	if c1.Snapshot().Calls == 0 || c2.Snapshot().Calls == 0 {
		t.Errorf("one consumer made no calls: %d and %d", c1.Snapshot().Calls, c2.Snapshot().Calls)
	}
	// The limiter leases at most burst + rate×t between both processes; the
	// simulator's bucket matches, so only timing noise can cause a 429.
	if st.Throttled > st.Calls/20 {
		t.Errorf("%d of %d calls throttled: the two consumers together exceeded the shared limit", st.Throttled, st.Calls)
	}
}

// TestSlowCallsKeepTheirLease makes calls slower than the visibility
// timeout: lease renewal must keep them from being redelivered. The
// limiter hears how long they took (it dates the accepted calls by it).
func TestSlowCallsKeepTheirLease(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 8, latency: providersim.Latency{Fixed: 1500 * time.Millisecond}, visibility: time.Second})
	c, lim := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 8})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
	if s := c.Snapshot(); s.Calls != 8 || s.Stale != 0 {
		t.Errorf("calls = %d, stale = %d; want 8 calls and no redelivery", s.Calls, s.Stale)
	}
	if got := lim.Snapshot().Latency; got < 1500*time.Millisecond || got > 3*time.Second {
		t.Errorf("the limiter's answer latency %v, want the provider's 1.5 s", got)
	}
}

func TestShutdownReleasesUnstartedMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 200})
	c, _ := b.consumer(t, "", 20, 1, consume.Config{Concurrency: 4, Grace: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// Wait for progress, then stop.
	deadline := time.Now().Add(20 * time.Second)
	for c.Snapshot().Acked < 5 {
		if time.Now().After(deadline) {
			t.Fatal("no progress within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within the grace period")
	}
	stats, err := b.queue.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	acked := c.Snapshot().Acked
	if stats.InFlight != 0 || stats.Available != 200-acked {
		t.Fatalf("after shutdown: queue %+v with %d acked; want nothing in flight and the rest available", stats, acked)
	}
}

// TestUntilDoneReturnsWhenTheRunCompletes gives the idle claimer a
// ten-minute sleep: the consumer must still return as soon as the last item
// is recorded, woken by the run's completion, with batching and without.
func TestUntilDoneReturnsWhenTheRunCompletes(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 1} {
		t.Run(fmt.Sprintf("record batch %d", batch), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{items: 100})
			c, _ := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 4, RecordBatch: batch, IdleWait: 10 * time.Minute})
			// Under the queue's 30 s visibility: without the wake-up, the
			// claimer sleeps until the last leases would expire.
			if err := runWithin(t, c, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			b.checkInvariants(t)
		})
	}
}

// TestConsumeRecordsEachResultAlone turns batching off: every result gets
// its own transaction, and the outcomes are the same.
func TestConsumeRecordsEachResultAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 200, shares: providersim.Shares{Mismatch: 0.05, Missing: 0.05, BadRequest: 0.02, Transient: 0.05}})
	c, _ := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 6, RecordBatch: 1})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
}

// TestRetryAfterStopsEveryWorker runs eight workers with a ceiling far above
// the simulator's limit: after each 429, no worker may call the provider
// until its Retry-After has passed (but for calls already on their way).
func TestRetryAfterStopsEveryWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 40, limit: "4", burst: 2})
	c, _ := b.consumer(t, "", 100, 10, consume.Config{Concurrency: 8})
	if err := runWithin(t, c, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)

	// A call that left before the 429 reached the consumer may arrive just
	// after it; this much slack covers it.
	const inFlight = 250 * time.Millisecond
	b.calls.mu.Lock()
	defer b.calls.mu.Unlock()
	throttles, violations := 0, 0
	for _, th := range b.calls.calls {
		if th.status != http.StatusTooManyRequests {
			continue
		}
		throttles++
		secs, err := strconv.Atoi(th.retryAfter)
		if err != nil {
			t.Fatalf("429 with Retry-After %q", th.retryAfter)
		}
		until := th.at.Add(time.Duration(secs) * time.Second)
		for _, later := range b.calls.calls {
			if later.at.After(th.at.Add(inFlight)) && later.at.Before(until) {
				violations++
				if violations <= 3 {
					t.Errorf("call at +%s inside the Retry-After window of a 429 at %s (Retry-After %ds)",
						later.at.Sub(th.at), th.at.Format(time.StampMilli), secs)
				}
			}
		}
	}
	if throttles == 0 {
		t.Fatal("the simulator never throttled: the test proves nothing")
	}
	if violations > 0 {
		t.Errorf("%d calls inside a Retry-After window (after %d throttles)", violations, throttles)
	}
}
