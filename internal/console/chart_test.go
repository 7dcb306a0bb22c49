package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
)

// TestChartDrawsIdleTimeAtZero records a run whose consumers called the
// provider for 3 s, stopped for 15 s and called again for 3 s: the chart's
// calls line falls to the axis for the idle time instead of sloping across
// it.
func TestChartDrawsIdleTimeAtZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, htpasswd(t))
	var file strings.Builder
	file.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at\n")
	for i := range 60 {
		fmt.Fprintf(&file, "idle_%02d,acc,100,EUR,succeeded,2026-10-22T08:00:00Z\n", i)
	}
	enq, err := enqueue.New(b.pool, enqueue.Config{Queue: b.q, Actor: "ops@batch-1"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := payments.ParseDate("2026-10-22")
	res, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: "/data/idle.csv",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(file.String())), nil }})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 10, 23, 2, 0, 0, 0, time.UTC)
	var cs []ledger.Change
	for i := range 60 {
		at := start.Add(time.Duration(i%30) * 100 * time.Millisecond) // 30 in the first 3 s
		if i >= 30 {
			at = at.Add(18 * time.Second) // 30 more from 18 s on, after 15 s of nothing
		}
		cs = append(cs, ledger.Change{RunID: res.RunID, TransactionID: fmt.Sprintf("idle_%02d", i), From: ledger.Queued,
			To: ledger.Matched, Called: true, Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "worker-1:42", At: at})
	}
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { _, err := ledger.RecordBatch(ctx, tx, cs); return err }); err != nil {
		t.Fatal(err)
	}
	bob := b.login(t, "bob")
	w := b.do(t, "GET", "/runs/"+res.RunID.String(), bob, nil)
	wantStatus(t, w, http.StatusOK, "run page")
	m := regexp.MustCompile(`<polyline class="calls" points="([^"]*)"`).FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatalf("no calls line:\n%s", w.Body)
	}
	empty := newSVGChart(traffic{}, limits{})
	zero := fmt.Sprintf("%.1f", float64(empty.Height-empty.Bottom)) // y of a rate of 0
	pts := strings.Fields(m[1])
	var zeros, busy []int
	for i, pt := range pts {
		if strings.HasSuffix(pt, ","+zero) {
			zeros = append(zeros, i)
		} else {
			busy = append(busy, i)
		}
	}
	// Busy bins, then the idle time at zero, then busy bins again.
	if len(zeros) < 2 || len(busy) < 2 || zeros[0] < busy[0] || zeros[len(zeros)-1] > busy[len(busy)-1] {
		t.Errorf("the calls line does not fall to zero (y %s) between the two busy stretches: %s", zero, m[1])
	}
}

// TestRunningRunCountsWhatItsChartShows throttles the open item of a
// running run: the run page's 429s and calls are what its chart adds up
// to, not the counters, which count an item's calls once it finishes.
func TestRunningRunCountsWhatItsChartShows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, htpasswd(t))
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := ledger.Record(ctx, tx, ledger.Change{RunID: b.runID, TransactionID: "tx_f", From: ledger.Queued,
			To: ledger.RetryScheduled, Called: true, Throttled: true, Attempt: 1, HTTPStatus: 429, Reason: "throttled",
			RetryAfter: time.Second, Actor: "worker-1:42", At: t0.Add(10 * time.Second)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	bob := b.login(t, "bob")
	body := b.do(t, "GET", "/runs/"+b.runID.String(), bob, nil).Body.String()
	// The outcomes table's last two cells: provider calls and 429s.
	row := regexp.MustCompile(`(?s)<table class="outcomes">.*?<tbody><tr>(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("no outcomes table:\n%s", body)
	}
	cells := regexp.MustCompile(`<td[^>]*>(?:<a[^>]*>)?([^<]*)`).FindAllStringSubmatch(row[1], -1)
	cell := func(fromEnd int) string { return cells[len(cells)-fromEnd][1] }
	calls, throttles := cell(2), cell(1)
	marks := strings.Count(body, `class="mark mark-throttle"`)
	if throttles != "1" || calls != "6" || marks != 1 {
		t.Errorf("running run: 429s %s and calls %s in the table, %d throttle marks in the chart; want 1, 6 (five finished items and the throttled call) and 1",
			throttles, calls, marks)
	}
}
