package report_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

func TestMain(m *testing.M) { pgtest.Main(m) }

var t0 = time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)

const day24 = `transaction_id,account_id,amount_minor,currency,status,occurred_at
tx_a,acc_1,1000,EUR,succeeded,2026-10-24T08:00:00Z
tx_b,acc_1,1500,EUR,succeeded,2026-10-24T09:00:00Z
tx_c,acc_2,250,USD,succeeded,2026-10-24T10:00:00Z
tx_d,acc_2,990,EUR,refunded,2026-10-24T11:00:00Z
tx_e,acc_3,4200,GBP,succeeded,2026-10-24T12:00:00Z
tx_f,acc_3,75,EUR,failed,2026-10-24T13:00:00Z
tx_g,"acc,4",120,EUR,succeeded,2026-10-24T14:00:00Z
`

const day23 = `transaction_id,account_id,amount_minor,currency,status,occurred_at
tx_y,acc_1,500,EUR,succeeded,2026-10-23T08:00:00Z
tx_z,acc_2,600,EUR,succeeded,2026-10-23T09:00:00Z
`

// knownRuns builds two runs with fixed clocks: 2026-10-23, complete (two
// matches), and 2026-10-24, in progress with one item of every outcome, two
// still queued and one waiting for a retry after a throttle. It returns the
// run ids by date.
func knownRuns(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	ctx := context.Background()
	now := t0
	q := queue.New(pool, queue.Config{Now: func() time.Time { return now }})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q, Actor: "ops@batch-1"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, day := range []struct{ date, source, content string }{
		{"2026-10-23", "/data/payments-2026-10-23.csv", day23},
		{"2026-10-24", "/data/payments-2026-10-24.csv", day24},
	} {
		d, _ := payments.ParseDate(day.date)
		res, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: day.source, Trigger: enqueue.Cron,
			Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(day.content)), nil }})
		if err != nil {
			t.Fatal(err)
		}
		ids[day.date] = res.RunID.String()
		if _, err := pool.Exec(ctx, `UPDATE runs SET created_at = $2 WHERE run_id = $1`, res.RunID, t0); err != nil {
			t.Fatal(err)
		}
	}

	now = t0.Add(time.Minute)
	// The consumer checks the open run's items by lookup.
	if _, err := ledger.ChooseCheckMode(ctx, pool, uuid.MustParse(ids["2026-10-24"]), "lookup"); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Claim(ctx, 100)
	if err != nil || len(ds) != 9 {
		t.Fatalf("claimed %d messages (%v), want 9", len(ds), err)
	}
	var release []queue.Delivery
	step := 0
	for _, d := range ds {
		step++
		at := now.Add(time.Duration(step) * time.Second)
		c := ledger.Change{RunID: d.RunID, TransactionID: d.TransactionID, From: ledger.Queued, Called: true, Attempt: 1,
			Actor: "worker-1:42", At: at}
		settle := func(tx pgx.Tx) error { return q.Ack(ctx, tx, d) }
		switch d.TransactionID {
		case "tx_a", "tx_y", "tx_z":
			c.To, c.HTTPStatus, c.Reason = ledger.Matched, 200, "matched"
		case "tx_b":
			c.To, c.HTTPStatus, c.Reason = ledger.Mismatched, 200, "mismatched"
			c.Provider = &ledger.Provider{AmountMinor: 1499, Currency: "EUR", Status: "refunded"}
			c.Differences = []ledger.Difference{{Field: "amount_minor", Expected: "1500", Provider: "1499"},
				{Field: "status", Expected: "succeeded", Provider: "refunded"}}
		case "tx_c":
			c.To, c.HTTPStatus, c.Reason = ledger.Missing, 404, "missing"
		case "tx_d":
			c.To, c.HTTPStatus, c.Reason = ledger.DeadLettered, 400, "http_400"
			c.Details = map[string]any{"detail": "HTTP 400: {\"error\":\"invalid id\"}\n"}
			settle = func(tx pgx.Tx) error { return q.DeadLetter(ctx, tx, d, "http_400", "HTTP 400") }
		case "tx_e":
			c.To, c.HTTPStatus, c.Reason, c.Throttled = ledger.RetryScheduled, 429, "throttled", true
			c.RetryAfter = 10 * time.Minute
			settle = func(tx pgx.Tx) error { return q.RetryAt(ctx, tx, d, at.Add(10*time.Minute), "throttled") }
		default:
			release = append(release, d)
			continue
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := ledger.Record(ctx, tx, c); err != nil {
				return err
			}
			return settle(tx)
		})
		if err != nil {
			t.Fatalf("settle %s: %v", d.TransactionID, err)
		}
	}
	if err := q.Release(ctx, release); err != nil {
		t.Fatal(err)
	}
	// The provider's list of 2026-10-24 holds a payment the file lacks.
	run24 := uuid.MustParse(ids["2026-10-24"])
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ledger.StoreListed(ctx, tx, run24, "", 1,
			[]ledger.Listed{{ID: "tx_u", AmountMinor: 4200, Currency: "EUR", Status: "succeeded", Kind: "payment"}}); err != nil {
			return err
		}
		_, err := ledger.RecordUnexpected(ctx, tx, run24, "", "worker-1:42", now.Add(30*time.Second))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The provider throttled: the adaptive rate is below the ceiling.
	if err := limiter.SaveSettings(ctx, pool, limiter.DefaultName, limiter.Settings{Rate: 2, Burst: 2}, limiter.SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE rate_limiters SET effective_rate = 0.5, throttles = 3`); err != nil {
		t.Fatal(err)
	}
	// A scheduler failed to find 2026-10-22's export.
	_, err = pool.Exec(ctx, `
		INSERT INTO schedule_ticks (scheduled_at, business_date, catch_up, outcome, source, error, scheduler, recorded_at)
		VALUES ($1, '2026-10-22', false, 'failed', '/data/payments-2026-10-22.csv',
		        'enqueue 2026-10-22 from /data/payments-2026-10-22.csv: open /data/payments-2026-10-22.csv: no such file or directory',
		        'sched-host:7', $1)`, t0.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// golden compares got with testdata/golden/name after replacing run ids by
// placeholders, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte, ids map[string]string) {
	t.Helper()
	for date, id := range ids {
		got = bytes.ReplaceAll(got, []byte(id), []byte("RUN-"+date))
	}
	path := filepath.Join("..", "..", "testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestStatusAndReportOfAKnownRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ids := knownRuns(t, pool)
	ctx := context.Background()
	now := t0.Add(5 * time.Minute)

	// Without a consumer's heartbeat, an open run gets no ETA but a note.
	st, err := report.LoadStatus(ctx, pool, report.StatusOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if st.Runs[0].ETASeconds != nil || !strings.Contains(text.String(), "no consumer seen in the last 30s") {
		t.Errorf("status without a consumer: ETA %v,\n%s", st.Runs[0].ETASeconds, text.String())
	}
	if _, err := pool.Exec(ctx, `INSERT INTO consumers (consumer_id, host, pid, started_at, last_seen) VALUES ('batch-1:4242', 'batch-1', 4242, $1, $2)`,
		t0, now.Add(-2*time.Second)); err != nil {
		t.Fatal(err)
	}

	st, err = report.LoadStatus(ctx, pool, report.StatusOptions{Now: now, Deadline: now.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != 1 || st.Runs[0].BusinessDate != "2026-10-24" {
		t.Fatalf("default status shows %+v, want the open run of 2026-10-24", st.Runs)
	}
	r := st.Runs[0]
	if r.Open != 3 || r.States.Matched != 1 || r.States.Mismatched != 1 || r.States.Missing != 1 || r.States.DeadLettered != 1 ||
		r.States.RetryScheduled != 1 || r.Queue.Available != 2 || r.Queue.Delayed != 1 || r.Queue.DeadLettered != 1 ||
		r.Queue.OldestWaitingSeconds != 300 || r.ETASeconds == nil || *r.ETASeconds != 6 {
		t.Fatalf("run status = %+v", r)
	}
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], "No algorithm fixes") {
		t.Fatalf("warnings = %q, want the deadline warning", st.Warnings)
	}
	if len(st.SchedulerFailures) != 1 || st.SchedulerFailures[0].Resolved {
		t.Fatalf("scheduler failures = %+v", st.SchedulerFailures)
	}
	var buf bytes.Buffer
	if err := st.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.txt", buf.Bytes(), ids)
	buf.Reset()
	if err := st.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.json", buf.Bytes(), ids)

	// A complete run: no ETA, its completion time.
	d23, _ := payments.ParseDate("2026-10-23")
	st, err = report.LoadStatus(ctx, pool, report.StatusOptions{Now: now, Date: d23})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != 1 || st.Runs[0].CompletedAt == nil || st.Runs[0].ETASeconds != nil || st.Runs[0].ProgressPercent != 100 {
		t.Fatalf("status of the complete run = %+v", st.Runs)
	}
	buf.Reset()
	if err := st.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "status-complete.txt", buf.Bytes(), ids)

	d24, _ := payments.ParseDate("2026-10-24")
	for _, all := range []bool{false, true} {
		rep, err := report.Load(ctx, pool, report.Options{Date: d24, All: all})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Discrepancies) != 2 || len(rep.Missing) != 1 || len(rep.DeadLetters) != 1 || len(rep.Unexpected) != 1 || (len(rep.Items) == 8) != all {
			t.Fatalf("report (all=%v) = %+v", all, rep)
		}
		suffix := ""
		if all {
			suffix = "-all"
		}
		for _, f := range []struct {
			ext   string
			write func(io.Writer) error
		}{{"txt", rep.WriteTable}, {"csv", rep.WriteCSV}, {"json", rep.WriteJSON}} {
			buf.Reset()
			if err := f.write(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, "report"+suffix+"."+f.ext, buf.Bytes(), ids)
		}
	}
}

// TestStatusShowsDeadlinesAndProviderLimiters checks the parts of a status
// read together with others: a run's deadline comes with its summary, and
// the providers' limiters with the default one.
func TestStatusShowsDeadlinesAndProviderLimiters(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	knownRuns(t, pool)
	ctx := context.Background()
	now := t0.Add(5 * time.Minute)
	if _, err := ledger.SetDeadlines(ctx, pool, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := limiter.SaveSettings(ctx, pool, "provider:stripe", limiter.Settings{Rate: 25, Burst: 5}, limiter.SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	st, err := report.LoadStatus(ctx, pool, report.StatusOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != 1 || st.Runs[0].DeadlineAt == nil || !st.Runs[0].DeadlineAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("runs = %+v, want the open run with its deadline %s", st.Runs, t0.Add(time.Minute))
	}
	if !slices.ContainsFunc(st.Warnings, func(w string) bool {
		return strings.Contains(w, "is past its deadline 2026-10-25T02:01:00Z with 3 open items")
	}) {
		t.Errorf("warnings = %q, want the run past its deadline", st.Warnings)
	}
	if st.Limiter.Name != limiter.DefaultName || st.Limiter.ConfiguredRate != 2 || st.Limiter.EffectiveRate != 0.5 {
		t.Errorf("limiter = %+v, want the default one at 2/s, effective 0.5/s", st.Limiter)
	}
	if len(st.ProviderLimiters) != 1 || st.ProviderLimiters[0].Name != "provider:stripe" || st.ProviderLimiters[0].ConfiguredRate != 25 {
		t.Errorf("provider limiters = %+v, want provider:stripe at 25/s", st.ProviderLimiters)
	}
}

func TestReportOfUnknownDateOrGeneration(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	knownRuns(t, pool)
	ctx := context.Background()
	d, _ := payments.ParseDate("2026-10-20")
	if _, err := report.Load(ctx, pool, report.Options{Date: d}); !errors.Is(err, report.ErrNoRun) {
		t.Fatalf("unknown date: err = %v, want ErrNoRun", err)
	}
	d, _ = payments.ParseDate("2026-10-24")
	if _, err := report.Load(ctx, pool, report.Options{Date: d, Generation: 2}); !errors.Is(err, report.ErrNoRun) {
		t.Fatalf("unknown generation: err = %v, want ErrNoRun", err)
	}
	if rep, err := report.Load(ctx, pool, report.Options{Date: d, Generation: 1}); err != nil || rep.Run.Generation != 1 {
		t.Fatalf("generation 1: %v %+v", err, rep.Run)
	}
}
