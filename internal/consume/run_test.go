package consume_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/consume"
)

// callGate holds the first held calls to the provider until the test
// releases them (or the caller gives up), and passes every other call to
// next once all the held ones have arrived.
type callGate struct {
	next    http.Handler
	held    int
	arrived chan string // transaction ids of held calls, as they arrive
	all     chan struct{}

	mu      sync.Mutex
	n       int
	release map[string]chan struct{}
}

func newCallGate(next http.Handler, held int) *callGate {
	return &callGate{next: next, held: held, arrived: make(chan string, held), all: make(chan struct{}),
		release: map[string]chan struct{}{}}
}

func (g *callGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := path.Base(r.URL.Path)
	g.mu.Lock()
	g.n++
	hold := g.n <= g.held
	var release chan struct{}
	if hold {
		release = make(chan struct{})
		g.release[id] = release
		if g.n == g.held {
			close(g.all)
		}
	}
	g.mu.Unlock()
	if !hold {
		<-g.all
		g.next.ServeHTTP(w, r)
		return
	}
	g.arrived <- id
	select {
	case <-release:
		g.next.ServeHTTP(w, r)
	case <-r.Context().Done():
	}
}

// nextHeld waits for the next held call and returns its transaction id.
func (g *callGate) nextHeld(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.arrived:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no call reached the provider within 30s")
		return ""
	}
}

// answer lets the held call of transaction id through to the provider.
func (g *callGate) answer(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.release[id])
}

// TestShutdownOrder stops a consumer with two calls in flight and follows
// its shutdown stage by stage: claiming stops first; a call answered within
// the grace is recorded; the claimed messages not started are handed back
// while the other call still runs; when the grace ends that call is cut
// short and handed back; the recorder is flushed once the workers are done;
// Run returns last, and the ledger and the queue show exactly that.
func TestShutdownOrder(t *testing.T) {
	t.Parallel()
	const items = 40
	b := setup(t, options{items: items})
	gate := newCallGate(b.calls, 2)
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	c, _ := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 2})
	watch := consume.WatchShutdown(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	answered, cut := gate.nextHeld(t), gate.nextHeld(t)
	cancel()
	if stage := watch.NextStage(t); stage != "claiming stopped" {
		t.Fatalf("first stage after the cancel: %q, want claiming stopped", stage)
	}

	// Within the grace: the answered call is settled and the messages never
	// started are handed back, while the other call still runs.
	gate.answer(answered)
	handedBack := 0
	for range items - 1 {
		id, fate := watch.Settled(t)
		switch {
		case id == cut:
			t.Fatalf("the call still in flight was settled (%s) before the grace ended", fate)
		case id == answered && fate != "ack":
			t.Fatalf("the call answered within the grace: fate %s, want ack", fate)
		case id != answered && fate != "hand_back":
			t.Fatalf("transaction %s, never started: fate %s, want hand_back", id, fate)
		case fate == "hand_back":
			handedBack++
		}
	}
	if stages := watch.Stages(); len(stages) > 0 {
		t.Fatalf("stages %q reached while a call was in flight within the grace", stages)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a call was in flight within the grace", err)
	default:
	}

	// The grace ends: the last call is cut short and handed back, the
	// workers are done, then the recorder is flushed, then Run returns.
	watch.EndGrace()
	if id, fate := watch.Settled(t); id != cut || fate != "hand_back" {
		t.Fatalf("after the grace: %s settled as %s, want %s handed back", id, fate, cut)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after the shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the grace")
	}
	if stages, want := watch.Stages(), []string{"workers done", "recorder flushed"}; !slices.Equal(stages, want) {
		t.Fatalf("stages before Run returned: %q, want %q", stages, want)
	}

	var recorded, transitions int
	if err := b.pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM items WHERE run_id = $1 AND state = 'matched' AND transaction_id = $2),
		       (SELECT count(*) FROM transitions WHERE run_id = $1)`, b.run.RunID, answered).Scan(&recorded, &transitions); err != nil {
		t.Fatal(err)
	}
	if recorded != 1 || transitions != 1 {
		t.Errorf("ledger after the shutdown: answered item matched %d, %d transitions; want the answered item recorded, nothing else", recorded, transitions)
	}
	stats, err := b.queue.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if stats.InFlight != 0 || stats.Available != items-1 {
		t.Errorf("queue after the shutdown: %+v; want nothing in flight and %d available", stats, items-1)
	}
	if s := c.Snapshot(); s.Acked != 1 || s.Released != int64(handedBack+1) || s.Calls != 1 {
		t.Errorf("counters: %+v; want 1 ack, 1 call and %d released", s, handedBack+1)
	}
}

// TestRefusedCredentialsCutTheOtherCallsShort: when the provider refuses the
// credentials while another call hangs, consuming stops within the grace,
// the hanging call is handed back and nothing is recorded, rather than
// waiting for the call's timeout and recording its failure.
func TestRefusedCredentialsCutTheOtherCallsShort(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 20, simToken: "right-token"})
	gate := newCallGate(b.calls, 1) // the first call never answers; the rest are refused
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	// The grace is far shorter than the client's 5 s timeout.
	c, _ := b.consumer(t, "wrong-token", 1000, 100, consume.Config{Concurrency: 2, Grace: 200 * time.Millisecond})
	start := time.Now()
	if err := runWithin(t, c, 30*time.Second); !errors.Is(err, consume.ErrProviderAuth) {
		t.Fatalf("err = %v, want ErrProviderAuth", err)
	}
	elapsed := time.Since(start)
	var transitions, notQueued int
	if err := b.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM transitions), (SELECT count(*) FROM items WHERE state <> 'queued')`).
		Scan(&transitions, &notQueued); err != nil {
		t.Fatal(err)
	}
	stats, err := b.queue.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if transitions != 0 || notQueued != 0 || stats.InFlight != 0 || stats.Available != 20 {
		t.Errorf("after %s: %d transitions, %d items not queued, queue %+v; want all 20 untouched and available",
			elapsed.Round(time.Millisecond), transitions, notQueued, stats)
	}
}
