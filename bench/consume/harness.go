package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/sample"
	"github.com/reconcile/reconcile/migrations"
)

// server is the PostgreSQL server the runs use.
type server struct {
	admin   string
	connFor func(dbname string) string
	cluster *pgserver.Cluster
}

func openServer(ctx context.Context) (*server, error) {
	if url := os.Getenv("DATABASE_URL"); url != "" {
		return &server{admin: url}, nil
	}
	c, err := pgserver.Start(ctx, pgserver.Config{Durable: true})
	if err != nil {
		return nil, err
	}
	return &server{admin: c.ConnString("postgres"), connFor: c.ConnString, cluster: c}, nil
}

func (s *server) close() {
	if s.cluster != nil {
		_ = s.cluster.Stop()
	}
}

func (s *server) describe(ctx context.Context) string {
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer conn.Close(ctx)
	var version, fsync, syncCommit string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).
		Scan(&version, &fsync, &syncCommit); err != nil {
		return err.Error()
	}
	where := "DATABASE_URL"
	if s.cluster != nil {
		where = "throwaway cluster"
	}
	return fmt.Sprintf("PostgreSQL %s (%s), fsync=%s synchronous_commit=%s", version, where, fsync, syncCommit)
}

// database creates a fresh migrated database and returns a pool on it with
// maxConns connections, and a function dropping it.
func (s *server) database(ctx context.Context, maxConns int32) (*pgxpool.Pool, func(), error) {
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(ctx)
	name := "bench_consume_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, nil, err
	}
	drop := func() {
		c, err := pgx.Connect(context.WithoutCancel(ctx), s.admin)
		if err != nil {
			return
		}
		_, _ = c.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)")
		_ = c.Close(context.WithoutCancel(ctx))
	}
	var url string
	if s.connFor != nil {
		url = s.connFor(name)
	} else {
		cfg, err := pgx.ParseConfig(s.admin)
		if err != nil {
			drop()
			return nil, nil, err
		}
		url = fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s", cfg.Host, cfg.Port, cfg.User, cfg.Password, name)
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		drop()
		return nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		drop()
		return nil, nil, err
	}
	pcfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); drop() }, nil
}

// spec describes one run.
type spec struct {
	// items is the size of the generated day.
	items int
	// simLimit is the simulator's limit schedule ("" for none) and simBurst
	// its bucket (0: the schedule's highest rate).
	simLimit string
	simBurst int
	// simWindow, when set, makes the simulator's limit a fixed window of
	// this length advertised in the IETF RateLimit fields.
	simWindow time.Duration
	// shape, when set, is the simulator's limit in full (algorithm,
	// window, Retry-After, headers), instead of simBurst and simWindow.
	shape *providersim.Config
	// processes is the number of consumer processes sharing the limit,
	// each with its own pool, limiter and concurrency workers (0: one).
	processes int
	// transientRate is the share of calls the simulator answers 503.
	transientRate float64
	// rate and burst are the consumer's configured limiter settings.
	rate  float64
	burst int
	// concurrency is the number of workers.
	concurrency int
	// duration, when set, stops the consumer after this long; otherwise it
	// runs until every item is terminal.
	duration time.Duration
	// policy is the retry policy (zero: decision's defaults).
	policy decision.Policy
	// mode is how the consumer checks items (list mode pages through the
	// simulator's list first).
	mode consume.Mode
	// unexpected is the share of records the simulator has beyond the
	// day's payments: the ones list mode reports unexpected.
	unexpected float64
}

// result is what one run measured.
type result struct {
	spec    spec
	elapsed time.Duration // the consumer's Run
	done    int64         // items terminal at the end
	sim     providersim.Stats
	calls   []time.Duration // lookup arrivals at the simulator, from its start
	// estimate is the limit discovery's estimate of the provider's rate,
	// sampled every second of the run (0: unknown).
	estimate []float64
	snap     consume.Snapshot
	lim      limiter.Snapshot
	// took is the run's time from enqueue to its completion record, and
	// unexpected its unexpected items.
	took       time.Duration
	unexpected int
	// heapMax is the largest heap in use sampled during the run, heapEnd
	// the heap in use at its end.
	heapMax, heapEnd uint64
	// live is the live heap the latest collection found, sampled during
	// the run: what the process holds, not the collector's headroom.
	live []uint64
	// goCPU is this process's CPU time during the run; pgCPU that of the
	// pool's server backends (0 when the server is not on this machine).
	goCPU, pgCPU time.Duration
}

// callLog records when each lookup reaches the simulator.
type callLog struct {
	start time.Time
	mu    sync.Mutex
	at    []time.Duration
}

func (c *callLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			d := time.Since(c.start)
			c.mu.Lock()
			c.at = append(c.at, d)
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

var day = payments.Date{Year: 2026, Month: time.October, Day: 24}

// execute runs one spec on a fresh database.
func execute(ctx context.Context, srv *server, sp spec, o options) (result, error) {
	// Workers, the claimer, the listener, the limiter's lease and poll, and
	// lease renewals each may hold a connection.
	pool, drop, err := srv.database(ctx, int32(sp.concurrency+4))
	if err != nil {
		return result{}, err
	}
	defer drop()

	var content bytes.Buffer
	sc := sample.Config{Date: day, Count: sp.items, Seed: 7}
	if err := sample.Write(&content, payments.FormatCSV, sc); err != nil {
		return result{}, err
	}
	gen, err := sample.New(sc)
	if err != nil {
		return result{}, err
	}
	records := make([]provider.Record, 0, sp.items)
	for p, ok := gen.Next(); ok; p, ok = gen.Next() {
		records = append(records, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
	}
	for i := range int(sp.unexpected * float64(sp.items)) {
		records = append(records, provider.Record{ID: fmt.Sprintf("tx_unbooked_%07d", i+1), AmountMinor: int64(100 + i), Currency: "EUR",
			Status: payments.StatusSucceeded})
	}

	q := queue.New(pool, queue.Config{})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q})
	if err != nil {
		return result{}, err
	}
	run, err := enq.Enqueue(ctx, enqueue.Request{Date: day, Source: "bench.csv",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content.Bytes())), nil }})
	if err != nil {
		return result{}, err
	}
	if run.Items != sp.items {
		return result{}, fmt.Errorf("enqueued %d items, want %d", run.Items, sp.items)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return result{}, err
	}

	sched, err := providersim.ParseSchedule(sp.simLimit)
	if err != nil {
		return result{}, err
	}
	if err := limiter.SaveSettings(ctx, pool, limiter.DefaultName, limiter.Settings{Rate: sp.rate, Burst: sp.burst},
		limiter.SetBy{Actor: "bench/consume"}); err != nil {
		return result{}, err
	}
	lim, err := limiter.Open(ctx, pool, limiter.Config{Decrease: o.decrease, Increase: o.increase, Recovery: o.recovery})
	if err != nil {
		return result{}, err
	}
	defer lim.Close()

	logger := slog.New(slog.DiscardHandler)
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	const token = provider.Secret("bench-token")
	simCfg := providersim.Config{Records: records, Seed: 11, Limit: sched, Burst: sp.simBurst,
		TransientRate: sp.transientRate, Token: token}
	if sp.simWindow > 0 {
		simCfg.Algorithm, simCfg.Window, simCfg.Burst, simCfg.RateLimitHeaders = providersim.FixedWindow, sp.simWindow, 0, true
	}
	if sh := sp.shape; sh != nil {
		simCfg.Algorithm, simCfg.Burst, simCfg.Window, simCfg.RateLimitHeaders = sh.Algorithm, sh.Burst, sh.Window, sh.RateLimitHeaders
		simCfg.RetryAfter, simCfg.RetryAfterMin, simCfg.Latency = sh.RetryAfter, sh.RetryAfterMin, sh.Latency
	}
	sim, err := providersim.New(simCfg)
	if err != nil {
		return result{}, err
	}
	// The simulator speaks the profile's API, and the consumer reads it with
	// the built-in profile of that name.
	shape, err := providersim.ParseShape(o.profile)
	if err != nil {
		return result{}, err
	}
	shaped, err := providersim.Shaped(sim, shape, providersim.ShapeConfig{ClientID: "bench", ClientSecret: "bench-secret"})
	if err != nil {
		return result{}, err
	}
	prof, ok := profile.Builtin(o.profile)
	if !ok {
		return result{}, fmt.Errorf("no built-in profile %q", o.profile)
	}
	log := &callLog{start: time.Now(), at: make([]time.Duration, 0, sp.items*2)}
	hs := httptest.NewServer(log.wrap(shaped))
	defer hs.Close()
	client, err := provider.New(provider.Config{BaseURL: hs.URL, Timeout: 10 * time.Second, Profile: prof, Token: token,
		ClientID: "bench", ClientSecret: "bench-secret"})
	if err != nil {
		return result{}, err
	}
	c, err := consume.New(pool, q, lim, client, consume.Config{Concurrency: sp.concurrency, Policy: sp.policy,
		UntilDone: sp.duration == 0, Logger: logger, RecordBatch: o.recordBatch, Mode: sp.mode})
	if err != nil {
		return result{}, err
	}
	// Further processes: each its own pool, limiter and consumer on the
	// same database, drawing from the same limiter row.
	others, err := otherProcesses(ctx, pool, sp, o, client, logger)
	if err != nil {
		return result{}, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if sp.duration > 0 {
		// Cancel rather than time out: Run treats cancellation as a stop.
		t := time.AfterFunc(sp.duration, cancel)
		defer t.Stop()
	}
	var waits *waitSampler
	if o.waits {
		waits = sampleWaits(ctx, pool)
	}
	heapCtx, stopHeap := context.WithCancel(runCtx)
	heap := sampleHeap(heapCtx)
	goCPU0, pgCPU0 := processCPU(), backendCPU(ctx, pool)
	start := time.Now()
	estCtx, stopEstimates := context.WithCancel(runCtx)
	estimates := sampleEstimate(estCtx, lim)
	var wg sync.WaitGroup
	for _, other := range others {
		wg.Go(func() { other.err = other.c.Run(runCtx) })
	}
	err = c.Run(runCtx)
	wg.Wait()
	stopEstimates()
	estimate := <-estimates
	stopHeap()
	heapSeen := <-heap
	for _, other := range others {
		err = cmp.Or(err, other.err)
		other.close()
	}
	elapsed := time.Since(start)
	goCPU, pgCPU := processCPU()-goCPU0, backendCPU(ctx, pool)-pgCPU0
	if waits != nil {
		waits.stopAndPrint()
	}
	if o.history {
		if err := printHistory(ctx, pool, start); err != nil {
			return result{}, err
		}
	}
	if err != nil {
		return result{}, fmt.Errorf("consume: %w", err)
	}
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	res := result{spec: sp, elapsed: elapsed, sim: sim.Stats(), snap: c.Snapshot(), lim: lim.Snapshot(), goCPU: goCPU, pgCPU: pgCPU,
		estimate: estimate, heapMax: heapSeen.peak, heapEnd: heapInUse(), live: heapSeen.live}
	if cs, err := ledger.Completions(ctx, pool, time.Time{}); err == nil && len(cs) == 1 {
		res.took, res.unexpected = cs[0].Took, cs[0].Unexpected
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE run_id = $1 AND terminal_at IS NOT NULL`, run.RunID).
		Scan(&res.done); err != nil {
		return result{}, err
	}
	log.mu.Lock()
	res.calls = slices.Clone(log.at)
	log.mu.Unlock()
	slices.Sort(res.calls)
	return res, nil
}

// heapSeen is what sampleHeap saw: the largest heap in use and the live
// heap at each sample, in order (one every 500 ms, so a sample's index is
// its time).
type heapSeen struct {
	peak uint64
	live []uint64
}

// sampleHeap samples the heap in use and the live heap every 500 ms until
// ctx ends, then sends what it saw.
func sampleHeap(ctx context.Context) <-chan heapSeen {
	out := make(chan heapSeen, 1)
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		var seen heapSeen
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			seen.peak = max(seen.peak, heapInUse())
			metrics.Read(live)
			seen.live = append(seen.live, live[0].Value.Uint64())
			select {
			case <-ctx.Done():
				out <- seen
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// liveAt returns the live heap sampled at share (0 to 1) of the run.
func liveAt(samples []uint64, share float64) uint64 {
	if len(samples) == 0 {
		return 0
	}
	return samples[min(len(samples)-1, int(share*float64(len(samples))))]
}

// heapInUse is the Go heap in use, in bytes.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// maxInWindow returns the most calls in any window of length w.
func maxInWindow(at []time.Duration, w time.Duration) int {
	best, lo := 0, 0
	for hi := range at {
		for at[hi]-at[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// waitSampler samples what the database's backends are doing, to show
// where a run waits.
type waitSampler struct {
	stop   context.CancelFunc
	done   chan struct{}
	counts map[string]int
	n      int
}

func sampleWaits(ctx context.Context, pool *pgxpool.Pool) *waitSampler {
	ctx, cancel := context.WithCancel(ctx)
	w := &waitSampler{stop: cancel, done: make(chan struct{}), counts: map[string]int{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := pool.Query(ctx, `
				SELECT state || coalesce(' ' || wait_event_type || ':' || wait_event, '')
				  FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			states, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				continue
			}
			w.n++
			for _, s := range states {
				w.counts[s]++
			}
		}
	}()
	return w
}

func (w *waitSampler) stopAndPrint() {
	w.stop()
	<-w.done
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range w.counts {
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int { return b.v - a.v })
	fmt.Printf("  backends by state (mean over %d samples):\n", w.n)
	for _, e := range all {
		fmt.Printf("    %6.2f  %s\n", float64(e.v)/float64(max(w.n, 1)), e.k)
	}
}

// processCPU returns this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU sums the CPU time of the database's server backends, read from
// /proc (so only for a server on this machine, readable by this user).
func backendCPU(ctx context.Context, pool *pgxpool.Pool) time.Duration {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which ends with ')': utime and
		// stime are the 12th and 13th of them, in clock ticks (100 Hz).
		rest := string(b[bytes.LastIndexByte(b, ')')+2:])
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
}

// process is a further consumer process of a run.
type process struct {
	c     *consume.Consumer
	err   error
	close func()
}

// otherProcesses opens the processes of a run beyond the first (see
// spec.processes), on pool's database.
func otherProcesses(ctx context.Context, pool *pgxpool.Pool, sp spec, o options, client *provider.Client,
	logger *slog.Logger) ([]*process, error) {
	var out []*process
	for range max(0, sp.processes-1) {
		p, err := pgxpool.NewWithConfig(ctx, pool.Config())
		if err != nil {
			return nil, err
		}
		lim, err := limiter.Open(ctx, p, limiter.Config{Decrease: o.decrease, Increase: o.increase, Recovery: o.recovery})
		if err != nil {
			p.Close()
			return nil, err
		}
		c, err := consume.New(p, queue.New(p, queue.Config{}), lim, client, consume.Config{Concurrency: sp.concurrency,
			Policy: sp.policy, Logger: logger, RecordBatch: o.recordBatch})
		if err != nil {
			_ = lim.Close()
			p.Close()
			return nil, err
		}
		out = append(out, &process{c: c, close: func() { _ = lim.Close(); p.Close() }})
	}
	return out, nil
}

// sampleEstimate samples lim's estimate of the provider's rate every second
// until ctx ends, then sends the samples.
func sampleEstimate(ctx context.Context, lim *limiter.Shared) <-chan []float64 {
	out := make(chan []float64, 1)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var samples []float64
		for {
			select {
			case <-ctx.Done():
				out <- samples
				return
			case <-t.C:
				samples = append(samples, lim.Snapshot().Estimate)
			}
		}
	}()
	return out
}

// printHistory prints the limiters' history of rate changes recorded since
// start (the run's), oldest first, each at its time from start: what the
// limit discovery did and why, to read beside the run's figures.
func printHistory(ctx context.Context, db *pgxpool.Pool, start time.Time) error {
	const most = 10000
	recs, err := limiter.History(ctx, db, "", nil, most)
	if err != nil {
		return err
	}
	slices.Reverse(recs)
	fmt.Println("  limiter history:")
	for _, r := range recs {
		if r.At.Before(start) {
			continue
		}
		fmt.Printf("    %+8.2fs %-9s rate %9.2f estimate %9.2f burst %7.1f  %s\n",
			r.At.Sub(start).Seconds(), r.Cause, r.Rate, r.Estimate, r.Burst, r.Detail)
	}
	if len(recs) == most {
		fmt.Printf("    (the newest %d only)\n", most)
	}
	return nil
}
