package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// createRun creates generation 1 of the date with n items through the
// ledger's run functions, the way enqueue does.
func createRun(t *testing.T, pool *pgxpool.Pool, d payments.Date, n int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	runID := uuid.New()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		created, err := ledger.CreateRun(ctx, tx, ledger.NewRun{RunID: runID, ReconciliationID: "nightly-" + d.String(),
			BusinessDate: d, Generation: 1, Trigger: "manual", TriggeredBy: "test", Source: "test.csv", TimeZone: "UTC"})
		if err != nil {
			return err
		}
		if !created {
			return errors.New("run exists")
		}
		i := 0
		written, err := ledger.InsertItems(ctx, tx, runID, func() (ledger.NewItem, error) {
			if i == n {
				return ledger.NewItem{}, io.EOF
			}
			i++
			id := fmt.Sprintf("tx_%s_%d", d, i)
			return ledger.NewItem{TransactionID: id, AccountID: fmt.Sprintf("acct_%d", i%3), IdempotencyKey: "k:" + id,
				AmountMinor: 100, Currency: "EUR", Status: "succeeded", OccurredAt: d.Start(time.UTC)}, nil
		})
		if err != nil {
			return err
		}
		if err := ledger.InitCounters(ctx, tx, runID); err != nil {
			return err
		}
		return ledger.FinishRun(ctx, tx, runID, written, "sha")
	})
	if err != nil {
		t.Fatalf("create run of %s: %v", d, err)
	}
	return runID
}

func TestCreateRunOncePerDateAndGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	d := payments.Date{Year: 2026, Month: time.October, Day: 24}
	if g, err := ledger.LatestGeneration(ctx, pool, d); err != nil || g != 0 {
		t.Fatalf("LatestGeneration before any run = %d, %v; want 0", g, err)
	}
	if _, err := ledger.FindRun(ctx, pool, d, 1); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("FindRun before any run: %v, want ErrNotFound", err)
	}
	runID := createRun(t, pool, d, 5)

	created, err := ledger.CreateRun(ctx, pool, ledger.NewRun{RunID: uuid.New(), ReconciliationID: "other",
		BusinessDate: d, Generation: 1, Trigger: "manual", TriggeredBy: "test", Source: "x", TimeZone: "UTC"})
	if err != nil || created {
		t.Fatalf("second CreateRun of generation 1 = %v, %v; want false", created, err)
	}
	run, err := ledger.FindRun(ctx, pool, d, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ledger.Run{RunID: runID, ReconciliationID: "nightly-" + d.String(), Generation: 1, Items: 5, SourceSHA256: "sha"}); run != want {
		t.Errorf("FindRun = %+v, want %+v", run, want)
	}
	if g, err := ledger.LatestGeneration(ctx, pool, d); err != nil || g != 1 {
		t.Errorf("LatestGeneration = %d, %v; want 1", g, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		latest, err := ledger.LockLatestRun(ctx, tx, d)
		if err != nil {
			return err
		}
		if latest != run {
			t.Errorf("LockLatestRun = %+v, want %+v", latest, run)
		}
		if _, err := ledger.LockLatestRun(ctx, tx, d.AddDays(1)); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("LockLatestRun of a date without runs: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInsertItemsReportsADuplicateAndAReadError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	insert := func(next func() (ledger.NewItem, error)) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ledger.InsertItems(ctx, tx, uuid.New(), next)
			return err
		})
	}
	calls := 0
	err := insert(func() (ledger.NewItem, error) {
		if calls++; calls > 2 {
			return ledger.NewItem{}, io.EOF
		}
		return ledger.NewItem{TransactionID: "tx_1", AccountID: "a", IdempotencyKey: "k", AmountMinor: 1,
			Currency: "EUR", Status: "succeeded", OccurredAt: time.Now()}, nil
	})
	if !errors.Is(err, ledger.ErrDuplicateItem) {
		t.Errorf("a transaction id twice: %v, want ErrDuplicateItem", err)
	}
	broken := errors.New("broken input")
	if err := insert(func() (ledger.NewItem, error) { return ledger.NewItem{}, broken }); err != broken {
		t.Errorf("a failing source: %v, want its error as it is", err)
	}
}

func TestOpenRunsAndCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	d := payments.Date{Year: 2026, Month: time.October, Day: 24}
	runID := createRun(t, pool, d, 1)
	createRun(t, pool, d.AddDays(1), 1)
	if n, err := ledger.OpenRuns(ctx, pool); err != nil || n != 2 {
		t.Fatalf("OpenRuns = %d, %v; want 2", n, err)
	}
	c := ledger.Change{RunID: runID, TransactionID: fmt.Sprintf("tx_%s_1", d), From: ledger.Queued, To: ledger.Missing,
		Called: true, Attempt: 1, HTTPStatus: 404, Reason: "missing", Actor: "test"}
	res, err := record(ctx, pool, c)
	if err != nil || len(res.RunsCompleted) != 1 {
		t.Fatalf("record the only item: %+v, %v", res, err)
	}
	if n, err := ledger.OpenRuns(ctx, pool); err != nil || n != 1 {
		t.Errorf("OpenRuns = %d, %v; want 1", n, err)
	}
	cs, err := ledger.Completions(ctx, pool, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("Completions = %+v, want one", cs)
	}
	got := cs[0]
	if got.CompletedAt.IsZero() || got.RunID == (uuid.UUID{}) {
		t.Errorf("completion without its run or time: %+v", got)
	}
	got.Took, got.RunID, got.CompletedAt = 0, uuid.UUID{}, time.Time{}
	if want := (ledger.Completion{ReconciliationID: "nightly-" + d.String(), Round: 1, Items: 1, Missing: 1, ProviderCalls: 1,
		CompletedBy: "test"}); got != want {
		t.Errorf("Completions = %+v, want %+v", got, want)
	}
}

func TestRunProgressCountsOpenAndRecentRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	d := payments.Date{Year: 2026, Month: time.October, Day: 23}
	createRun(t, pool, d, 5)
	createRun(t, pool, d.AddDays(1), 10)
	since := time.Now().Add(-time.Hour)

	p, err := ledger.RunProgress(ctx, pool, since)
	if err != nil {
		t.Fatal(err)
	}
	if p != (ledger.Progress{Items: 15, Done: 0}) {
		t.Fatalf("fresh runs: %+v", p)
	}
	// The items of one shard of the 24th finish (the shard counts down to
	// 0); the 23rd completed before since and drops out.
	var finished int64
	if err := pool.QueryRow(ctx, `
		WITH s AS (SELECT run_id, min(shard) AS shard FROM items JOIN runs USING (run_id)
		            WHERE business_date = '2026-10-24' GROUP BY run_id)
		UPDATE run_shards rs SET remaining = 0 FROM s
		 WHERE rs.run_id = s.run_id AND rs.shard = s.shard
		RETURNING (SELECT count(*) FROM items i WHERE i.run_id = s.run_id AND i.shard = s.shard)`).Scan(&finished); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE runs SET completed_at = $1 WHERE business_date = '2026-10-23'`, since.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	p, err = ledger.RunProgress(ctx, pool, since)
	if err != nil {
		t.Fatal(err)
	}
	if p != (ledger.Progress{Items: 10, Done: finished}) || finished == 0 {
		t.Fatalf("after progress: %+v, want %d of 10 done", p, finished)
	}
}

// TestCompletionsShowTheLatestRound completes a run with a dead letter,
// requeues it and completes it again: Completions gives the second round's
// totals (no dead letter, two calls), and only for runs completed since the
// time asked for.
func TestCompletionsShowTheLatestRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	d := payments.Date{Year: 2026, Month: time.October, Day: 20}
	old := createRun(t, pool, d.AddDays(-1), 1)
	runID := createRun(t, pool, d, 1)
	t1 := time.Date(2026, 10, 21, 2, 0, 0, 0, time.UTC)
	id := func(run payments.Date) string { return fmt.Sprintf("tx_%s_1", run) }
	if _, err := record(ctx, pool, ledger.Change{RunID: old, TransactionID: id(d.AddDays(-1)), From: ledger.Queued,
		To: ledger.Matched, Called: true, Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "test", At: t1}); err != nil {
		t.Fatal(err)
	}
	if _, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: id(d), From: ledger.Queued, To: ledger.DeadLettered,
		Called: true, Attempt: 1, HTTPStatus: 400, Reason: "http_400", Actor: "test", At: t1}); err != nil {
		t.Fatal(err)
	}
	t2 := t1.Add(time.Hour)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.Requeue(ctx, tx, runID, []string{id(d)}, "redrive", "alice@host", t2)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := ledger.Completions(ctx, pool, t2); err != nil || len(cs) != 0 {
		t.Fatalf("Completions while the redriven run is open: %+v, %v; want none", cs, err)
	}
	if _, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: id(d), From: ledger.Queued, To: ledger.Matched,
		Called: true, Attempt: 2, HTTPStatus: 200, Reason: "matched", Actor: "test", At: t2.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	cs, err := ledger.Completions(ctx, pool, t2)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].RunID != runID {
		t.Fatalf("Completions since the redrive = %+v, want the redriven run only", cs)
	}
	if c := cs[0]; c.Round != 2 || c.Matched != 1 || c.DeadLettered != 0 || !c.CompletedAt.Equal(t2.Add(time.Minute)) {
		t.Errorf("latest completion = %+v, want round 2: 1 matched, no dead letter, at %s", c, t2.Add(time.Minute))
	}
	if cs, err := ledger.Completions(ctx, pool, time.Time{}); err != nil || len(cs) != 2 {
		t.Errorf("Completions of all time = %+v, %v; want both runs", cs, err)
	}
}
