package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/queue"
)

// providersSpec is a night of two providers behind their own simulators,
// each enforcing its limit, with the consumer told each limit.
type providersSpec struct {
	items       int // split 1:3 between slow and fast
	slowRate    float64
	fastRate    float64
	concurrency int // workers per process
	processes   int // consumers, each with its own pool, limiters and clients
	// outageAt and outage close the slow provider's port for outage,
	// outageAt after the start (0: no outage).
	outageAt, outage time.Duration
}

// flakyPort serves a handler on a fixed port that can be closed (connection
// refused) and opened again.
type flakyPort struct {
	handler http.Handler
	addr    string
	mu      sync.Mutex
	srv     *http.Server
}

func newFlakyPort(h http.Handler) (*flakyPort, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &flakyPort{handler: h, addr: ln.Addr().String()}
	p.serve(ln)
	return p, nil
}

func (p *flakyPort) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.srv = &http.Server{Handler: p.handler, ReadHeaderTimeout: 5 * time.Second}
	go func(s *http.Server) { _ = s.Serve(ln) }(p.srv)
}

func (p *flakyPort) shut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		_ = p.srv.Close()
		p.srv = nil
	}
}

func (p *flakyPort) open() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// providersResult is what a run of two providers measured.
type providersResult struct {
	finished map[string]time.Duration // from the start to the provider's last terminal item
	items    map[string]int
	calls    map[string]int64
	throttle map[string]int64
	dead     int
	outage   int64 // calls without an answer (the outage's)
}

// executeProviders runs sp on a fresh database.
func executeProviders(ctx context.Context, srv *server, sp providersSpec, o options) (providersResult, error) {
	pool, drop, err := srv.database(ctx, int32(sp.concurrency+8))
	if err != nil {
		return providersResult{}, err
	}
	defer drop()
	var csv bytes.Buffer
	csv.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at,provider\n")
	records := map[string][]provider.Record{}
	res := providersResult{finished: map[string]time.Duration{}, items: map[string]int{}, calls: map[string]int64{}, throttle: map[string]int64{}}
	for i := range sp.items {
		name := "fast"
		if i%4 == 0 {
			name = "slow"
		}
		id := fmt.Sprintf("tx_%06d", i)
		fmt.Fprintf(&csv, "%s,acct_%d,%d,EUR,succeeded,2026-10-24T%02d:%02d:00Z,%s\n", id, i%500, 100+i, (i/60)%24, i%60, name)
		records[name] = append(records[name], provider.Record{ID: id, AmountMinor: int64(100 + i), Currency: "EUR", Status: "succeeded"})
		res.items[name]++
	}
	q := queue.New(pool, queue.Config{})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q})
	if err != nil {
		return res, err
	}
	run, err := enq.Enqueue(ctx, enqueue.Request{Date: day, Source: "bench.csv", Providers: []string{"slow", "fast"},
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(csv.Bytes())), nil }})
	if err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return res, err
	}

	rates := map[string]float64{"slow": sp.slowRate, "fast": sp.fastRate}
	sims := map[string]*providersim.Server{}
	ports := map[string]*flakyPort{}
	for _, name := range []string{"slow", "fast"} {
		sched, err := providersim.ParseSchedule(fmt.Sprint(rates[name]))
		if err != nil {
			return res, err
		}
		sim, err := providersim.New(providersim.Config{Records: records[name], Seed: 11, Limit: sched, Burst: 10})
		if err != nil {
			return res, err
		}
		sims[name] = sim
		if ports[name], err = newFlakyPort(sim); err != nil {
			return res, err
		}
		defer ports[name].shut()
		if err := limiter.SaveSettings(ctx, pool, "provider:"+name, limiter.Settings{Rate: rates[name], Burst: 5},
			limiter.SetBy{Actor: "bench/consume"}); err != nil {
			return res, err
		}
	}

	logger := slog.New(slog.DiscardHandler)
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// Each consumer has what a process of its own would: a pool, a limiter
	// handle per provider and clients.
	var consumers []*consume.Consumer
	for range sp.processes {
		ppool, pdrop, err := srv.pool(ctx, pool, int32(sp.concurrency+8))
		if err != nil {
			return res, err
		}
		defer pdrop()
		var providers []consume.Provider
		for _, name := range []string{"fast", "slow"} {
			lim, err := limiter.Open(ctx, ppool, limiter.Config{Name: "provider:" + name, Decrease: o.decrease, Increase: o.increase, Recovery: o.recovery})
			if err != nil {
				return res, err
			}
			defer lim.Close()
			client, err := provider.New(provider.Config{BaseURL: "http://" + ports[name].addr, Timeout: 10 * time.Second})
			if err != nil {
				return res, err
			}
			providers = append(providers, consume.Provider{Name: name, Client: client, Limiter: lim})
		}
		c, err := consume.NewWithProviders(ppool, queue.New(ppool, queue.Config{}), providers, consume.Config{
			Concurrency: sp.concurrency, UntilDone: true, Logger: logger,
			Circuit: circuit.Config{ProbeCap: 2 * time.Second}})
		if err != nil {
			return res, err
		}
		consumers = append(consumers, c)
	}

	start := time.Now()
	if sp.outage > 0 {
		down := time.AfterFunc(sp.outageAt, ports["slow"].shut)
		defer down.Stop()
		up := time.AfterFunc(sp.outageAt+sp.outage, func() { _ = ports["slow"].open() })
		defer up.Stop()
	}
	errs := make(chan error, len(consumers))
	for _, c := range consumers {
		go func() { errs <- c.Run(ctx) }()
	}
	for range consumers {
		if err := <-errs; err != nil {
			return res, fmt.Errorf("consume: %w", err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT provider, max(terminal_at) FROM items WHERE run_id = $1 GROUP BY provider`, run.RunID)
	if err != nil {
		return res, err
	}
	for rows.Next() {
		var name string
		var last time.Time
		if err := rows.Scan(&name, &last); err != nil {
			return res, err
		}
		res.finished[name] = last.Sub(start)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE run_id = $1 AND state = 'dead_lettered'`, run.RunID).Scan(&res.dead); err != nil {
		return res, err
	}
	for name, sim := range sims {
		st := sim.Stats()
		res.calls[name], res.throttle[name] = st.Calls, st.Throttled
	}
	for _, c := range consumers {
		res.outage += c.Snapshot().ByClass["error"]
	}
	return res, nil
}

// providersScenario is a scenario of two providers.
func providersScenario(name, about string, sp providersSpec) scenario {
	slowMin := time.Duration(float64(sp.items/4) / sp.slowRate * float64(time.Second))
	fastMin := time.Duration(float64(sp.items-sp.items/4) / sp.fastRate * float64(time.Second))
	return scenario{name: name, about: about, multi: func(ctx context.Context, srv *server, o options) ([]figure, error) {
		r, err := executeProviders(ctx, srv, sp, o)
		if err != nil {
			return nil, err
		}
		within := func(d, floor time.Duration) float64 { return 100 * (d.Seconds()/floor.Seconds() - 1) }
		slowTarget, slowCheck := "<= 10", atMost(10)
		if sp.outage > 0 {
			slowTarget, slowCheck = fmt.Sprintf("(informational: +%s outage)", sp.outage), nil
		}
		return []figure{
			{name: "fast: finished after", value: r.finished["fast"].Seconds(), unit: "s", target: fmt.Sprintf("(floor %.2f s)", fastMin.Seconds())},
			{name: "fast: over its floor", value: within(r.finished["fast"], fastMin), unit: "%", target: "<= 10", check: atMost(10)},
			{name: "slow: finished after", value: r.finished["slow"].Seconds(), unit: "s", target: fmt.Sprintf("(floor %.2f s)", slowMin.Seconds())},
			{name: "slow: over its floor", value: within(r.finished["slow"], slowMin), unit: "%", target: slowTarget, check: slowCheck},
			{name: "fast: calls per item", value: float64(r.calls["fast"]) / float64(r.items["fast"]), unit: "calls"},
			{name: "slow: calls per item", value: float64(r.calls["slow"]) / float64(r.items["slow"]), unit: "calls"},
			{name: "fast: 429s", value: float64(r.throttle["fast"]), unit: "calls"},
			{name: "slow: 429s", value: float64(r.throttle["slow"]), unit: "calls"},
			{name: "calls into the closed port", value: float64(r.outage), unit: "calls"},
			{name: "dead-lettered", value: float64(r.dead), unit: "items", target: "0", check: atMost(0)},
		}, nil
	}}
}

// pool opens another pool on the database of p, as another process would.
func (s *server) pool(ctx context.Context, p *pgxpool.Pool, maxConns int32) (*pgxpool.Pool, func(), error) {
	cfg := p.Config().Copy()
	cfg.MaxConns = maxConns
	np, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return np, np.Close, nil
}
