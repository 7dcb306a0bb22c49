package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// nightOfEveryState records 60 items of two providers into every state:
// matches, mismatches, missing items, dead letters, retries after a
// throttle, items never called, and a dead letter requeued after a second
// call. It returns the run.
func nightOfEveryState(t *testing.T, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	runID := seedRun(t, pool, 60, 7)
	at := mustTime(t)
	var first []ledger.Change
	for i := range 50 { // ten stay queued
		c := ledger.Change{RunID: runID, TransactionID: fmt.Sprintf("tx%05d", i), From: ledger.Queued, Called: true,
			Attempt: 1, HTTPStatus: 200, Actor: "test", At: at.Add(time.Duration(i) * time.Second)}
		switch i % 5 {
		case 0, 1:
			c.To, c.Reason = ledger.Matched, "matched"
		case 2:
			c.To, c.Reason = ledger.Mismatched, "mismatched"
			c.Provider = &ledger.Provider{AmountMinor: 1, Currency: "EUR", Status: "refunded"}
			c.Differences = []ledger.Difference{{Field: "status", Expected: "succeeded", Provider: "refunded"},
				{Field: "amount_minor", Expected: fmt.Sprint(100 + i), Provider: "1"}}
		case 3:
			c.To, c.Reason, c.HTTPStatus = ledger.Missing, "missing", 404
		case 4:
			if i%10 == 4 {
				c.To, c.Reason, c.HTTPStatus, c.Details = ledger.DeadLettered, "http_400", 400, map[string]any{"detail": "bad id"}
			} else {
				c.To, c.Reason, c.HTTPStatus, c.Throttled = ledger.RetryScheduled, "throttled", 429, true
			}
		}
		first = append(first, c)
	}
	if _, err := recordBatch(ctx, pool, first); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.Requeue(ctx, tx, runID, []string{"tx00004"}, "redrive", "ops", at.Add(time.Hour))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return runID
}

// viewSummary reads a run's live counts from the run_summary view, which
// counts its items.
func viewSummary(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID) ledger.Summary {
	t.Helper()
	var s ledger.Summary
	if err := pool.QueryRow(context.Background(), `
		SELECT queued, retry_scheduled, matched, mismatched, missing, dead_lettered, cancelled, open_items,
		       provider_calls, throttles
		  FROM run_summary WHERE run_id = $1`, runID).Scan(&s.Queued, &s.RetryScheduled, &s.Matched, &s.Mismatched,
		&s.Missing, &s.DeadLettered, &s.Cancelled, &s.Open, &s.ProviderCalls, &s.Throttles); err != nil {
		t.Fatal(err)
	}
	return s
}

// counts keeps a summary's counts only.
func counts(s ledger.Summary) ledger.Summary {
	return ledger.Summary{Queued: s.Queued, RetryScheduled: s.RetryScheduled, Matched: s.Matched, Mismatched: s.Mismatched,
		Missing: s.Missing, DeadLettered: s.DeadLettered, Cancelled: s.Cancelled, Open: s.Open,
		ProviderCalls: s.ProviderCalls, Throttles: s.Throttles}
}

// itemTotals counts a run's items by provider straight from the items.
func itemTotals(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID) []ledger.ProviderTotal {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT provider, count(*),
		       count(*) FILTER (WHERE state = 'matched'), count(*) FILTER (WHERE state = 'mismatched'),
		       count(*) FILTER (WHERE state = 'missing'), count(*) FILTER (WHERE state = 'dead_lettered'),
		       count(*) FILTER (WHERE state = 'unexpected'), count(*) FILTER (WHERE state IN ('queued', 'retry_scheduled')),
		       coalesce(sum(attempts), 0), coalesce(sum(throttles), 0)
		  FROM items WHERE run_id = $1
		 GROUP BY provider ORDER BY provider`, runID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ledger.ProviderTotal])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSummariesAgreeWithTheItems checks the counters' summaries against
// counts of the items (the run_summary view), for an open run of every state
// and two providers, again after calls that leave items open (a second
// throttle of a retry, a retry's call that schedules another) and once it
// completed: the summary equals the count and the totals by provider equal
// a count of the items by provider.
func TestSummariesAgreeWithTheItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := nightOfEveryState(t, pool)

	check := func(stage string) ledger.Summary {
		t.Helper()
		s, err := ledger.FindSummary(ctx, pool, ledger.RunFilter{RunID: runID})
		if err != nil {
			t.Fatal(err)
		}
		if want := viewSummary(t, pool, runID); counts(s) != want {
			t.Errorf("%s: summary %+v, items say %+v", stage, counts(s), want)
		}
		totals, err := ledger.ProviderTotals(ctx, pool, runID)
		if err != nil {
			t.Fatal(err)
		}
		if want := itemTotals(t, pool, runID); fmt.Sprint(totals) != fmt.Sprint(want) {
			t.Errorf("%s: totals by provider %+v, items say %+v", stage, totals, want)
		}
		return s
	}
	open := check("open")
	if open.Queued != 11 || open.RetryScheduled != 5 || open.Completion != nil || open.Items != 60 {
		t.Fatalf("open run: %+v", open)
	}

	retries := mustItemsOf(t, pool, runID, ledger.RetryScheduled)
	again := []ledger.Change{
		{RunID: runID, TransactionID: retries[0].TransactionID, From: ledger.RetryScheduled, To: ledger.RetryScheduled,
			Called: true, Throttled: true, Attempt: retries[0].Attempts + 1, HTTPStatus: 429, Reason: "throttled", Actor: "test"},
		{RunID: runID, TransactionID: retries[1].TransactionID, From: ledger.RetryScheduled, To: ledger.Queued,
			Called: true, Attempt: retries[1].Attempts + 1, HTTPStatus: 503, Reason: "http_503", Actor: "test"},
	}
	if _, err := recordBatch(ctx, pool, again); err != nil {
		t.Fatal(err)
	}
	if s := check("called again"); s.Queued != 12 || s.RetryScheduled != 4 || s.ProviderCalls != open.ProviderCalls+2 ||
		s.Throttles != open.Throttles+1 {
		t.Errorf("after two more calls: %+v, before %+v", counts(s), counts(open))
	}

	matchTheRest(t, pool, runID)
	done := check("complete")
	if done.Open != 0 || done.CompletedAt == nil || done.Completion == nil || done.Completion.Round != 1 ||
		int64(done.Completion.Matched) != done.Matched || done.Completion.ProviderCalls != done.ProviderCalls {
		t.Errorf("complete run: %+v, completion %+v", counts(done), done.Completion)
	}
}

// matchTheRest completes a run: its open items match.
func matchTheRest(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID) {
	t.Helper()
	var rest []ledger.Change
	for _, it := range mustItemsOf(t, pool, runID, ledger.Queued, ledger.RetryScheduled) {
		rest = append(rest, ledger.Change{RunID: runID, TransactionID: it.TransactionID, From: it.State, To: ledger.Matched,
			Called: true, Attempt: it.Attempts + 1, HTTPStatus: 200, Reason: "matched", Actor: "test"})
	}
	if _, err := recordBatch(context.Background(), pool, rest); err != nil {
		t.Fatal(err)
	}
}

func mustItemsOf(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID, states ...ledger.State) []ledger.Item {
	t.Helper()
	items, err := ledger.ItemsOf(context.Background(), pool, runID, states...)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestSummariesSelectRuns checks the run filters: by date and generation,
// the open runs and the latest date's, those completed since an instant,
// and keyset pages newest first.
func TestSummariesSelectRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	d := payments.Date{Year: 2026, Month: time.October, Day: 20}
	var ids []uuid.UUID
	for i := range 4 {
		ids = append(ids, createRun(t, pool, d.AddDays(i), 2))
	}
	// The 21st completed long ago, the 22nd recently; the 20th and 23rd are open.
	long, recent := time.Now().Add(-48*time.Hour), time.Now().Add(-time.Minute)
	if _, err := pool.Exec(ctx, `UPDATE runs SET completed_at = CASE run_id WHEN $1 THEN $3::timestamptz ELSE $4 END
		WHERE run_id IN ($1, $2)`, ids[1], ids[2], long, recent); err != nil {
		t.Fatal(err)
	}
	names := func(f ledger.RunFilter) string {
		t.Helper()
		ss, err := ledger.Summaries(ctx, pool, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range ss {
			out = append(out, s.BusinessDate.String())
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		name string
		f    ledger.RunFilter
		want string
	}{
		{"every run", ledger.RunFilter{}, "[2026-10-20 2026-10-21 2026-10-22 2026-10-23]"},
		{"a date", ledger.RunFilter{Date: d.AddDays(1)}, "[2026-10-21]"},
		{"a date's generation", ledger.RunFilter{Date: d.AddDays(1), Generation: 2}, "[]"},
		{"open or latest", ledger.RunFilter{OpenOrLatestDate: true}, "[2026-10-20 2026-10-23]"},
		{"completed since", ledger.RunFilter{CompletedSince: time.Now().Add(-time.Hour)}, "[2026-10-20 2026-10-22 2026-10-23]"},
		{"newest page", ledger.RunFilter{NewestFirst: true, Limit: 2}, "[2026-10-23 2026-10-22]"},
		{"the next page", ledger.RunFilter{NewestFirst: true, Limit: 2, Before: &ledger.RunKey{Date: d.AddDays(2), Generation: 1}},
			"[2026-10-21 2026-10-20]"},
	} {
		if got := names(c.f); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if _, err := ledger.FindSummary(ctx, pool, ledger.RunFilter{RunID: uuid.New()}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an unknown run: %v, want ErrNotFound", err)
	}

	for name, want := range map[string]uuid.UUID{"nightly-2026-10-22": ids[2], ids[3].String(): ids[3]} {
		if got, err := ledger.ResolveRun(ctx, pool, name); err != nil || got != want {
			t.Errorf("ResolveRun(%s) = %s, %v; want %s", name, got, err, want)
		}
	}
	if _, err := ledger.ResolveRun(ctx, pool, "nightly-1999-01-01"); err == nil {
		t.Error("ResolveRun of an unknown run: no error")
	}
	if got, err := ledger.RunsCompletedBefore(ctx, pool, time.Now().Add(-time.Hour)); err != nil || fmt.Sprint(got) != fmt.Sprint(ids[1:2]) {
		t.Errorf("RunsCompletedBefore = %v, %v; want %v", got, err, ids[1:2])
	}
	has, err := ledger.DatesWithRuns(ctx, pool, []payments.Date{d, d.AddDays(-1), d.AddDays(3)})
	if err != nil || len(has) != 2 || !has[d] || !has[d.AddDays(3)] {
		t.Errorf("DatesWithRuns = %v, %v", has, err)
	}
	for limit, want := range map[int]int64{2: 3, 10: 4} {
		if n, err := ledger.CountRuns(ctx, pool, limit); err != nil || n != want {
			t.Errorf("CountRuns(%d) = %d, %v; want %d", limit, n, err, want)
		}
	}
}

// TestItemReads checks the item reads of a run of every state: one item
// whole, the items of some states, windows with filters, dead letters with
// their last transition, and the runs holding a transaction.
func TestItemReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := nightOfEveryState(t, pool)

	it, err := ledger.FindItem(ctx, pool, runID, "tx00002")
	if err != nil {
		t.Fatal(err)
	}
	if it.State != ledger.Mismatched || it.Reported == nil || it.Reported.Status != "refunded" || len(it.Differences) != 2 ||
		it.LastHTTPStatus != 200 || it.LastReason != "mismatched" || it.TerminalAt.IsZero() || it.FirstAttemptAt.IsZero() ||
		it.Provider != "" || it.Currency != "JPY" || it.IdempotencyKey != "k:"+runID.String()+":tx00002" {
		t.Errorf("mismatched item: %+v", it)
	}
	if q, err := ledger.FindItem(ctx, pool, runID, "tx00057"); err != nil || q.State != ledger.Queued || q.Reported != nil ||
		q.LastHTTPStatus != 0 || !q.TerminalAt.IsZero() || q.Provider != "stripe" {
		t.Errorf("queued item: %+v, %v", q, err)
	}
	if _, err := ledger.FindItem(ctx, pool, runID, "nope"); err == nil {
		t.Error("FindItem of an unknown item: no error")
	}
	if n := len(mustItemsOf(t, pool, runID, ledger.Missing)); n != 10 {
		t.Errorf("%d missing items, want 10", n)
	}
	if n := len(mustItemsOf(t, pool, runID)); n != 60 {
		t.Errorf("%d items, want 60", n)
	}

	// The first 20 items hold 4 mismatches; of account acc002, one
	// (tx00002 is account 2 of 7).
	w := ledger.ItemWindow{RunID: runID, Window: 20, States: []ledger.State{ledger.Mismatched}}
	page, err := ledger.Window(ctx, pool, w)
	if err != nil || len(page.Items) != 4 || page.Scanned != 20 || page.Last != "tx00019" {
		t.Errorf("window: %d items, %d scanned to %s, %v", len(page.Items), page.Scanned, page.Last, err)
	}
	w.Account, w.Field = "acc002", "status"
	if page, err = ledger.Window(ctx, pool, w); err != nil || len(page.Items) != 1 || page.Items[0].TransactionID != "tx00002" {
		t.Errorf("window of acc002: %+v, %v", page, err)
	}
	w.Account, w.After, w.Provider = "", "tx00055", new("stripe")
	if page, err = ledger.Window(ctx, pool, w); err != nil || len(page.Items) != 0 || page.Scanned != 4 || page.Last != "tx00059" {
		t.Errorf("window at the end: %+v, %v", page, err)
	}

	dead, err := ledger.DeadLetters(ctx, pool, ledger.DeadLetterFilter{RunID: runID})
	if err != nil || len(dead) != 4 || dead[0].TransactionID != "tx00014" || dead[0].Reason != "http_400" ||
		dead[0].HTTPStatus != 400 || dead[0].Detail != "bad id" || dead[0].At.IsZero() {
		t.Fatalf("dead letters: %+v, %v", dead, err)
	}
	// By id, in the given order, whatever the state (tx00004 was requeued),
	// filtered by amount.
	byID, err := ledger.DeadLetters(ctx, pool, ledger.DeadLetterFilter{RunID: runID,
		TransactionIDs: []string{"tx00034", "tx00004", "tx00014"}, MinAmount: new(int64(110))})
	if err != nil || len(byID) != 2 || byID[0].TransactionID != "tx00034" || byID[1].Reason != "http_400" ||
		byID[1].TransactionID != "tx00014" {
		t.Errorf("dead letters by id: %+v, %v", byID, err)
	}

	// Another run holds tx00001 too.
	other := uuid.New()
	if _, err := pool.Exec(ctx, `
		WITH r AS (INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source,
		                             source_sha256, time_zone, item_count)
		           VALUES ($1, 'nightly-2026-10-25', '2026-10-25', 1, 'manual', 'test', 'test', '', 'UTC', 1))
		INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard)
		VALUES ($1, 'tx00001', 'acc', 'k', 1, 'EUR', 'succeeded', now(), 0)`, other); err != nil {
		t.Fatal(err)
	}
	got, err := ledger.RunsOfTransaction(ctx, pool, "tx00001", runID, 10)
	if err != nil || len(got) != 1 || got[0].RunID != other || got[0].State != ledger.Queued {
		t.Errorf("runs of tx00001: %+v, %v", got, err)
	}
}

// TestTransitionReads checks the reads of a run's transitions against its
// history: the span, the bins, the samples and the stream.
func TestTransitionReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := nightOfEveryState(t, pool)

	span, ok, err := ledger.TransitionSpan(ctx, pool, runID)
	if err != nil || !ok || span.LastID-span.FirstID != 50 || !span.Last.After(span.First) {
		t.Fatalf("span %+v, %v, %v", span, ok, err)
	}
	bins, err := ledger.Traffic(ctx, pool, runID, span.First, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var calls, throttles, done int64
	for _, b := range bins {
		calls, throttles, done = calls+b.Calls, throttles+b.Throttles, done+b.Done
	}
	// 50 calls, 5 of them throttled, 45 of them finishing an item; the
	// redrive is no call.
	if calls != 50 || throttles != 5 || done != 45 || len(bins) != 2 {
		t.Errorf("%d bins: %d calls, %d throttles, %d done", len(bins), calls, throttles, done)
	}
	sampled, err := ledger.SampleTraffic(ctx, pool, runID, span.FirstID, 10, 3, 2)
	if err != nil || len(sampled) != 6 || sampled[2].Probe != 1 || sampled[2].ID != span.FirstID+10 || !sampled[0].Call {
		t.Errorf("samples: %+v, %v", sampled, err)
	}
	var n int
	var last ledger.Transition
	err = ledger.EachTransition(ctx, pool, runID, func(tr ledger.Transition) error {
		n++
		last = tr
		return nil
	})
	if err != nil || n != 51 || last.TransactionID != "tx00004" || last.To != ledger.Queued || last.Reason != "redrive" ||
		last.Seq != 2 || len(last.Hash) != 32 || len(last.PrevHash) != 32 {
		t.Errorf("%d transitions, the last %+v, %v", n, last, err)
	}
}

// TestRunsAreReadFromTheirCounters checks that a run's figures, in total
// and by provider, open or complete, are read from its counter rows and
// never from its items or transitions, which grow with the night and with
// every night kept. The scans are counted by the
// connection's own statistics (pg_stat_xact_user_tables, which also holds
// what the connection has not reported yet: hence the difference within one
// transaction), so other tests do not count.
func TestRunsAreReadFromTheirCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := nightOfEveryState(t, pool)

	// scans reads the run's summaries and totals by provider and returns
	// how often that scanned items and transitions.
	scans := func() (items, transitions int64) {
		t.Helper()
		count := func(tx pgx.Tx) (items, transitions int64, err error) {
			err = tx.QueryRow(ctx, `
				SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)) FILTER (WHERE relname = 'items'), 0),
				       coalesce(sum(seq_scan + coalesce(idx_scan, 0)) FILTER (WHERE relname = 'transitions'), 0)
				  FROM pg_stat_xact_user_tables`).Scan(&items, &transitions)
			return items, transitions, err
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			items0, transitions0, err := count(tx)
			if err != nil {
				return err
			}
			if _, err := ledger.FindSummary(ctx, tx, ledger.RunFilter{RunID: runID}); err != nil {
				return err
			}
			if _, err := ledger.Summaries(ctx, tx, ledger.RunFilter{OpenOrLatestDate: true}); err != nil {
				return err
			}
			if _, err := ledger.ProviderTotals(ctx, tx, runID); err != nil {
				return err
			}
			items, transitions, err = count(tx)
			items, transitions = items-items0, transitions-transitions0
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return items, transitions
	}
	if items, transitions := scans(); items != 0 || transitions != 0 {
		t.Errorf("an open run's figures scanned items %d times and transitions %d times, want neither", items, transitions)
	}

	matchTheRest(t, pool, runID)
	if items, transitions := scans(); items != 0 || transitions != 0 {
		t.Errorf("a complete run's figures scanned items %d times and transitions %d times, want neither", items, transitions)
	}
}
