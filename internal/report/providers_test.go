package report_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/report"
)

// TestStatusAndReportByProvider enqueues a night of two providers, opens
// one provider's circuit as a consumer records it, and checks that status
// and report show the providers' limiters, circuits and totals.
func TestStatusAndReportByProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	const night = "transaction_id,account_id,amount_minor,currency,status,occurred_at,provider\n" +
		"tx_a,acc_1,1000,EUR,succeeded,2026-10-24T08:00:00Z,cards\n" +
		"tx_b,acc_1,1500,EUR,succeeded,2026-10-24T09:00:00Z,wallet\n" +
		"tx_c,acc_2,250,USD,succeeded,2026-10-24T10:00:00Z,\n"
	enq, err := enqueue.New(pool, enqueue.Config{Queue: queue.New(pool, queue.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	d := payments.Date{Year: 2026, Month: 10, Day: 24}
	if _, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: "night.csv", Providers: []string{"cards", "wallet"}, DefaultProvider: "cards",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(night)), nil }}); err != nil {
		t.Fatal(err)
	}
	if err := limiter.SaveSettings(ctx, pool, "provider:wallet", limiter.Settings{Rate: 30, Burst: 3}, limiter.SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO provider_circuits (provider, url, open, opened_at, cause, next_probe_at, probes, failures, changed_at, changed_by)
		VALUES ('wallet', 'https://wallet.example', true, $1, 'connection refused', $1::timestamptz + interval '8 seconds', 3, 7, $1, 'host:1')`, t0); err != nil {
		t.Fatal(err)
	}
	st, err := report.LoadStatus(ctx, pool, report.StatusOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"limiter provider:wallet: configured 30/s (burst 3)",
		"provider wallet (https://wallet.example): CIRCUIT OPEN since 2026-10-25T02:00:00Z (connection refused): calls stopped, 3 probes, 7 failures, next probe 2026-10-25T02:00:08Z",
		"  provider cards: 2 items: 0 matched, 0 mismatched, 0 missing, 0 dead-lettered, 2 open",
		"  provider wallet: 1 items:",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, text.String())
		}
	}
	rep, err := report.Load(ctx, pool, report.Options{Date: d})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Providers) != 2 || rep.Providers[0].Provider != "cards" || rep.Providers[0].Items != 2 || rep.Providers[1].Items != 1 {
		t.Errorf("report by provider: %+v", rep.Providers)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "provider wallet: 1 items") {
		t.Errorf("report table lacks the providers:\n%s", table.String())
	}
}

// TestStatusPenaltyOnTheDatabaseClock checks that status says the limiter
// is paused by the database's clock, whatever the local one says: a penalty
// ended by the database's clock is not shown to a status whose clock is an
// hour behind, and one running is shown to a status an hour ahead, with
// what is left of it.
func TestStatusPenaltyOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	if err := limiter.SaveSettings(ctx, pool, limiter.DefaultName, limiter.Settings{Rate: 30, Burst: 3}, limiter.SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		ends   string // penalty_until against the database's clock
		skew   time.Duration
		paused bool
	}{
		{"ended, local clock behind", "-10 seconds", -time.Hour, false},
		{"running, local clock ahead", "30 seconds", time.Hour, true},
	} {
		if _, err := pool.Exec(ctx, `UPDATE rate_limiters SET penalty_until = clock_timestamp() + $1::interval WHERE name = $2`,
			tc.ends, limiter.DefaultName); err != nil {
			t.Fatal(err)
		}
		st, err := report.LoadStatus(ctx, pool, report.StatusOptions{Now: dbNow.Add(tc.skew)})
		if err != nil {
			t.Fatal(err)
		}
		l := st.Limiter
		if (l.PenaltyUntil != nil) != tc.paused || tc.paused && (l.PenaltySeconds < 25 || l.PenaltySeconds > 30) {
			t.Errorf("%s: penalty until %v, %.1f s left; want paused %v with 25-30 s left", tc.name, l.PenaltyUntil, l.PenaltySeconds, tc.paused)
		}
	}
}
