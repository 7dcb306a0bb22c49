package consume_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestListModeJoinsBothWays runs a day in list mode with two consumers
// against a provider whose pages shift while listing, fail between pages,
// lag behind for some records and hold records outside the window and
// records the file lacks: every page is fetched once by the fleet, the
// listed items are judged without a call, the late ones are looked up, and
// the records the file lacks are recorded unexpected, in the completion.
func TestListModeJoinsBothWays(t *testing.T) {
	extra := []provider.Record{
		{ID: "tx_unexpected_1", AmountMinor: 1200, Currency: "EUR", Status: "succeeded"},
		{ID: "tx_unexpected_2", AmountMinor: 990, Currency: "USD", Status: "refunded"},
		{ID: "tx_unexpected_3", AmountMinor: 5, Currency: "JPY", Status: "succeeded"},
		{ID: "tx_other_day", AmountMinor: 100, Currency: "EUR", Status: "succeeded"},
	}
	b := setup(t, options{items: 700, shares: providersim.Shares{Mismatch: 0.03, Missing: 0.02}, extra: extra,
		list: providersim.ListConfig{Shift: true, Faults: 2,
			Times: map[string]time.Time{"tx_other_day": time.Date(2026, 10, 27, 12, 0, 0, 0, time.UTC)}}})
	late := map[string]bool{b.ids[3]: true, b.ids[400]: true}
	b.sim.SetLate(late)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	consumers := make([]*consume.Consumer, 2)
	for i := range consumers {
		consumers[i], _ = b.consumer(t, "", 1000, 50, consume.Config{Mode: consume.ModeList, Concurrency: 8})
	}
	for i, c := range consumers {
		wg.Go(func() { errs[i] = runWithin(t, c, time.Minute) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
	}

	for page, n := range b.sim.PageCalls() {
		if n != 1 {
			t.Errorf("page %q served %d times, want once", page, n)
		}
	}
	var listed, lookups int64
	for _, c := range consumers {
		s := c.Snapshot()
		listed += s.FromList
		lookups += s.Calls
	}
	st := b.sim.Stats()
	missing := 0
	for _, id := range b.ids {
		if b.sim.Truth(id).Outcome == ledger.Missing {
			missing++
		}
	}
	if want := int64(len(b.ids) - missing - len(late)); listed != want {
		t.Errorf("items judged from the list = %d, want %d (all but the %d missing and %d late)", listed, want, missing, len(late))
	}
	if lookups != st.Calls-st.ListCalls {
		t.Errorf("consumers counted %d lookups, the provider %d", lookups, st.Calls-st.ListCalls)
	}
	// The lookups are what the list lacks, and a second call for the
	// run's first not-found answers, which the circuit holds until the
	// run proves its URL (stop_after_not_found, 20).
	if want := int64(missing + len(late)); lookups < want || lookups > want+20 {
		t.Errorf("lookups = %d, want %d to %d: only what the list lacks", lookups, want, want+20)
	}

	ctx := context.Background()
	var states = map[string]int{}
	rows, err := b.pool.Query(ctx, `SELECT state, count(*) FROM items WHERE run_id = $1 GROUP BY state`, b.run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		states[s] = n
	}
	if states["unexpected"] != 3 {
		t.Errorf("unexpected items = %d, want the 3 the file lacks (not the record of another day): %v", states["unexpected"], states)
	}
	if states["missing"] != missing {
		t.Errorf("missing = %d, want %d", states["missing"], missing)
	}
	for _, id := range b.ids {
		want := string(b.sim.Truth(id).Outcome)
		var got string
		if err := b.pool.QueryRow(ctx, `SELECT state FROM items WHERE run_id = $1 AND transaction_id = $2`, b.run.RunID, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: %s, want %s", id, got, want)
		}
	}
	var listCalls int64
	if err := b.pool.QueryRow(ctx, `SELECT calls FROM run_listings WHERE run_id = $1`, b.run.RunID).Scan(&listCalls); err != nil {
		t.Fatal(err)
	}
	if listCalls != st.ListCalls {
		t.Errorf("the listing counted %d page calls, the provider %d (the faults between pages included)", listCalls, st.ListCalls)
	}
	var unexpected, items int
	if err := b.pool.QueryRow(ctx, `SELECT unexpected, items FROM run_completions WHERE run_id = $1`, b.run.RunID).Scan(&unexpected, &items); err != nil {
		t.Fatalf("completion: %v", err)
	}
	if unexpected != 3 || items != len(b.ids)+3 {
		t.Errorf("completion: unexpected %d items %d, want 3 and %d", unexpected, items, len(b.ids)+3)
	}
	rep, err := audit.Verify(ctx, b.pool, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Breaks) > 0 {
		t.Errorf("audit: %v", rep.Breaks)
	}
}
