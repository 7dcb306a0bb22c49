package consume_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

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
	b.wantCompletion(t, 3)
	b.wantAuditClean(t)
}

// TestListModeJudgesStoredPagesWhileListing checks that list mode judges
// the items of each stored page while later pages are still being fetched,
// and that the run still completes only once the listing has ended: its
// last pages hold only records the file lacks, so every item of the file is
// judged before them, and the completion must count those records as
// unexpected all the same.
func TestListModeJudgesStoredPagesWhileListing(t *testing.T) {
	const unbooked = 150 // a page and a half after the file's 300 payments
	extra := make([]provider.Record, unbooked)
	times := map[string]time.Time{}
	for i := range extra {
		extra[i] = provider.Record{ID: fmt.Sprintf("tx_unbooked_%03d", i), AmountMinor: int64(100 + i), Currency: "EUR", Status: "succeeded"}
		times[extra[i].ID] = time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC) // made after every payment of the file
	}
	b := setup(t, options{items: 300, extra: extra, list: providersim.ListConfig{Times: times}})
	// Four pages a second: the listing takes more than a second, far
	// longer than judging a page.
	c, _ := b.consumer(t, "", 4, 1, consume.Config{Mode: consume.ModeList, Concurrency: 8})
	if err := runWithin(t, c, time.Minute); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	var before, matched int
	if err := b.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE i.terminal_at < l.finished_at), count(*) FILTER (WHERE i.state = 'matched')
		  FROM items i JOIN run_listings l USING (run_id)
		 WHERE i.run_id = $1 AND i.state <> 'unexpected'`, b.run.RunID).Scan(&before, &matched); err != nil {
		t.Fatal(err)
	}
	if matched != len(b.ids) {
		t.Errorf("%d of %d items matched, want all", matched, len(b.ids))
	}
	if s := c.Snapshot(); s.FromList != int64(len(b.ids)) || s.Calls != 0 {
		t.Errorf("%d items judged from the list and %d lookups, want %d and none", s.FromList, s.Calls, len(b.ids))
	}
	if before < 200 {
		t.Errorf("%d of %d items judged before the listing ended, want at least the first two pages' 200", before, len(b.ids))
	}
	var unexpected, total int
	var completed, finished time.Time
	if err := b.pool.QueryRow(ctx, `
		SELECT c.unexpected, c.items, c.completed_at, l.finished_at
		  FROM run_completions c JOIN run_listings l USING (run_id) WHERE c.run_id = $1`, b.run.RunID).
		Scan(&unexpected, &total, &completed, &finished); err != nil {
		t.Fatalf("completion: %v", err)
	}
	if unexpected != unbooked || total != len(b.ids)+unbooked {
		t.Errorf("completion: unexpected %d of %d items, want %d of %d", unexpected, total, unbooked, len(b.ids)+unbooked)
	}
	if completed.Before(finished) {
		t.Errorf("run completed at %s, before its listing ended at %s", completed, finished)
	}
	// The provider's totals and the breakdown carry the unexpected
	// records, with the provider's amounts at stake.
	totals, err := ledger.ProviderTotals(ctx, b.pool, b.run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(totals) != 1 || totals[0].Unexpected != unbooked || totals[0].Items != len(b.ids)+unbooked || totals[0].Open != 0 {
		t.Errorf("provider totals %+v, want %d unexpected of %d items", totals, unbooked, len(b.ids)+unbooked)
	}
	bds, err := ledger.Breakdowns(ctx, b.pool, []uuid.UUID{b.run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	var n, minor int64
	for _, bd := range bds {
		if bd.Currency == "EUR" {
			n, minor = n+bd.Unexpected, minor+bd.UnexpectedMinor
		}
	}
	// The unbooked records' amounts are 100 to 249 cents.
	if wantMinor := int64(unbooked*100 + unbooked*(unbooked-1)/2); n != unbooked || minor != wantMinor {
		t.Errorf("breakdown: %d unexpected EUR records of %d cents, want %d of %d", n, minor, unbooked, wantMinor)
	}
	b.wantAuditClean(t)
}

// TestConsumersFollowTheRunsCheckMode starts a consumer in list mode on a
// run and, once it is listing, a consumer in lookup mode: the second
// follows the run's mode (chosen by the first to claim it), says so in its
// log, and makes no lookup, so it cannot complete by lookups the run the
// first is listing. Without that, it looks up the items it claims while
// the listing goes on.
func TestConsumersFollowTheRunsCheckMode(t *testing.T) {
	const unbooked = 20
	extra := make([]provider.Record, unbooked)
	for i := range extra {
		extra[i] = provider.Record{ID: fmt.Sprintf("tx_unbooked_%03d", i), AmountMinor: 100, Currency: "EUR", Status: "succeeded"}
	}
	b := setup(t, options{items: 400, extra: extra})
	// Ten pages a second: five pages take half a second, and the lookups
	// of a consumer that did not follow the run would share the pace.
	lister, _ := b.consumer(t, "", 10, 1, consume.Config{Mode: consume.ModeList, Concurrency: 4})
	logs := &logBuffer{}
	looker, _ := b.consumer(t, "", 10, 1, consume.Config{Mode: consume.ModeLookup, Concurrency: 4,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	ctx := context.Background()
	var wg sync.WaitGroup
	var listErr error
	wg.Go(func() { listErr = runWithin(t, lister, time.Minute) })
	for deadline := time.Now().Add(30 * time.Second); ; {
		var listing bool
		if err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM run_listings WHERE run_id = $1)`, b.run.RunID).Scan(&listing); err != nil {
			t.Fatal(err)
		}
		if listing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the list-mode consumer did not start listing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := runWithin(t, looker, time.Minute); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if listErr != nil {
		t.Fatal(listErr)
	}

	if st := b.sim.Stats(); st.Calls != st.ListCalls {
		t.Errorf("%d lookups while the run was listed, want none", st.Calls-st.ListCalls)
	}
	if got := logs.lines("following the run's check mode"); len(got) != 1 || !strings.Contains(got[0], "run_mode=list") ||
		!strings.Contains(got[0], "own_mode=lookup") {
		t.Errorf("the lookup-mode consumer's log lines about the run's mode: %q, want one saying it follows list mode", got)
	}
	b.wantCompletion(t, unbooked)
	b.wantAuditClean(t)
}

// wantCompletion checks the run's completion record: the file's items and
// unexpected ones the file lacks.
func (b *testBundle) wantCompletion(t *testing.T, unexpected int) {
	t.Helper()
	var got, items int
	if err := b.pool.QueryRow(context.Background(), `SELECT unexpected, items FROM run_completions WHERE run_id = $1`, b.run.RunID).
		Scan(&got, &items); err != nil {
		t.Fatalf("completion: %v", err)
	}
	if got != unexpected || items != len(b.ids)+unexpected {
		t.Errorf("completion: unexpected %d of %d items, want %d of %d", got, items, unexpected, len(b.ids)+unexpected)
	}
}

// wantAuditClean checks the ledger's hash chains and counters.
func (b *testBundle) wantAuditClean(t *testing.T) {
	t.Helper()
	rep, err := audit.Verify(context.Background(), b.pool, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Breaks) > 0 {
		t.Errorf("audit: %v", rep.Breaks)
	}
}
