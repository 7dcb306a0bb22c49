package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// seedRun creates a run of n items spread over the given number of accounts.
func seedRun(t testing.TB, pool *pgxpool.Pool, n, accounts int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	runID := uuid.New()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count)
			VALUES ($1::uuid, 'nightly-' || $1::uuid::text, '2026-10-24', 1, 'manual', 'test', 'test', '', 'UTC', $2)`, runID, n); err != nil {
			return err
		}
		rows := make([][]any, n)
		for i := range rows {
			id := fmt.Sprintf("tx%05d", i)
			rows[i] = []any{runID, id, fmt.Sprintf("acc%03d", i%accounts), "k:" + runID.String() + ":" + id,
				int64(100 + i), []string{"EUR", "USD", "JPY"}[i%3], "succeeded", mustTime(t), ledger.ShardOf(id),
				[]string{"", "stripe"}[i/3%2]}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"items"},
			[]string{"run_id", "transaction_id", "account_id", "idempotency_key", "amount_minor", "currency", "status", "occurred_at", "shard", "provider"},
			pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		return ledger.InitCounters(ctx, tx, runID)
	})
	if err != nil {
		t.Fatalf("seed run: %v", err)
	}
	return runID
}

// record applies one change in its own transaction.
func record(ctx context.Context, pool *pgxpool.Pool, c ledger.Change) (ledger.Result, error) {
	return recordBatch(ctx, pool, []ledger.Change{c})
}

func TestRecordIsConditional(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := seedRun(t, pool, 2, 1)

	c := ledger.Change{RunID: runID, TransactionID: "tx00000", From: ledger.Queued, To: ledger.Matched,
		Called: true, Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "test",
		Provider: &ledger.Provider{AmountMinor: 100, Currency: "EUR", Status: "succeeded"}}
	if _, err := record(ctx, pool, c); err != nil {
		t.Fatal(err)
	}
	// A duplicate delivery that saw the item queued must not record again.
	c.To, c.Reason = ledger.Mismatched, "mismatched"
	if _, err := record(ctx, pool, c); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("second terminal change: err = %v, want ErrConflict", err)
	}
	var state string
	var transitions, attempts int
	if err := pool.QueryRow(ctx, `SELECT state, attempts, (SELECT count(*) FROM transitions WHERE transaction_id = 'tx00000')
		FROM items WHERE transaction_id = 'tx00000'`).Scan(&state, &attempts, &transitions); err != nil {
		t.Fatal(err)
	}
	if state != "matched" || attempts != 1 || transitions != 1 {
		t.Fatalf("state=%s attempts=%d transitions=%d, want matched 1 1", state, attempts, transitions)
	}
}

func TestRecordRefusesLeavingATerminalState(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	runID := seedRun(t, pool, 1, 1)
	_, err := record(context.Background(), pool, ledger.Change{RunID: runID, TransactionID: "tx00000",
		From: ledger.DeadLettered, To: ledger.Matched, Reason: "x", Actor: "test"})
	if err == nil || errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("err = %v, want a refusal", err)
	}
}

// TestCompletionJoinExactlyOnce drives every item of a run to a terminal state
// from many concurrent transactions and checks that the run and each account
// get exactly one completion record whose totals equal a direct count.
func TestCompletionJoinExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	const n, accounts, workers = 1200, 7, 12
	runID := seedRun(t, pool, n, accounts)

	outcomes := []ledger.State{ledger.Matched, ledger.Mismatched, ledger.Missing, ledger.DeadLettered}
	next := atomic.Int64{}
	var join joinCounter
	drive(t, workers, func(rnd *rand.Rand) error {
		for {
			i := next.Add(1) - 1
			if i >= n {
				return nil
			}
			id := fmt.Sprintf("tx%05d", i)
			// Some items take a retry first, so both kinds of change interleave.
			from := ledger.Queued
			if rnd.IntN(4) == 0 {
				if _, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: id, From: ledger.Queued,
					To: ledger.RetryScheduled, Called: true, Attempt: 1, HTTPStatus: 503, Reason: "http_503", Actor: "test"}); err != nil {
					return err
				}
				from = ledger.RetryScheduled
			}
			res, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: id, From: from,
				To: outcomes[rnd.IntN(len(outcomes))], Called: true, Attempt: 2, Reason: "test", Actor: "test"})
			if err != nil {
				return err
			}
			join.add(res)
		}
	})
	join.check(t, accounts)
	assertCompletionTotals(t, pool, runID, accounts, 1)
}

// drive runs work on the given number of goroutines, each with its own
// random source, and fails the test with the first error any returns.
func drive(t *testing.T, workers int, work func(rnd *rand.Rand) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(rand.New(rand.NewPCG(uint64(w), 1))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// joinCounter adds up the completions that concurrent recorders report.
type joinCounter struct {
	runs, accounts atomic.Int64
}

func (j *joinCounter) add(res ledger.Result) {
	j.runs.Add(int64(len(res.RunsCompleted)))
	j.accounts.Add(int64(res.AccountsCompleted))
}

// check expects one run completion and one per account.
func (j *joinCounter) check(t *testing.T, accounts int) {
	t.Helper()
	if got := j.runs.Load(); got != 1 {
		t.Errorf("run completed %d times, want 1", got)
	}
	if got := j.accounts.Load(); got != int64(accounts) {
		t.Errorf("accounts completed %d times, want %d", got, accounts)
	}
}

// assertCompletionTotals checks the run's and every account's latest
// completion record (round 1 in run_completions and account_completions,
// later rounds in completion_rounds) against a direct count of the items.
func assertCompletionTotals(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID, accounts, round int) {
	t.Helper()
	ctx := context.Background()
	const counts = `count(*) AS items, count(*) FILTER (WHERE state = 'matched') AS matched,
		           count(*) FILTER (WHERE state = 'mismatched') AS mismatched,
		           count(*) FILTER (WHERE state = 'missing') AS missing,
		           count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
		           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
		           sum(attempts) AS calls, sum(throttles) AS throttles`
	const fields = `items, matched, mismatched, missing, dead_lettered, cancelled, provider_calls, throttles`
	var mismatches, runRows, accountRows int
	err := pool.QueryRow(ctx, `
		WITH direct AS (SELECT `+counts+` FROM items WHERE run_id = $1),
		latest AS (
		    SELECT `+fields+` FROM run_completions WHERE run_id = $1 AND $2 = 1
		    UNION ALL
		    SELECT `+fields+` FROM completion_rounds WHERE run_id = $1 AND account_id IS NULL AND round = $2)
		SELECT (SELECT count(*) FROM latest c, direct d WHERE
		        (c.items, c.matched, c.mismatched, c.missing, c.dead_lettered, c.cancelled, c.provider_calls, c.throttles) <>
		        (d.items, d.matched, d.mismatched, d.missing, d.dead_lettered, d.cancelled, d.calls, d.throttles))
		       + (SELECT 1 - count(*) FROM latest),
		       (SELECT count(*) FROM run_completions WHERE run_id = $1 AND round = $2),
		       (SELECT count(*) FROM account_completions WHERE run_id = $1 AND round = $2)`, runID, round).
		Scan(&mismatches, &runRows, &accountRows)
	if err != nil {
		t.Fatal(err)
	}
	if runRows != 1 || mismatches != 0 {
		t.Errorf("run completion rows (round %d) = %d, records with wrong totals = %d; want 1 and 0", round, runRows, mismatches)
	}
	if accountRows != accounts {
		t.Errorf("account completion rows (round %d) = %d, want %d", round, accountRows, accounts)
	}
	var wrong int
	if err := pool.QueryRow(ctx, `
		WITH latest AS (
		    SELECT DISTINCT ON (account_id) account_id, `+fields+`
		      FROM (SELECT account_id, 1 AS round, `+fields+` FROM account_completions WHERE run_id = $1
		            UNION ALL
		            SELECT account_id, round, `+fields+` FROM completion_rounds WHERE run_id = $1 AND account_id IS NOT NULL) r
		     ORDER BY account_id, round DESC)
		SELECT count(*) FROM latest c
		  JOIN (SELECT account_id, `+counts+` FROM items WHERE run_id = $1 GROUP BY account_id) d USING (account_id)
		 WHERE (c.items, c.matched, c.mismatched, c.missing, c.dead_lettered, c.cancelled, c.provider_calls, c.throttles) <>
		       (d.items, d.matched, d.mismatched, d.missing, d.dead_lettered, d.cancelled, d.calls, d.throttles)`, runID).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d account completions disagree with a direct count", wrong)
	}
	assertBreakdown(t, pool, runID)
	var completedAt, firstCompletedAt *string
	if err := pool.QueryRow(ctx, `SELECT completed_at::text, first_completed_at::text FROM runs WHERE run_id = $1`, runID).
		Scan(&completedAt, &firstCompletedAt); err != nil {
		t.Fatal(err)
	}
	if completedAt == nil || firstCompletedAt == nil {
		t.Errorf("runs.completed_at = %v, first_completed_at = %v after completion, want both set", completedAt, firstCompletedAt)
	}
}

// assertBreakdown compares a run's run_breakdown rows with its items
// counted directly, by shard, provider and currency.
func assertBreakdown(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID) {
	t.Helper()
	const cols = `shard, provider, currency, item_count, mismatched, missing, dead_lettered, cancelled,
	              mismatched_minor, missing_minor, dead_lettered_minor`
	var wrong, rows int
	if err := pool.QueryRow(context.Background(), `
		WITH direct AS (
		    SELECT shard, provider, currency, count(*)::int AS item_count,
		           count(*) FILTER (WHERE state = 'mismatched')::int AS mismatched,
		           count(*) FILTER (WHERE state = 'missing')::int AS missing,
		           count(*) FILTER (WHERE state = 'dead_lettered')::int AS dead_lettered,
		           count(*) FILTER (WHERE state = 'cancelled')::int AS cancelled,
		           coalesce(sum(amount_minor) FILTER (WHERE state = 'mismatched'), 0)::bigint AS mismatched_minor,
		           coalesce(sum(amount_minor) FILTER (WHERE state = 'missing'), 0)::bigint AS missing_minor,
		           coalesce(sum(amount_minor) FILTER (WHERE state = 'dead_lettered'), 0)::bigint AS dead_lettered_minor
		      FROM items WHERE run_id = $1 GROUP BY shard, provider, currency),
		kept AS (SELECT `+cols+` FROM run_breakdown WHERE run_id = $1)
		SELECT (SELECT count(*) FROM ((SELECT * FROM direct EXCEPT SELECT * FROM kept)
		                              UNION ALL (SELECT * FROM kept EXCEPT SELECT * FROM direct)) d),
		       (SELECT count(*) FROM kept)`, runID).Scan(&wrong, &rows); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 || rows == 0 {
		t.Errorf("run_breakdown of run %s: %d rows, %d differ from the items counted directly", runID, rows, wrong)
	}
}

// recordBatch applies cs in one transaction.
func recordBatch(ctx context.Context, pool *pgxpool.Pool, cs []ledger.Change) (ledger.Result, error) {
	var res ledger.Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = ledger.RecordBatch(ctx, tx, cs)
		return err
	})
	return res, err
}

// TestRecordBatchCompletesExactlyOnce drives a run to completion in batches
// of random size from concurrent transactions, mixing retries, throttles and
// every outcome, and checks the join: one completion per run and account,
// with totals equal to a direct count.
func TestRecordBatchCompletesExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	const n, accounts, workers = 1500, 9, 6
	runID := seedRun(t, pool, n, accounts)

	outcomes := []ledger.State{ledger.Matched, ledger.Mismatched, ledger.Missing, ledger.DeadLettered}
	next := atomic.Int64{}
	var join joinCounter
	drive(t, workers, func(rnd *rand.Rand) error {
		for {
			size := 1 + rnd.IntN(40)
			first := next.Add(int64(size)) - int64(size)
			if first >= n {
				return nil
			}
			var retries, finals []ledger.Change
			for i := first; i < min(first+int64(size), n); i++ {
				id := fmt.Sprintf("tx%05d", i)
				from := ledger.Queued
				if rnd.IntN(3) == 0 {
					throttled := rnd.IntN(2) == 0
					retries = append(retries, ledger.Change{RunID: runID, TransactionID: id, From: ledger.Queued,
						To: ledger.RetryScheduled, Called: true, Throttled: throttled, Attempt: 1, HTTPStatus: 429,
						Reason: "throttled", RetryAfter: time.Second, Actor: "test"})
					from = ledger.RetryScheduled
				}
				final := ledger.Change{RunID: runID, TransactionID: id, From: from,
					To: outcomes[rnd.IntN(len(outcomes))], Called: true, Attempt: 2, HTTPStatus: 200, Reason: "test", Actor: "test"}
				if final.To == ledger.Mismatched {
					final.Provider = &ledger.Provider{AmountMinor: 1, Currency: "USD", Status: "failed"}
					final.Differences = []ledger.Difference{{Field: "amount_minor", Expected: "100", Provider: "1"}}
				}
				finals = append(finals, final)
			}
			for _, cs := range [][]ledger.Change{retries, finals} {
				res, err := recordBatch(ctx, pool, cs)
				if err != nil {
					return err
				}
				join.add(res)
			}
		}
	})
	join.check(t, accounts)
	assertCompletionTotals(t, pool, runID, accounts, 1)
	var transitions, diffs int
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM transitions WHERE run_id = $1),
		       (SELECT count(*) FROM items WHERE run_id = $1 AND state = 'mismatched' AND jsonb_array_length(differences) = 1)`,
		runID).Scan(&transitions, &diffs); err != nil {
		t.Fatal(err)
	}
	var want, mismatched int
	if err := pool.QueryRow(ctx, `SELECT sum(attempts), count(*) FILTER (WHERE state = 'mismatched') FROM items WHERE run_id = $1`,
		runID).Scan(&want, &mismatched); err != nil {
		t.Fatal(err)
	}
	if transitions != want {
		t.Errorf("%d transitions, want one per call: %d", transitions, want)
	}
	if diffs != mismatched || mismatched == 0 {
		t.Errorf("%d of %d mismatched items have their differences", diffs, mismatched)
	}
}

// TestRecordBatchConflictChangesNothing checks that a batch with one stale
// change, or two changes of one item, reports ErrConflict and, rolled back,
// leaves every item as it was.
func TestRecordBatchConflictChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := seedRun(t, pool, 3, 1)
	change := func(id string, from ledger.State) ledger.Change {
		return ledger.Change{RunID: runID, TransactionID: id, From: from, To: ledger.Matched,
			Called: true, Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "test"}
	}
	for name, cs := range map[string][]ledger.Change{
		"stale from state": {change("tx00000", ledger.Queued), change("tx00001", ledger.RetryScheduled), change("tx00002", ledger.Queued)},
		"item twice":       {change("tx00000", ledger.Queued), change("tx00001", ledger.Queued), change("tx00001", ledger.Queued)},
	} {
		if _, err := recordBatch(ctx, pool, cs); !errors.Is(err, ledger.ErrConflict) {
			t.Errorf("%s: err = %v, want ErrConflict", name, err)
		}
	}
	var changed, transitions, remaining int
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM items WHERE run_id = $1 AND state <> 'queued'),
		       (SELECT count(*) FROM transitions WHERE run_id = $1),
		       (SELECT sum(remaining) FROM run_shards WHERE run_id = $1)`, runID).Scan(&changed, &transitions, &remaining); err != nil {
		t.Fatal(err)
	}
	if changed != 0 || transitions != 0 || remaining != 3 {
		t.Errorf("after rolled-back conflicts: %d items changed, %d transitions, %d open; want 0, 0, 3", changed, transitions, remaining)
	}
}

func TestRequeueReopensAndRecompletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := seedRun(t, pool, 3, 2)
	for i, to := range []ledger.State{ledger.Matched, ledger.DeadLettered, ledger.DeadLettered} {
		if _, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: fmt.Sprintf("tx%05d", i),
			From: ledger.Queued, To: to, Called: true, Attempt: 1, Reason: "test", Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	assertCompletionTotals(t, pool, runID, 2, 1)
	var completedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT completed_at FROM runs WHERE run_id = $1`, runID).Scan(&completedAt); err != nil {
		t.Fatal(err)
	}

	var ids []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		ids, err = ledger.Requeue(ctx, tx, runID, []string{"tx00000", "tx00001", "tx00002"}, "redrive", "operator", mustTime(t))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("requeued %v, want the two dead-lettered items", ids)
	}
	var completed *string
	if err := pool.QueryRow(ctx, `SELECT completed_at::text FROM runs WHERE run_id = $1`, runID).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if completed != nil {
		t.Fatalf("run still completed after requeue: %s", *completed)
	}
	for _, id := range ids {
		if _, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: id,
			From: ledger.Queued, To: ledger.Matched, Called: true, Attempt: 1, Reason: "matched", Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	assertCompletionTotals(t, pool, runID, 2, 2)
	// The first completion record stays as the auditor saw it; the second
	// round is a record of its own.
	var first, again, firstAt, firstAtNow int
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT matched FROM run_completions WHERE run_id = $1),
		       (SELECT matched FROM completion_rounds WHERE run_id = $1 AND account_id IS NULL AND round = 2),
		       (SELECT count(*) FROM runs WHERE run_id = $1 AND first_completed_at = $2),
		       (SELECT count(*) FROM account_completions WHERE run_id = $1 AND dead_lettered > 0)`,
		runID, completedAt).Scan(&first, &again, &firstAt, &firstAtNow); err != nil {
		t.Fatal(err)
	}
	if first != 1 || again != 3 || firstAt != 1 || firstAtNow != 2 {
		t.Errorf("after the redrive: first record matched %d (want 1), round 2 matched %d (want 3), "+
			"first_completed_at kept: %v, accounts' first records with their dead letters: %d (want 2)",
			first, again, firstAt == 1, firstAtNow)
	}
}

func mustTime(t testing.TB) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, "2026-10-24T12:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	return at
}
