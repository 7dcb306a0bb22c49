package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/sample"
	"github.com/reconcile/reconcile/migrations"
)

// demoShares are the simulated provider's faults in the demo: mismatches,
// missing ids, transient 503s and a few permanent failures (400 and an
// unreadable body) that end as dead letters.
var demoShares = providersim.Shares{Mismatch: 0.03, Missing: 0.02, Transient: 0.04, BadRequest: 0.002, BadBody: 0.002}

// demoLimiter is the demo's limiter row, so a demo on a shared database never
// changes the real provider's setting.
const demoLimiter = "demo"

// demoBurst is the burst of the provider's limit and of the demo's limiter.
// A small burst makes a lower limit bite at once.
const demoBurst = 20

// demoDay is the generated day: the payments to enqueue as CSV and the
// provider's records of them.
type demoDay struct {
	csv      []byte
	records  []provider.Record
	accounts int
	currency map[string]int
}

// generateDemoDay generates n payments of date with seed.
func generateDemoDay(date payments.Date, n int, seed uint64) (demoDay, error) {
	return generateDemoDayIn(date, n, seed, providersim.ShapeReconcile)
}

// generateDemoDayIn generates a day whose statuses the shape can say: a
// status it has no word for (Stripe's PaymentIntents are never refunded)
// becomes canceled, or succeeded when it cannot say canceled either.
func generateDemoDayIn(date payments.Date, n int, seed uint64, shape providersim.Shape) (demoDay, error) {
	g, err := sample.New(sample.Config{Date: date, Count: n, Seed: seed})
	if err != nil {
		return demoDay{}, err
	}
	day := demoDay{currency: map[string]int{}}
	var buf bytes.Buffer
	buf.WriteString(strings.Join(payments.Fields(), ",") + "\n")
	accounts := map[string]bool{}
	var line []byte
	for {
		p, ok := g.Next()
		if !ok {
			break
		}
		if !shape.Expresses(p.Status) {
			p.Status = profile.StatusCanceled
			if !shape.Expresses(p.Status) {
				p.Status = profile.StatusSucceeded
			}
		}
		line = sample.AppendCSV(line[:0], p)
		buf.Write(line)
		day.records = append(day.records, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
		accounts[p.AccountID] = true
		day.currency[p.Currency]++
	}
	day.csv, day.accounts = buf.Bytes(), len(accounts)
	return day, nil
}

// demoSchedule is the provider's limit during the demo: 300/s, then 100/s,
// then 250/s. The changes are placed by item count (the first 40% of the
// items at 300/s, the next 15% at 100/s), so the slow phase happens at any
// --items; on a 2-core machine the consumer itself does about 200/s, so the
// middle phase is the one the adaptive limiter has to find.
func demoSchedule(items int) providersim.Schedule {
	t1 := max(time.Second, time.Duration(float64(items)*0.40/300*float64(time.Second))).Round(100 * time.Millisecond)
	t2 := t1 + max(time.Second, time.Duration(float64(items)*0.15/100*float64(time.Second))).Round(100*time.Millisecond)
	return providersim.Schedule{{At: 0, Rate: 300}, {At: t1, Rate: 100}, {At: t2, Rate: 250}}
}

// demoSim returns the simulator of a demo day.
func demoSim(day demoDay, seed uint64, token provider.Secret, logger *slog.Logger) (*providersim.Server, error) {
	return providersim.New(providersim.Config{
		Records: day.records, Seed: seed, Shares: demoShares, TransientCalls: 2,
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond},
		Token:   token, Logger: logger,
	})
}

// demoResult is what a demo found.
type demoResult struct {
	items      int
	ledger     map[ledger.State]int // outcome → items in the ledger
	truth      map[ledger.State]int // outcome → items by the simulator's ground truth
	mismatches []string             // items whose ledger outcome differs from the truth
}

func cmdDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "[--items N] [--seed S] [--profile stripe|paypal|square] [--keep] [--database-url URL]",
		`Show the whole system working, end to end, in well under a minute: start a throwaway
PostgreSQL, migrate it, start a simulated payment provider whose rate limit changes during the run (300/s, 100/s, 250/s),
generate a realistic day of payments (accounts, currencies, mismatches, missing ids,
transient 503s, a few permanent failures), enqueue it, consume it with the adaptive
shared limiter, and print the run's report checked against the simulator's ground truth.
Exits 1 if any outcome differs from the ground truth.

--profile stripe (or paypal, square) runs the whole demo through that provider's API: the
simulator speaks it (PayPal with its OAuth2 token endpoint) and the consumer reads it
with the built-in profile of that name.

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
	concurrency := fs.Int("concurrency", 16, "workers calling the provider at once")
	progressMode := fs.String("progress", "auto", "progress: bar, log, off, or auto (bar when stderr is a terminal)")
	databaseURL := fs.String("database-url", "", "run on this database instead of a throwaway one (runs named demo-…)")
	shapeName := fs.String("profile", "reconcile", "provider API of the demo: reconcile, stripe, paypal or square")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	shape, err := providersim.ParseShape(*shapeName)
	if err != nil {
		return usageErrorf("demo: --profile: %v", err)
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
	res, err := runDemo(ctx, e, logger, demoOptions{items: *items, seed: *seed, date: d, keep: *keep,
		concurrency: *concurrency, progress: *progressMode, databaseURL: *databaseURL, shape: shape})
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
}

// sharedDemoDate is the business date of the demo's day on a database given
// with --database-url: no real night is dated in the year 1, so a demo run
// can never make a real date look enqueued already.
var sharedDemoDate = payments.Date{Year: 1, Month: time.January, Day: 1}

// sharedDemoPrefix starts the reconciliation ids of the demo's runs on a
// database given with --database-url.
const sharedDemoPrefix = "demo"

func runDemo(ctx context.Context, e *env, logger *slog.Logger, o demoOptions) (demoResult, error) {
	start := time.Now()
	w := e.stdout

	// The database: a throwaway cluster unless --database-url names one.
	// DATABASE_URL is never used: it may well point at production.
	url := o.databaseURL
	var cluster *pgserver.Cluster
	kept := false
	if url == "" {
		var err error
		cluster, err = pgserver.Start(ctx, pgserver.Config{Logger: logger, Detachable: o.keep})
		if err != nil {
			return demoResult{}, fmt.Errorf("demo: start throwaway postgres: %w", err)
		}
		defer func() {
			if !kept {
				if err := cluster.Stop(); err != nil {
					logger.Warn("throwaway postgres not removed", "err", err)
				}
			}
		}()
		if err := createDatabase(ctx, cluster.ConnString("postgres"), "reconcile"); err != nil {
			return demoResult{}, err
		}
		url = cluster.ConnString("reconcile")
		fate := "removed afterwards"
		if o.keep {
			fate = "kept running afterwards"
		}
		fmt.Fprintf(w, "database: a throwaway PostgreSQL in %s, %s (DATABASE_URL is never used; see --database-url)\n", cluster.SocketDir(), fate)
	} else {
		fmt.Fprintf(w, "database: %s (--database-url); the demo's runs are named %s-%s…\n", dbconn.Redact(url), sharedDemoPrefix, sharedDemoDate)
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		return demoResult{}, fmt.Errorf("demo: migrate: %w", err)
	}
	pool, err := dbconn.Open(ctx, dbconn.Config{URL: url, MaxConns: int32(o.concurrency + 8), Logger: logger})
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

	// The day and the provider.
	day, err := generateDemoDayIn(o.date, o.items, o.seed, o.shape)
	if err != nil {
		return demoResult{}, err
	}
	token, clientSecret := provider.Secret(randomToken()), provider.Secret(randomToken())
	sim, err := demoSim(day, o.seed, token, logger)
	if err != nil {
		return demoResult{}, err
	}
	handler, err := providersim.Shaped(sim, o.shape, providersim.ShapeConfig{ClientID: "demo", ClientSecret: clientSecret})
	if err != nil {
		return demoResult{}, err
	}
	simCtx, stopSim := context.WithCancel(ctx)
	var simDone sync.WaitGroup
	defer func() { stopSim(); simDone.Wait() }()
	ready, simErr := make(chan net.Addr, 1), make(chan error, 1)
	simDone.Add(1)
	go func() {
		defer simDone.Done()
		if err := providersim.ServeHandler(simCtx, handler, "127.0.0.1:0", func(a net.Addr) { ready <- a }); err != nil {
			simErr <- err
		}
	}()
	var simURL string
	select {
	case a := <-ready:
		simURL = "http://" + a.String()
	case err := <-simErr:
		return demoResult{}, fmt.Errorf("demo: start provider simulator: %w", err)
	}
	currencies := make([]string, 0, len(day.currency))
	for c := range day.currency {
		currencies = append(currencies, c)
	}
	slices.Sort(currencies)
	fmt.Fprintf(w, "reconcile demo: %d payments of %s across %d accounts in %d currencies (%s)\n",
		o.items, o.date, day.accounts, len(currencies), strings.Join(currencies, ", "))
	sched := demoSchedule(o.items)
	fmt.Fprintf(w, "simulated provider at %s speaking the %s API: rate limit %s; faults: %.1f%% mismatched, %.1f%% missing, %.1f%% transient 503s, %.1f%% permanent (400 or unreadable body)\n",
		simURL, o.shape, describeSchedule(sched), 100*demoShares.Mismatch, 100*demoShares.Missing, 100*demoShares.Transient,
		100*(demoShares.BadRequest+demoShares.BadBody))

	// Enqueue: the same path as `reconcile enqueue`.
	req := enqueue.Request{Date: o.date, Location: time.UTC, Source: fmt.Sprintf("demo:generated(seed=%d,items=%d)", o.seed, o.items),
		Format: payments.FormatCSV, Trigger: enqueue.Manual, Prefix: "nightly",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(day.csv)), nil }}
	if o.databaseURL != "" {
		req.Prefix = sharedDemoPrefix
	}
	enq, err := runEnqueue(ctx, pool, logger, actorName(), req)
	if err == nil && enq.Existing {
		// The date has a run already (a shared database): check it again.
		req.Rerun = enqueue.RerunAll
		enq, err = runEnqueue(ctx, pool, logger, actorName(), req)
	}
	if err != nil {
		return demoResult{}, err
	}
	enqueued := time.Now()
	fmt.Fprintf(w, "enqueued run %s (%s): %d items in %s\n", enq.RunID, enq.ReconciliationID, enq.Items,
		enq.Elapsed.Round(time.Millisecond))

	// Consume to completion: the same path as `reconcile consume --until-done`.
	def := decision.Policy{}.WithDefaults()
	cf := consumeFlags{untilDone: true, concurrency: o.concurrency, rate: sched[0].Rate, burst: demoBurst,
		maxAttempts: def.MaxAttempts, backoffBase: 50 * time.Millisecond, backoffCap: time.Second, jitter: "full",
		throttleDeadline: def.ThrottleDeadline, visibility: 30 * time.Second, maxDeliveries: 5, grace: 5 * time.Second,
		providerURL: simURL, profile: o.shape.String(), timeout: 5 * time.Second, progress: o.progress, limiterName: demoLimiter}
	if err := cf.validate(); err != nil {
		return demoResult{}, err
	}
	ce := *e
	ce.getenv = func(k string) string {
		switch k {
		case "RECONCILE_PROVIDER_TOKEN":
			return token.Reveal()
		case "RECONCILE_PROVIDER_CLIENT_ID":
			return "demo"
		case "RECONCILE_PROVIDER_CLIENT_SECRET":
			return clientSecret.Reveal()
		case "RECONCILE_PROVIDERS":
			return "" // the demo calls its own simulator only
		}
		return e.getenv(k)
	}
	var consumer *consume.Consumer
	sim.SetLimit(sched, demoBurst)
	fmt.Fprintf(w, "consuming with %d workers, the shared limiter starting at %g/s (backoff 50ms..1s)\n", o.concurrency, sched[0].Rate)
	if err := runConsume(ctx, &ce, pool, logger, cf, func(c *consume.Consumer) { consumer = c }); err != nil {
		return demoResult{}, err
	}
	consumed := time.Now()

	res, err := demoReport(ctx, w, pool, sim, enq.RunID, consumer)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(w, "elapsed: %s (database %s, enqueue %s, consume %s)\n", time.Since(start).Round(time.Millisecond),
		dbReady.Sub(start).Round(time.Millisecond), enqueued.Sub(dbReady).Round(time.Millisecond),
		consumed.Sub(enqueued).Round(time.Millisecond))
	example, err := exampleRetried(ctx, pool, enq.RunID)
	if err != nil {
		return res, err
	}
	closePool()

	if o.keep {
		if cluster == nil {
			printQueries(w, fmt.Sprintf("psql '%s'", dbconn.Redact(url)), example)
			return res, nil
		}
		kept = true
		dir := cluster.Detach()
		printQueries(w, fmt.Sprintf("psql -h %s -U postgres reconcile", dir), example)
		fmt.Fprintf(w, "\nOther commands use it with DATABASE_URL='host=%s user=postgres dbname=reconcile sslmode=disable'.\n", dir)
		fmt.Fprintf(w, "When done: %s && rm -rf %s\n", stopCommand(dir), dir)
	}
	return res, nil
}

// demoReport prints the outcome counts against the ground truth, the
// provider's figures and examples, and returns what it found.
func demoReport(ctx context.Context, w io.Writer, pool *pgxpool.Pool, sim *providersim.Server, runID uuid.UUID, c *consume.Consumer) (demoResult, error) {
	res := demoResult{ledger: map[ledger.State]int{}, truth: map[ledger.State]int{}}
	rows, err := pool.Query(ctx, `
		SELECT transaction_id, state, coalesce(last_reason, ''),
		       coalesce((SELECT array_agg(d ->> 'field' ORDER BY d ->> 'field')
		                   FROM jsonb_array_elements(CASE WHEN jsonb_typeof(differences) = 'array' THEN differences ELSE '[]' END) d), '{}')
		  FROM items WHERE run_id = $1 ORDER BY transaction_id`, runID)
	if err != nil {
		return res, fmt.Errorf("demo: read outcomes: %w", err)
	}
	var id, reason string
	var state ledger.State
	var fields []string
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &reason, &fields}, func() error {
		res.items++
		res.ledger[state]++
		t := sim.Truth(id)
		res.truth[t.Outcome]++
		want, got := describeOutcome(t.Outcome, t.Fields, t.Reason), describeOutcome(state, fields, reason)
		if got != want {
			res.mismatches = append(res.mismatches, fmt.Sprintf("%q: ledger %s, ground truth %s", id, got, want))
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("demo: read outcomes: %w", err)
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "outcome\tledger\tground truth\t")
	for _, o := range ledger.TerminalStates() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", o, res.ledger[o], res.truth[o])
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\n", res.items, res.items)
	if err := tw.Flush(); err != nil {
		return res, err
	}
	if len(res.mismatches) == 0 {
		fmt.Fprintf(w, "all %d outcomes match the ground truth\n", res.items)
	} else {
		fmt.Fprintf(w, "%d of %d outcomes DIFFER from the ground truth:\n", len(res.mismatches), res.items)
		for i, m := range res.mismatches {
			if i == 20 {
				fmt.Fprintf(w, "  ... and %d more\n", len(res.mismatches)-i)
				break
			}
			fmt.Fprintln(w, "  "+m)
		}
	}

	st := sim.Stats()
	statuses := make([]int, 0, len(st.ByStatus))
	for s := range st.ByStatus {
		statuses = append(statuses, s)
	}
	slices.Sort(statuses)
	parts := make([]string, len(statuses))
	for i, s := range statuses {
		parts[i] = fmt.Sprintf("%d×%d", st.ByStatus[s], s)
	}
	fmt.Fprintf(w, "\nprovider calls: %d, %.3f per item (%s); %d throttled (429); at most %d calls for one item\n",
		st.Calls, float64(st.Calls)/float64(max(res.items, 1)), strings.Join(parts, ", "), st.Throttled, st.MaxCallsPerKey)
	fmt.Fprintf(w, "provider calls per second by limit phase: %s\n", describePhases(st.Series))
	if c != nil {
		s := c.Snapshot()
		fmt.Fprintf(w, "consumer: %d calls, %d retries scheduled, %d dead-lettered\n", s.Calls, s.Retried, s.DeadLettered)
	}
	if err := printExamples(ctx, w, pool, runID); err != nil {
		return res, err
	}
	return res, nil
}

// describeOutcome names an outcome for comparison, with the differing
// fields of a mismatch or the reason of a dead letter.
func describeOutcome(s ledger.State, fields []string, reason string) string {
	switch s {
	case ledger.Mismatched:
		return string(s) + "(" + strings.Join(fields, ",") + ")"
	case ledger.DeadLettered:
		return string(s) + "(" + reason + ")"
	}
	return string(s)
}

// printExamples prints a few discrepancies and dead letters of the run from
// the auditor's views.
func printExamples(ctx context.Context, w io.Writer, pool *pgxpool.Pool, runID uuid.UUID) error {
	rows, err := pool.Query(ctx, `
		SELECT transaction_id, account_id, field, coalesce(expected, ''), coalesce(provider, '')
		  FROM discrepancies WHERE run_id = $1 ORDER BY transaction_id LIMIT 3`, runID)
	if err != nil {
		return fmt.Errorf("demo: read discrepancies: %w", err)
	}
	fmt.Fprintln(w, "\nexample discrepancies (view discrepancies):")
	var id, acct, field, expected, got string
	if _, err := pgx.ForEachRow(rows, []any{&id, &acct, &field, &expected, &got}, func() error {
		fmt.Fprintf(w, "  %-28q %s  %s: expected %s, provider %s\n", id, acct, field, expected, got)
		return nil
	}); err != nil {
		return fmt.Errorf("demo: read discrepancies: %w", err)
	}
	rows, err = pool.Query(ctx, `
		SELECT transaction_id, coalesce(reason, ''), attempts, coalesce(http_status, 0)
		  FROM dead_lettered_items WHERE run_id = $1 ORDER BY transaction_id LIMIT 3`, runID)
	if err != nil {
		return fmt.Errorf("demo: read dead letters: %w", err)
	}
	fmt.Fprintln(w, "example dead letters (view dead_lettered_items):")
	var reason string
	var attempts, status int
	if _, err := pgx.ForEachRow(rows, []any{&id, &reason, &attempts, &status}, func() error {
		fmt.Fprintf(w, "  %-28q %s after %s (last HTTP status %d)\n", id, reason, countOf(attempts, "attempt", "attempts"), status)
		return nil
	}); err != nil {
		return fmt.Errorf("demo: read dead letters: %w", err)
	}
	return nil
}

// exampleRetried returns a transaction of the run that needed a retry and
// then succeeded, for the transaction_history example query.
func exampleRetried(ctx context.Context, pool *pgxpool.Pool, runID uuid.UUID) (string, error) {
	var id string
	err := pool.QueryRow(ctx, `
		SELECT transaction_id FROM items
		 WHERE run_id = $1 AND state = 'matched' AND attempts > 1 AND transaction_id !~ '[''\\]'
		 ORDER BY attempts DESC, transaction_id LIMIT 1`, runID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = pool.QueryRow(ctx, `SELECT transaction_id FROM items WHERE run_id = $1 ORDER BY transaction_id LIMIT 1`, runID).Scan(&id)
	}
	if err != nil {
		return "", fmt.Errorf("demo: pick an example transaction: %w", err)
	}
	return id, nil
}

func printQueries(w io.Writer, psql, example string) {
	fmt.Fprintf(w, "\nThe database is still running. Connect with:\n  %s\n\nand try:\n", psql)
	fmt.Fprintln(w, "  SELECT reconciliation_id, item_count, matched, mismatched, missing, dead_lettered, provider_calls, throttles, duration FROM run_summary;")
	fmt.Fprintln(w, "  SELECT transaction_id, account_id, field, expected, provider FROM discrepancies ORDER BY transaction_id LIMIT 10;")
	fmt.Fprintf(w, "  SELECT seq, at, from_state, to_state, attempt, http_status, reason FROM transaction_history WHERE transaction_id = '%s' ORDER BY seq;\n",
		strings.ReplaceAll(example, "'", "''"))
}

// describePhases summarises the simulator's per-second series by the limit
// in force: how close the consumer kept to each limit.
func describePhases(series []providersim.Second) string {
	type phase struct {
		limit   float64
		calls   int64
		seconds int
	}
	var phases []phase
	for _, s := range series {
		if s.Limit == 0 {
			continue // before the demo's limit was set
		}
		if len(phases) == 0 || phases[len(phases)-1].limit != s.Limit {
			phases = append(phases, phase{limit: s.Limit})
		}
		p := &phases[len(phases)-1]
		p.calls += s.Calls
		p.seconds++
	}
	parts := make([]string, len(phases))
	for i, p := range phases {
		parts[i] = fmt.Sprintf("%.0f/s while the limit was %g/s (%ds)", float64(p.calls)/float64(p.seconds), p.limit, p.seconds)
	}
	return strings.Join(parts, ", ")
}

func describeSchedule(s providersim.Schedule) string {
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = fmt.Sprintf("%g/s", st.Rate)
		if st.At > 0 {
			parts[i] += " after " + st.At.String()
		}
	}
	return strings.Join(parts, ", ")
}

// createDatabase creates database name on the server of connString.
func createDatabase(ctx context.Context, connString, name string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("demo: connect to throwaway postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("demo: create database %s: %w", name, err)
	}
	return nil
}

// countOf writes n with the singular or plural noun: "1 attempt", "2 attempts".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "demo_" + hex.EncodeToString(b)
}

// stopCommand is the shell command that stops a kept demo server.
func stopCommand(dir string) string {
	bin, err := pgserver.FindBinaries()
	if err != nil {
		bin = "/usr/lib/postgresql/VERSION/bin"
	}
	c := fmt.Sprintf("%s -D %s stop", filepath.Join(bin, "pg_ctl"), filepath.Join(dir, "data"))
	if os.Geteuid() == 0 {
		return "su postgres -s /bin/sh -c '" + c + "'"
	}
	return c
}
