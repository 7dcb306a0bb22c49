package enqueue_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	pool  *pgxpool.Pool
	queue *queue.Queue
	enq   *enqueue.Enqueuer
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := pgtest.New(t)
	q := queue.New(pool, queue.Config{})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q, Actor: "tester@host"})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{pool: pool, queue: q, enq: enq}
}

var day = payments.Date{Year: 2026, Month: time.October, Day: 24}

// csvDay returns a valid CSV export of n payments over the given accounts.
func csvDay(n, accounts int) string {
	var b strings.Builder
	b.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at,extra\n")
	for i := range n {
		fmt.Fprintf(&b, "tx_%05d,acc_%02d,%d,EUR,succeeded,2026-10-24T%02d:%02d:00Z,ignored\n", i, i%accounts, 100+i, i%24, i%60)
	}
	return b.String()
}

func request(source, content string) enqueue.Request {
	return enqueue.Request{
		Date:   day,
		Source: source,
		Open:   func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(content)), nil },
	}
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestEnqueueCreatesRunItemsAndMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(500, 7)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Existing || res.Items != 500 || res.Generation != 1 || res.ReconciliationID != "nightly-2026-10-24" {
		t.Fatalf("result = %+v", res)
	}
	if got := b.count(t, `SELECT count(*) FROM items WHERE run_id = $1`, res.RunID); got != 500 {
		t.Errorf("items = %d, want 500", got)
	}
	stats, err := b.queue.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Available != 500 {
		t.Errorf("available messages = %d, want 500", stats.Available)
	}
	// Every message carries its item's idempotency key.
	if got := b.count(t, `SELECT count(*) FROM items i WHERE i.idempotency_key <> 'nightly-2026-10-24:' || i.transaction_id`); got != 0 {
		t.Errorf("%d items with a wrong idempotency key", got)
	}
	if got := b.count(t, `SELECT sum(remaining) FROM run_shards WHERE run_id = $1`, res.RunID); got != 500 {
		t.Errorf("open items in shards = %d, want 500", got)
	}
	if got := b.count(t, `SELECT count(*) FROM account_progress WHERE run_id = $1`, res.RunID); got != 7 {
		t.Errorf("accounts = %d, want 7", got)
	}
	var sha, trigger, by string
	if err := b.pool.QueryRow(ctx, `SELECT source_sha256, trigger, triggered_by FROM runs WHERE run_id = $1`, res.RunID).Scan(&sha, &trigger, &by); err != nil {
		t.Fatal(err)
	}
	if len(sha) != 64 || trigger != "manual" || by != "tester@host" {
		t.Errorf("run source_sha256=%q trigger=%q triggered_by=%q", sha, trigger, by)
	}
}

// TestEnqueueKeepsTheKind: the kind a file states is kept on the item and
// read back with it, with the number of items of its run its provider
// answers for; a row that states none keeps an empty kind for the profile
// to decide.
func TestEnqueueKeepsTheKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.enq.Enqueue(ctx, request("day.csv", "transaction_id,account_id,amount_minor,currency,status,occurred_at,kind,provider\n"+
		"pi_1,acct_1,1000,EUR,succeeded,2026-10-24T10:00:00Z,payment,cards\n"+
		"re_1,acct_1,-400,EUR,succeeded,2026-10-24T11:00:00Z,refund,cards\n"+
		"dp_1,acct_1,-1000,USD,disputed,2026-10-24T12:00:00Z,dispute,cards\n"+
		"tx_1,acct_1,1000,EUR,succeeded,2026-10-24T13:00:00Z,,\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pi_1": "payment", "re_1": "refund", "dp_1": "dispute", "tx_1": ""}
	var keys []ledger.Key
	for id := range want {
		keys = append(keys, ledger.Key{RunID: res.RunID, TransactionID: id})
	}
	items, err := ledger.Items(ctx, b.pool, keys)
	if err != nil {
		t.Fatal(err)
	}
	for id, kind := range want {
		it := items[ledger.Key{RunID: res.RunID, TransactionID: id}]
		runItems := 3 // the run's items of its provider
		if id == "tx_1" {
			runItems = 1
		}
		if it.Kind != kind || it.RunItems != runItems {
			t.Errorf("%s: kind %q, run items %d; want %q, %d", id, it.Kind, it.RunItems, kind, runItems)
		}
	}
}

func TestEnqueueSameDateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(10, 2)))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(10, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if !second.Existing || second.RunID != first.RunID {
		t.Fatalf("second enqueue = %+v, want the existing run", second)
	}
	if got := b.count(t, `SELECT count(*) FROM items`); got != 10 {
		t.Errorf("items = %d, want 10", got)
	}
}

// TestEnqueueOfAChangedFileIsRefused: one date, one truth. Another export
// of a date that has a run is refused with both SHA-256s and the commands
// that would do what the operator means; nothing is written.
func TestEnqueueOfAChangedFileIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(10, 2))); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := b.pool.QueryRow(ctx, `SELECT source_sha256 FROM runs`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	changed := csvDay(11, 2)
	sum := sha256.Sum256([]byte(changed))
	_, err := b.enq.Enqueue(ctx, request("day-fixed.csv", changed))
	var cerr *enqueue.ChangedSourceError
	if !errors.As(err, &cerr) {
		t.Fatalf("enqueue of another file: err = %v, want a ChangedSourceError", err)
	}
	for _, want := range []string{stored, hex.EncodeToString(sum[:]), "--rerun all", "reconcile cancel --date 2026-10-24"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := b.count(t, `SELECT count(*) FROM items`); got != 10 {
		t.Errorf("items = %d, want 10", got)
	}
}

func TestConcurrentEnqueuersCreateOneRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const enqueuers = 6
	content := csvDay(2000, 10)
	start := make(chan struct{})
	results := make([]enqueue.Result, enqueuers)
	errs := make([]error, enqueuers)
	var wg sync.WaitGroup
	for i := range enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = b.enq.Enqueue(ctx, request("day.csv", content))
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range enqueuers {
		if errs[i] != nil {
			t.Fatalf("enqueuer %d: %v", i, errs[i])
		}
		if !results[i].Existing {
			created++
		}
		if results[i].RunID != results[0].RunID {
			t.Errorf("enqueuer %d reports run %s, enqueuer 0 run %s", i, results[i].RunID, results[0].RunID)
		}
	}
	if created != 1 {
		t.Errorf("%d enqueuers created a run, want 1", created)
	}
	if got := b.count(t, `SELECT count(*) FROM runs`); got != 1 {
		t.Errorf("runs = %d, want 1", got)
	}
	if got := b.count(t, `SELECT count(*) FROM items`); got != 2000 {
		t.Errorf("items = %d, want 2000", got)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := csvDay(30, 3) +
		"tx_00003,acc_01,100,EUR,succeeded,2026-10-24T01:00:00Z,\n" + // duplicate id, line 32
		"tx_x,acc_01,12.5,EUR,succeeded,2026-10-24T01:00:00Z,\n" // not an integer, line 33
	_, err := b.enq.Enqueue(ctx, request("bad.csv", bad))
	var problems payments.ProblemList
	if !errors.As(err, &problems) {
		t.Fatalf("err = %v, want a problem list", err)
	}
	for _, want := range []string{"bad.csv:32", "bad.csv:33"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	for _, table := range []string{"runs", "items", "queue_messages", "account_progress", "run_shards"} {
		if got := b.count(t, `SELECT count(*) FROM `+table); got != 0 {
			t.Errorf("%s has %d rows after bad input, want 0", table, got)
		}
	}
	// The date is still free: a good file enqueues afterwards.
	if _, err := b.enq.Enqueue(ctx, request("good.csv", csvDay(3, 1))); err != nil {
		t.Fatalf("enqueue after a rejected file: %v", err)
	}
}

func TestRerunAllCreatesTheNextGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := request("day.csv", csvDay(20, 2))
	req.Rerun = enqueue.RerunAll
	if _, err := b.enq.Enqueue(ctx, req); !errors.Is(err, enqueue.ErrNoRun) {
		t.Fatalf("rerun all without a run: err = %v, want ErrNoRun", err)
	}
	if _, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(20, 2))); err != nil {
		t.Fatal(err)
	}
	res, err := b.enq.Enqueue(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Generation != 2 || res.ReconciliationID != "nightly-2026-10-24-g2" || res.Items != 20 {
		t.Fatalf("rerun all = %+v", res)
	}
	if got := b.count(t, `SELECT count(*) FROM items WHERE idempotency_key LIKE 'nightly-2026-10-24-g2:%'`); got != 20 {
		t.Errorf("generation 2 items = %d, want 20", got)
	}
	// Generation 1 never started: it is withdrawn, not left calling the
	// provider next to generation 2.
	if res.SupersededItems != 20 || res.Superseded.Generation != 1 {
		t.Errorf("rerun all superseded %d items of generation %d, want 20 of 1", res.SupersededItems, res.Superseded.Generation)
	}
	if got := b.count(t, `SELECT count(*) FROM transitions t JOIN runs r USING (run_id)
		WHERE r.generation = 1 AND t.to_state = 'cancelled' AND t.details ->> 'detail' = 'superseded by generation 2'`); got != 20 {
		t.Errorf("generation 1 cancel transitions = %d, want 20", got)
	}
	if got := b.count(t, `SELECT count(*) FROM queue_messages WHERE state = 'ready'`); got != 20 {
		t.Errorf("ready messages = %d, want generation 2's 20", got)
	}
}

func TestRerunFailedRequeuesDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.enq.Enqueue(ctx, request("day.csv", csvDay(5, 1)))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := b.queue.Claim(ctx, 5)
	if err != nil || len(ds) != 5 {
		t.Fatalf("claim: %d deliveries, %v", len(ds), err)
	}
	// Two items die, three match; the run completes.
	for i, d := range ds {
		to, reason := ledger.Matched, "matched"
		if i < 2 {
			to, reason = ledger.DeadLettered, "http_400"
		}
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := ledger.Record(ctx, tx, ledger.Change{RunID: d.RunID, TransactionID: d.TransactionID,
				From: ledger.Queued, To: to, Called: true, Attempt: 1, Reason: reason, Actor: "test"}); err != nil {
				return err
			}
			if to == ledger.DeadLettered {
				return b.queue.DeadLetter(ctx, tx, d, reason, "bad request")
			}
			return b.queue.Ack(ctx, tx, d)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := b.count(t, `SELECT count(*) FROM run_completions WHERE run_id = $1`, res.RunID); got != 1 {
		t.Fatalf("run completions = %d, want 1", got)
	}

	rerun, err := b.enq.Enqueue(ctx, enqueue.Request{Date: day, Rerun: enqueue.RerunFailed})
	if err != nil {
		t.Fatal(err)
	}
	if rerun.Requeued != 2 || rerun.RunID != res.RunID {
		t.Fatalf("rerun failed = %+v, want 2 requeued in run %s", rerun, res.RunID)
	}
	if got := b.count(t, `SELECT count(*) FROM items WHERE state = 'queued'`); got != 2 {
		t.Errorf("queued items = %d, want 2", got)
	}
	if got := b.count(t, `SELECT count(*) FROM transitions WHERE reason = 'rerun_failed' AND from_state = 'dead_lettered' AND to_state = 'queued'`); got != 2 {
		t.Errorf("rerun transitions = %d, want 2", got)
	}
	again, err := b.queue.Claim(ctx, 10)
	if err != nil || len(again) != 2 {
		t.Fatalf("claim after rerun: %d deliveries, %v; want 2", len(again), err)
	}
}
