package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/metrics"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// scrape fetches url and parses the text exposition format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

// value returns the value of the series name{labels}, failing the test when
// it is absent.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) {
			continue
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, want)
	return 0
}

func TestScrapeShowsSnapshotsQueueAndLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	q := queue.New(pool, queue.Config{})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[int]uuid.UUID{}
	for day, n := range map[int]int{23: 3, 24: 5} {
		var b strings.Builder
		b.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at\n")
		for i := range n {
			fmt.Fprintf(&b, "tx_%d_%d,acct_%d,100,EUR,succeeded,2026-10-%02dT10:00:00Z\n", day, i, i, day)
		}
		res, err := enq.Enqueue(ctx, enqueue.Request{Date: payments.Date{Year: 2026, Month: time.October, Day: day},
			Source: "test.csv", Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(b.String())), nil }})
		if err != nil {
			t.Fatal(err)
		}
		runs[day] = res.RunID
	}
	// The 23rd is done: all matched, completed 90 s after its enqueue.
	var created time.Time
	if err := pool.QueryRow(ctx, `SELECT created_at FROM runs WHERE run_id = $1`, runs[23]).Scan(&created); err != nil {
		t.Fatal(err)
	}
	var matches []ledger.Change
	for i := range 3 {
		matches = append(matches, ledger.Change{RunID: runs[23], TransactionID: fmt.Sprintf("tx_23_%d", i), From: ledger.Queued,
			To: ledger.Matched, Called: true, Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "test",
			At: created.Add(90 * time.Second)})
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.RecordBatch(ctx, tx, matches)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var completedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT completed_at FROM runs WHERE business_date = '2026-10-23'`).Scan(&completedAt); err != nil {
		t.Fatal(err)
	}
	// Two messages claimed, one of them dead-lettered.
	ds, err := q.Claim(ctx, 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %v, %d", err, len(ds))
	}
	if err := q.DeadLetter(ctx, pool, ds[0], "poison", "test"); err != nil {
		t.Fatal(err)
	}

	// The 24th is due 6 h after its enqueue; the only consumer was last
	// seen 100 s ago.
	var deadline time.Time
	if err := pool.QueryRow(ctx, `
		UPDATE runs SET deadline_at = created_at + interval '6 hours' WHERE business_date = '2026-10-24'
		RETURNING deadline_at`).Scan(&deadline); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO consumers (consumer_id, host, pid, started_at, last_seen)
		VALUES ('batch-1:7', 'batch-1', 7, now() - interval '1 hour', now() - interval '100 seconds')`); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	cfg := metrics.Config{
		Consumer: func() consume.Snapshot {
			return consume.Snapshot{Calls: 10, Throttles: 2, ByClass: map[string]int64{"2xx": 7, "4xx": 2, "5xx": 1},
				Acked: 6, Retried: 3, DeadLettered: 1, Outcomes: map[string]int64{"matched": 5, "missing": 1, "dead_lettered": 1}}
		},
		Limiter: func() limiter.Snapshot {
			return limiter.Snapshot{Name: "provider", Rate: 5, Burst: 10, EffectiveRate: 2.5, Throttles: 7,
				PenaltyUntil: now.Add(3 * time.Second), Estimate: 2.75, ProviderBurst: 4, Accepted: 41}
		},
		MoreLimiters: []func() limiter.Snapshot{func() limiter.Snapshot {
			return limiter.Snapshot{Name: "provider:paypal", Rate: 40, Burst: 5, EffectiveRate: 40}
		}},
		Circuits: func() []consume.CircuitState {
			return []consume.CircuitState{{Provider: "stripe", State: circuit.State{Open: true, Cause: "connection refused"}},
				{Provider: "paypal"}}
		},
		Queue: q,
		DB:    pool,
		Now:   func() time.Time { return now },
	}
	sctx, cancel := context.WithCancel(ctx)
	addr := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() { served <- metrics.Serve(sctx, "127.0.0.1:0", cfg, func(a net.Addr) { addr <- a }) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a.String() + "/metrics"
	case err := <-served:
		t.Fatalf("metrics server ended: %v", err)
	}
	fams := scrape(t, url)

	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reconcile_provider_calls_total", []string{"class", "2xx"}, 7},
		{"reconcile_provider_calls_total", []string{"class", "4xx"}, 2},
		{"reconcile_provider_calls_total", []string{"class", "5xx"}, 1},
		{"reconcile_provider_calls_total", []string{"class", "error"}, 0},
		{"reconcile_provider_throttles_total", nil, 2},
		{"reconcile_consumer_decisions_total", []string{"decision", "retried"}, 3},
		{"reconcile_consumer_decisions_total", []string{"decision", "dead_lettered"}, 1},
		{"reconcile_consumer_outcomes_total", []string{"outcome", "matched"}, 5},
		{"reconcile_limiter_configured_rate", []string{"limiter", "provider"}, 5},
		{"reconcile_limiter_effective_rate", []string{"limiter", "provider"}, 2.5},
		{"reconcile_limiter_burst", []string{"limiter", "provider"}, 10},
		{"reconcile_limiter_penalty_seconds", []string{"limiter", "provider"}, 3},
		{"reconcile_limiter_throttles_total", []string{"limiter", "provider"}, 7},
		{"reconcile_limiter_configured_rate", []string{"limiter", "provider:paypal"}, 40},
		{"reconcile_provider_circuit_open", []string{"provider", "stripe"}, 1},
		{"reconcile_provider_circuit_open", []string{"provider", "paypal"}, 0},
		{"reconcile_limiter_estimated_rate", []string{"limiter", "provider"}, 2.75},
		{"reconcile_limiter_estimated_burst", []string{"limiter", "provider"}, 4},
		{"reconcile_limiter_accepted_total", []string{"limiter", "provider"}, 41},
		{"reconcile_queue_messages", []string{"state", "available"}, 6},
		{"reconcile_queue_messages", []string{"state", "in_flight"}, 1},
		{"reconcile_queue_messages", []string{"state", "delayed"}, 0},
		{"reconcile_queue_messages", []string{"state", "dead_lettered"}, 1},
		{"reconcile_items", []string{"reconciliation_id", "nightly-2026-10-23", "state", "matched"}, 3},
		{"reconcile_items", []string{"reconciliation_id", "nightly-2026-10-23", "state", "queued"}, 0},
		{"reconcile_items", []string{"reconciliation_id", "nightly-2026-10-24", "state", "queued"}, 5},
		{"reconcile_run_duration_seconds", []string{"reconciliation_id", "nightly-2026-10-23"}, 90},
		{"reconcile_run_completed_timestamp_seconds", []string{"reconciliation_id", "nightly-2026-10-23"},
			float64(completedAt.UnixMicro()) / 1e6},
		{"reconcile_run_open", []string{"reconciliation_id", "nightly-2026-10-23"}, 0},
		{"reconcile_run_open", []string{"reconciliation_id", "nightly-2026-10-24"}, 1},
		{"reconcile_run_deadline_timestamp_seconds", []string{"reconciliation_id", "nightly-2026-10-24"},
			float64(deadline.UnixMicro()) / 1e6},
		{"reconcile_consumers", nil, 0},
		{"reconcile_dead_letters", []string{"reason", "poison"}, 1},
		{"reconcile_notification_deliveries", []string{"state", "pending"}, 0},
		{"reconcile_notification_oldest_pending_age_seconds", nil, 0},
		{"reconcile_metrics_read_errors_total", []string{"source", "queue"}, 0},
		{"reconcile_metrics_read_errors_total", []string{"source", "ledger"}, 0},
	}
	for _, c := range checks {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if age := value(t, fams, "reconcile_consumer_heartbeat_age_seconds"); age < 100 || age > 700 {
		t.Errorf("heartbeat age = %v s, want 100 s and the test's time", age)
	}
	if _, ok := fams["reconcile_run_deadline_timestamp_seconds"]; len(fams["reconcile_run_deadline_timestamp_seconds"].GetMetric()) != 1 || !ok {
		t.Errorf("deadlines of runs without one are served: %v", fams["reconcile_run_deadline_timestamp_seconds"])
	}
	if age := value(t, fams, "reconcile_queue_oldest_message_age_seconds"); age <= 0 || age > 600 {
		t.Errorf("oldest message age = %v s, want a small positive age", age)
	}
	// A run still open has no completion series.
	for _, m := range fams["reconcile_run_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetValue() == "nightly-2026-10-24" {
				t.Errorf("open run has a duration: %v", m)
			}
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}

	// A broken database leaves the ledger and queue series out, counts the
	// errors and still serves the rest.
	pool.Close()
	fams = scrape(t, url)
	if got := value(t, fams, "reconcile_metrics_read_errors_total", "source", "ledger"); got != 1 {
		t.Errorf("ledger read errors = %v, want 1", got)
	}
	if _, ok := fams["reconcile_items"]; ok {
		t.Error("items served from a closed pool")
	}
	if got := value(t, fams, "reconcile_provider_throttles_total"); got != 2 {
		t.Errorf("throttles after a failed read = %v", got)
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
