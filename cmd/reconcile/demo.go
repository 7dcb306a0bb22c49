package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/listing"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/queue"
)

// demoLimiter is the demo's limiter row on a shared database (--database-url),
// so that the demo never changes the real provider's setting there.
const demoLimiter = "demo"

// limiterName is the limiter row the demo paces its provider with: the
// default one on its own throwaway database, so that status, limit show and
// the console of a kept demo database show it as they show a real night's;
// demoLimiter on a shared one.
func (o demoOptions) limiterName() string {
	if o.databaseURL != "" {
		return demoLimiter
	}
	return limiter.DefaultName
}

// demoResult is what a demo found.
type demoResult struct {
	items      int
	ledger     map[ledger.State]int // outcome → items in the ledger
	truth      map[ledger.State]int // outcome → items by the simulator's ground truth
	mismatches []string             // items whose ledger outcome differs from the truth
	example    string               // a transaction whose history the demo suggests querying
}

func cmdDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "[--items N] [--seed S] [--profile stripe|paypal|square] [--mode list] [--keep] [--database-url URL]",
		`Show the whole system working, end to end, in well under a minute: start a throwaway
PostgreSQL, migrate it, start a simulated payment provider whose rate limit changes during the run (300/s, 100/s, 250/s),
generate a realistic day of payments (accounts, currencies, mismatches, missing ids,
transient 503s, a few permanent failures), enqueue it, consume it with the adaptive
shared limiter, and print the run's report checked against the simulator's ground truth.
Exits 1 if any outcome differs from the ground truth.

--profile stripe (or paypal, square) runs the whole demo through that provider's API: the
simulator speaks it (PayPal with its OAuth2 token endpoint) and the consumer reads it
with the built-in profile of that name.

--mode list reconciles from the provider's own list of the day (Stripe's payment intents,
PayPal's reporting transactions, Square's payments, or the contract's transactions list),
which holds 1% more records than the file: the report shows both directions, the
payments the provider lacks (missing) and the records the file lacks (unexpected).

--keep leaves the database running and prints how to connect with psql.

The demo never uses DATABASE_URL. --database-url runs it on that database
instead (which must have no open runs); its runs are then named demo-0001-01-01,
demo-0001-01-01-g2, ..., a date and names no real night can have, so a real
enqueue of any date is never taken for done.`,
		"reconcile demo --items 3000 --keep")
	items := fs.Int("items", 3000, "payments in the generated day")
	seed := fs.Uint64("seed", 1, "seed of the generated day and of the provider's faults")
	date := fs.String("date", "", "business date of the generated day, YYYY-MM-DD (default yesterday, UTC)")
	keep := fs.Bool("keep", false, "leave the database running and print how to query it")
	ui := fs.Bool("ui", false, "with --keep: then serve the web console on a loopback address until interrupted")
	concurrency := fs.Int("concurrency", 16, "workers calling the provider at once")
	progressMode := fs.String("progress", "auto", "progress: bar, log, off, or auto (bar when stderr is a terminal)")
	databaseURL := fs.String("database-url", "", "run on this database instead of a throwaway one (runs named demo-…)")
	shapeName := fs.String("profile", "reconcile", "provider API of the demo: reconcile, stripe, paypal or square")
	modeName := fs.String("mode", "lookup", "lookup: one call per payment; list: page through the provider's list of the day first (1% of its records are not in the file: reported unexpected)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	shape, err := providersim.ParseShape(*shapeName)
	if err != nil {
		return usageErrorf("demo: --profile: %v", err)
	}
	mode, err := consume.ParseMode(*modeName)
	if err != nil || mode == consume.ModeAuto {
		return usageErrorf("demo: --mode %q: want lookup or list", *modeName)
	}
	if *items < 1 || *items > 1_000_000 {
		return usageErrorf("demo: --items %d: want 1 to 1000000", *items)
	}
	d := payments.DateOf(time.Now().UTC().AddDate(0, 0, -1))
	if *databaseURL != "" {
		if *date != "" {
			return usageErrorf("demo: --date cannot go with --database-url: on a shared database the demo's day is %s, so it never takes a real date", sharedDemoDate)
		}
		d = sharedDemoDate
	} else if *date != "" {
		var err error
		if d, err = payments.ParseDate(*date); err != nil {
			return usageErrorf("demo: --date: %v", err)
		}
	}
	logger, err := e.logger()
	if err != nil {
		return err
	}
	if *ui && !*keep {
		return usageErrorf("demo: --ui needs --keep (the console shows the kept database)")
	}
	res, err := runDemo(ctx, e, logger, demoOptions{items: *items, seed: *seed, date: d, keep: *keep,
		concurrency: *concurrency, progress: *progressMode, databaseURL: *databaseURL, shape: shape, ui: *ui, mode: mode})
	if err != nil {
		return err
	}
	if len(res.mismatches) > 0 {
		return fmt.Errorf("demo: %d of %d outcomes differ from the ground truth", len(res.mismatches), res.items)
	}
	return nil
}

type demoOptions struct {
	items       int
	seed        uint64
	date        payments.Date
	keep        bool
	concurrency int
	progress    string
	databaseURL string // empty: a throwaway cluster
	shape       providersim.Shape
	ui          bool
	mode        consume.Mode
}

// runDemo runs the demo's steps in order: the database, the day and its
// provider, enqueue, consume, the report against the ground truth, and what
// --keep and --ui leave behind.
func runDemo(ctx context.Context, e *env, logger *slog.Logger, o demoOptions) (demoResult, error) {
	start := time.Now()
	w := e.stdout

	db, err := openDemoDatabase(ctx, w, logger, o)
	if err != nil {
		return demoResult{}, err
	}
	defer db.close(logger)
	pool, err := dbconn.Open(ctx, dbconn.Config{URL: db.url, MaxConns: int32(o.concurrency + 8), Logger: logger})
	if err != nil {
		return demoResult{}, err
	}
	poolClosed := false
	closePool := func() {
		if !poolClosed {
			pool.Close()
			poolClosed = true
		}
	}
	defer closePool()
	open, err := ledger.OpenRuns(ctx, pool)
	if err != nil {
		return demoResult{}, fmt.Errorf("demo: %w", err)
	}
	if open > 0 {
		return demoResult{}, usageErrorf("demo: the database has %d open runs: the demo's consumer would call the simulated provider for them; use an empty database (or leave out --database-url for a throwaway one)", open)
	}
	dbReady := time.Now()

	day, err := generateDemoDayIn(o.date, o.items, o.seed, o.shape)
	if err != nil {
		return demoResult{}, err
	}
	if o.mode == consume.ModeList {
		day.addUnexpected(o.items / 100)
	}
	prov, err := startDemoProvider(ctx, day, o, logger)
	if err != nil {
		return demoResult{}, err
	}
	defer prov.stop()
	printDemoDay(w, day, o, prov.url)

	enq, err := enqueueDemoDay(ctx, w, pool, logger, day, o)
	if err != nil {
		return demoResult{}, err
	}
	enqueued := time.Now()

	consumer, err := consumeDemoDay(ctx, e, pool, logger, o, prov)
	if err != nil {
		return demoResult{}, err
	}
	consumed := time.Now()

	res, err := demoReport(ctx, w, pool, prov.sim, enq.RunID, consumer, day, o.mode)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(w, "elapsed: %s (database %s, enqueue %s, consume %s)\n", time.Since(start).Round(time.Millisecond),
		dbReady.Sub(start).Round(time.Millisecond), enqueued.Sub(dbReady).Round(time.Millisecond),
		consumed.Sub(enqueued).Round(time.Millisecond))
	example := res.example
	closePool()

	if o.keep {
		db.keep(w, example)
	}
	if o.ui {
		return res, serveDemoConsole(ctx, e, logger, db.url, o.limiterName())
	}
	return res, nil
}

// enqueueDemoDay enqueues the day through the same path as `reconcile
// enqueue`. On a shared database whose demo date has a run already, it
// checks the day again as a new generation.
func enqueueDemoDay(ctx context.Context, w io.Writer, pool *pgxpool.Pool, logger *slog.Logger, day demoDay, o demoOptions) (enqueue.Result, error) {
	req := enqueue.Request{Date: o.date, Location: time.UTC, Source: fmt.Sprintf("demo:generated(seed=%d,items=%d)", o.seed, o.items),
		Format: payments.FormatCSV, Trigger: enqueue.Manual, Prefix: "nightly",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(day.csv)), nil }}
	if o.databaseURL != "" {
		req.Prefix = sharedDemoPrefix
	}
	enq, err := runEnqueue(ctx, pool, logger, actorName(), req)
	var changed *enqueue.ChangedSourceError
	if err == nil && enq.Existing || errors.As(err, &changed) {
		req.Rerun = enqueue.RerunAll
		enq, err = runEnqueue(ctx, pool, logger, actorName(), req)
	}
	if err != nil {
		return enqueue.Result{}, err
	}
	fmt.Fprintf(w, "enqueued run %s (%s): %d items in %s\n", enq.RunID, enq.ReconciliationID, enq.Items,
		enq.Elapsed.Round(time.Millisecond))
	return enq, nil
}

// consumeDemoDay consumes to completion through the same path as
// `reconcile consume --until-done`, while the provider's limit follows the
// demo's schedule.
func consumeDemoDay(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, o demoOptions, prov *demoProvider) (*consume.Consumer, error) {
	sched := demoSchedule(o.items)
	def := decision.Policy{}.WithDefaults()
	cf := consumeFlags{untilDone: true, concurrency: o.concurrency, rate: sched[0].Rate, burst: demoBurst, save: true,
		maxAttempts: def.MaxAttempts, backoffBase: 50 * time.Millisecond, backoffCap: time.Second, jitter: "full",
		throttleDeadline: def.ThrottleDeadline, visibility: queue.DefaultVisibility, maxDeliveries: queue.DefaultMaxDeliveries,
		grace: 5 * time.Second, providerURL: prov.url, profile: o.shape.String(), timeout: 5 * time.Second,
		progress: o.progress, limiterName: o.limiterName(), mode: o.mode.String(), listMargin: listing.DefaultMargin}
	if err := cf.validate(); err != nil {
		return nil, err
	}
	ce := *e
	ce.getenv = func(k string) string {
		switch k {
		case "RECONCILE_PROVIDER_TOKEN":
			return prov.token.Reveal()
		case "RECONCILE_PROVIDER_CLIENT_ID":
			return "demo"
		case "RECONCILE_PROVIDER_CLIENT_SECRET":
			return prov.clientSecret.Reveal()
		case "RECONCILE_PROVIDERS":
			return "" // the demo calls its own simulator only
		}
		return e.getenv(k)
	}
	var consumer *consume.Consumer
	prov.sim.SetLimit(sched, demoBurst)
	fmt.Fprintf(e.stdout, "consuming, the shared limiter starting at %g/s (backoff 50ms..1s)\n", sched[0].Rate)
	if err := runConsume(ctx, &ce, pool, logger, cf, func(c *consume.Consumer) { consumer = c }); err != nil {
		return nil, err
	}
	return consumer, nil
}
