package consume_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/logthrottle"
	"github.com/reconcile/reconcile/internal/providersim"
)

// portServer serves a handler on a fixed port that can be shut (every
// connection closed, the port refusing connections) and opened again.
type portServer struct {
	t       *testing.T
	handler http.Handler
	addr    string
	mu      sync.Mutex
	srv     *http.Server
}

func newPortServer(t *testing.T, h http.Handler) *portServer {
	t.Helper()
	p := &portServer{t: t, handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.shut)
	return p
}

func (p *portServer) url() string { return "http://" + p.addr }

func (p *portServer) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.srv = &http.Server{Handler: p.handler, ReadHeaderTimeout: 5 * time.Second}
	go func(s *http.Server) { _ = s.Serve(ln) }(p.srv)
}

// shut closes the listener and every connection: from now on calls get
// "connection refused".
func (p *portServer) shut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		_ = p.srv.Close()
		p.srv = nil
	}
}

// open listens on the same port again.
func (p *portServer) open() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Errorf("listen again on %s: %v", p.addr, err)
		return
	}
	p.serve(ln)
}

// logBuffer collects log lines for assertions; it is safe for concurrent
// use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// TestProviderOutageDeadLettersNothing closes the provider's port in the
// middle of a run (connection refused) with --max-attempts 3 and a 1 s
// backoff cap, for a 30 s and a 2-minute outage, both on a time scale of
// 1/20 (the circuit's probe intervals, the warning interval and the
// backoff scaled alike): nothing is dead-lettered, the calls during the
// outage are a few probes rather than thousands, the circuit's opening is
// warned at once with the URL and the cause and then periodically with a
// count, its closing logged, and its state kept for status.
func TestProviderOutageDeadLettersNothing(t *testing.T) {
	t.Parallel()
	const scale = 20
	for _, tc := range []struct {
		name   string
		outage time.Duration
	}{
		{"30s", 30 * time.Second / scale},
		{"2m", 2 * time.Minute / scale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{items: 600})
			ps := newPortServer(t, b.calls)
			b.url = ps.url()
			logs := &logBuffer{}
			cfg := consume.Config{
				Concurrency: 8,
				Policy: decision.Policy{MaxAttempts: 3, BackoffBase: 100 * time.Millisecond / scale, BackoffCap: time.Second / scale,
					ThrottleDeadline: time.Hour},
				Circuit:   circuit.Config{ProbeBase: time.Second / scale, ProbeCap: 30 * time.Second / scale},
				WarnEvery: logthrottle.DefaultInterval / scale,
				Logger:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			}
			c, _ := b.consumer(t, "", 150, 10, cfg)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()

			// The outage starts once a third of the items are answered.
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for b.sim.Stats().Calls < 200 {
				select {
				case err := <-done:
					t.Fatalf("run ended before the outage: %v", err)
				case <-tick.C:
				}
			}
			ps.shut()
			before := c.Snapshot().ByClass["error"]
			select {
			case err := <-done:
				t.Fatalf("run ended during the outage: %v", err)
			case <-time.After(tc.outage):
			}
			var open bool
			var cause string
			if err := b.pool.QueryRow(ctx, `SELECT open, cause FROM provider_circuits WHERE provider = ''`).Scan(&open, &cause); err != nil {
				t.Errorf("circuit row during the outage: %v", err)
			} else if !open || cause != "connection refused" {
				t.Errorf("circuit row during the outage: open %v, cause %q; want open, connection refused", open, cause)
			}
			outageCalls := c.Snapshot().ByClass["error"] - before
			ps.open()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			b.checkInvariants(t)
			var dead int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE run_id = $1 AND state = 'dead_lettered'`, b.run.RunID).Scan(&dead); err != nil {
				t.Fatal(err)
			}
			if dead != 0 {
				t.Errorf("%d items dead-lettered by the outage, want 0", dead)
			}
			// The calls in flight when the port closed, and one probe per
			// backed-off interval: 1, 2, 4, 8, 16, 30, 30, ... scaled.
			probes := 0
			for d, step := time.Duration(0), cfg.Circuit.ProbeBase; d < tc.outage; d, step = d+step, min(2*step, cfg.Circuit.ProbeCap) {
				probes++
			}
			t.Logf("%d calls into the closed port during the %s outage", outageCalls, tc.outage)
			if limit := int64(cfg.Concurrency + probes + 2); outageCalls > limit {
				t.Errorf("%d calls during the outage, want at most %d (in flight when it began, then %d probes)", outageCalls, limit, probes)
			}
			opened := logs.lines("circuit open, calls stopped")
			if len(opened) != 1 || !strings.Contains(opened[0], "level=WARN") || !strings.Contains(opened[0], ps.url()) ||
				!strings.Contains(opened[0], `cause="connection refused"`) {
				t.Errorf("opening warning: %q; want one WARN naming %s and the cause", opened, ps.url())
			}
			if tc.outage >= 2*cfg.WarnEvery {
				if again := logs.lines("provider still unreachable"); len(again) == 0 || !strings.Contains(again[0], "failures=") {
					t.Errorf("no periodic warning with a count during a %s outage: %q", tc.outage, again)
				}
			}
			if closed := logs.lines("circuit closed"); len(closed) != 1 || !strings.Contains(closed[0], "level=INFO") {
				t.Errorf("closing line: %q; want one INFO", closed)
			}
			if err := b.pool.QueryRow(ctx, `SELECT open FROM provider_circuits WHERE provider = ''`).Scan(&open); err != nil || open {
				t.Errorf("circuit row after the outage: open %v, err %v; want closed", open, err)
			}
			if s := c.Snapshot(); s.Systemic == 0 {
				t.Errorf("no call was counted as systemic: %+v", s)
			}
			if st := c.Circuits(); len(st) != 1 || st[0].Open {
				t.Errorf("circuits after the run: %+v, want one, closed", st)
			}
		})
	}
}

// TestItemFailuresKeepTheirPolicy checks that 5xx answers for a few items
// while the others succeed do not open the circuit: those items are retried
// and dead-lettered as before. (Fewer than Config.Circuit.ServerErrors items
// fail: at the end of a run only the failing ones are left, and 10 distinct
// items with a 5xx in a row do look like an outage.)
func TestItemFailuresKeepTheirPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, options{items: 300, shares: providersim.Shares{Transient: 0.02, BadRequest: 0.02}})
	c, _ := b.consumer(t, "", 1000, 100, consume.Config{Concurrency: 4})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.checkInvariants(t)
	if s := c.Snapshot(); s.Systemic != 0 || s.Deferred != 0 {
		t.Errorf("item failures were treated as an outage: %+v", s)
	}
	if st := c.Circuits(); st[0].Open {
		t.Errorf("circuit open after item failures: %+v", st[0])
	}
}
