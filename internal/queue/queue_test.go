package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is an injectable time source that only moves when told to.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type testBundle struct {
	pool  *pgxpool.Pool
	q     *Queue
	clock *clock
}

// setup returns a queue on a fresh database. With a clock, the queue runs on
// injected time.
func setup(t *testing.T, cfg Config, injectTime bool) *testBundle {
	t.Helper()
	b := &testBundle{pool: pgtest.New(t)}
	if injectTime {
		b.clock = newClock()
		cfg.Now = b.clock.Now
	}
	b.q = New(b.pool, cfg)
	return b
}

// messages returns n messages of one run, keys numbered from first.
func messages(run uuid.UUID, recID string, first, n int) []Message {
	ms := make([]Message, n)
	for i := range ms {
		tx := fmt.Sprintf("tx%06d", first+i)
		ms[i] = Message{RunID: run, ReconciliationID: recID, TransactionID: tx, IdempotencyKey: recID + ":" + tx}
	}
	return ms
}

func mustPublish(t *testing.T, q *Queue, db DB, ms []Message) {
	t.Helper()
	res, err := q.Publish(context.Background(), db, ms)
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != len(ms) {
		t.Fatalf("published %d of %d", res.Published, len(ms))
	}
}

func mustClaim(t *testing.T, q *Queue, n, want int) []Delivery {
	t.Helper()
	ds, err := q.Claim(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != want {
		t.Fatalf("claimed %d messages, want %d", len(ds), want)
	}
	return ds
}

// inTx runs fn in a committed transaction.
func inTx(t *testing.T, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) {
	t.Helper()
	if err := pgx.BeginFunc(context.Background(), pool, fn); err != nil {
		t.Fatal(err)
	}
}

type row struct {
	state      string
	lease      *uuid.UUID
	deliveries int
	attempt    int
	visibleAt  time.Time
}

func readRow(t *testing.T, pool *pgxpool.Pool, id int64) row {
	t.Helper()
	var r row
	err := pool.QueryRow(context.Background(),
		`SELECT state, lease, deliveries, attempt, visible_at FROM queue_messages WHERE message_id = $1`, id).
		Scan(&r.state, &r.lease, &r.deliveries, &r.attempt, &r.visibleAt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConcurrentConsumersAckEachMessageExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	const total, consumers = 20000, 8
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, total))

	var (
		mu     sync.Mutex
		held   = map[int64]int{} // message id -> consumer currently holding it
		acked  = map[int64]int{}
		errs   = make(chan error, consumers)
		wg     sync.WaitGroup
		claims int
	)
	for c := range consumers {
		wg.Go(func() {
			for {
				ds, err := b.q.Claim(ctx, 50)
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				claims++
				for _, d := range ds {
					if other, ok := held[d.ID]; ok {
						mu.Unlock()
						errs <- fmt.Errorf("message %d claimed by consumer %d while consumer %d holds it", d.ID, c, other)
						return
					}
					held[d.ID] = c
				}
				mu.Unlock()
				err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					if c%2 == 0 { // half the consumers ack in one statement
						stale, err := b.q.AckBatch(ctx, tx, ds)
						if err == nil && len(stale) > 0 {
							err = fmt.Errorf("%d stale leases", len(stale))
						}
						return err
					}
					for _, d := range ds {
						if err := b.q.Ack(ctx, tx, d); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, d := range ds {
					delete(held, d.ID)
					acked[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(acked) != total {
		t.Errorf("acked %d distinct messages, want %d", len(acked), total)
	}
	for id, n := range acked {
		if n != 1 {
			t.Errorf("message %d acked %d times", id, n)
		}
	}
	var notAcked int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM queue_messages WHERE state <> 'acked'`).Scan(&notAcked); err != nil {
		t.Fatal(err)
	}
	if notAcked != 0 {
		t.Errorf("%d messages not acked", notAcked)
	}
	t.Logf("%d claims by %d consumers", claims, consumers)
}

func TestUnackedMessageReturnsAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{Visibility: 30 * time.Second}, true)
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 1))

	first := mustClaim(t, b.q, 10, 1)[0]
	if first.Deliveries != 1 || first.Poison {
		t.Fatalf("first delivery: deliveries=%d poison=%v, want 1 false", first.Deliveries, first.Poison)
	}
	b.clock.Advance(30*time.Second - time.Microsecond)
	mustClaim(t, b.q, 10, 0)
	b.clock.Advance(time.Microsecond)
	second := mustClaim(t, b.q, 10, 1)[0]
	if second.ID != first.ID || second.Deliveries != 2 || second.Lease == first.Lease {
		t.Fatalf("redelivery: id=%d deliveries=%d lease changed=%v, want id %d, 2, true",
			second.ID, second.Deliveries, second.Lease != first.Lease, first.ID)
	}

	// The first holder's lease is stale: none of its settlements applies.
	for name, settle := range map[string]func(DB) error{
		"ack":         func(db DB) error { return b.q.Ack(ctx, db, first) },
		"retry":       func(db DB) error { return b.q.RetryAt(ctx, db, first, b.clock.Now(), "http_503") },
		"dead-letter": func(db DB) error { return b.q.DeadLetter(ctx, db, first, "poison", "") },
		"extend":      func(DB) error { return b.q.Extend(ctx, first, time.Minute) },
	} {
		if err := settle(b.pool); !errors.Is(err, ErrStaleLease) {
			t.Errorf("%s with stale lease: err = %v, want ErrStaleLease", name, err)
		}
	}
	stale, err := b.q.AckBatch(ctx, b.pool, []Delivery{first})
	if err != nil || len(stale) != 1 {
		t.Errorf("AckBatch with stale lease: stale=%d err=%v, want 1 nil", len(stale), err)
	}
	if r := readRow(t, b.pool, first.ID); r.state != "ready" || r.lease == nil || *r.lease != second.Lease || r.deliveries != 2 {
		t.Fatalf("after stale settlements: %+v, want ready under the second lease", r)
	}

	// Extend keeps the current holder's message invisible past the timeout.
	if err := b.q.Extend(ctx, second, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(59 * time.Second)
	mustClaim(t, b.q, 10, 0)
	if err := b.q.Ack(ctx, b.pool, second); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	mustClaim(t, b.q, 10, 0)
}

func TestRolledBackTransactionLeavesMessageWhereItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, true)
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 1))
	d := mustClaim(t, b.q, 1, 1)[0]
	before := readRow(t, b.pool, d.ID)

	for name, settle := range map[string]func(pgx.Tx) error{
		"ack":         func(tx pgx.Tx) error { return b.q.Ack(ctx, tx, d) },
		"ack batch":   func(tx pgx.Tx) error { _, err := b.q.AckBatch(ctx, tx, []Delivery{d}); return err },
		"retry":       func(tx pgx.Tx) error { return b.q.RetryAt(ctx, tx, d, b.clock.Now().Add(time.Hour), "http_503") },
		"dead-letter": func(tx pgx.Tx) error { return b.q.DeadLetter(ctx, tx, d, "http_400", "bad request") },
	} {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := settle(tx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if after := readRow(t, b.pool, d.ID); after.state != before.state || *after.lease != *before.lease ||
			after.deliveries != before.deliveries || after.attempt != before.attempt || !after.visibleAt.Equal(before.visibleAt) {
			t.Errorf("after rolled-back %s: %+v, want %+v", name, after, before)
		}
	}
	// The lease is still good.
	inTx(t, b.pool, func(tx pgx.Tx) error { return b.q.Ack(ctx, tx, d) })
	if r := readRow(t, b.pool, d.ID); r.state != "acked" || r.lease != nil {
		t.Fatalf("after committed ack: %+v", r)
	}
}

func TestRetryAtIsNotDeliveredBeforeItsTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxDeliveries: 1}, true)
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 1))
	d := mustClaim(t, b.q, 1, 1)[0]
	at := b.clock.Now().Add(10 * time.Second)
	d.Attempt++ // the caller counts the attempt; RetryAt stores it
	inTx(t, b.pool, func(tx pgx.Tx) error { return b.q.RetryAt(ctx, tx, d, at, "http_503") })
	if err := b.q.Ack(ctx, b.pool, d); !errors.Is(err, ErrStaleLease) {
		t.Fatalf("ack after retry: err = %v, want ErrStaleLease", err)
	}

	s, err := b.q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Delayed != 1 || s.Available != 0 || s.InFlight != 0 {
		t.Fatalf("stats of a delayed message: %+v", s.Counts)
	}
	b.clock.Advance(10*time.Second - time.Microsecond)
	mustClaim(t, b.q, 1, 0)
	b.clock.Advance(time.Microsecond)
	again := mustClaim(t, b.q, 1, 1)[0]
	// The delivery count restarted: with MaxDeliveries 1 this is not poison.
	if again.ID != d.ID || again.Attempt != 1 || again.Deliveries != 1 || again.Poison {
		t.Fatalf("retried delivery: %+v, want attempt 1, deliveries 1, not poison", again)
	}
}

func TestPoisonAfterMaxDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{MaxDeliveries: 2, Visibility: time.Second}, true)
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 1))
	var d Delivery
	for i := 1; i <= 3; i++ {
		d = mustClaim(t, b.q, 1, 1)[0]
		if d.Deliveries != i || d.Poison != (i == 3) {
			t.Fatalf("claim %d: deliveries=%d poison=%v", i, d.Deliveries, d.Poison)
		}
		b.clock.Advance(time.Second)
	}
	inTx(t, b.pool, func(tx pgx.Tx) error { return b.q.DeadLetter(ctx, tx, d, "poison", "claimed 3 times") })
	b.clock.Advance(time.Hour)
	mustClaim(t, b.q, 1, 0)
	dls, err := b.q.DeadLetters(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].ID != d.ID || dls[0].Reason != "poison" || dls[0].LastError != "claimed 3 times" ||
		dls[0].Deliveries != 3 || dls[0].Age != time.Hour || dls[0].IdempotencyKey != d.IdempotencyKey {
		t.Fatalf("dead letters: %+v", dls)
	}
}

func TestDeadLetterListAndRedriveRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, true)
	runA, runB := uuid.New(), uuid.New()
	mustPublish(t, b.q, b.pool, messages(runA, "nightly-2026-10-23", 0, 3))
	mustPublish(t, b.q, b.pool, messages(runB, "nightly-2026-10-24", 0, 3))
	ds := mustClaim(t, b.q, 10, 6)
	inTx(t, b.pool, func(tx pgx.Tx) error {
		for _, d := range ds {
			if err := b.q.DeadLetter(ctx, tx, d, "max_attempts", "http 503"); err != nil {
				return err
			}
		}
		return nil
	})
	list := func(f Filter) []DeadLetter {
		t.Helper()
		dls, err := b.q.DeadLetters(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return dls
	}
	if n := len(list(Filter{})); n != 6 {
		t.Fatalf("all dead letters: %d, want 6", n)
	}
	if n := len(list(Filter{Limit: 4})); n != 4 {
		t.Fatalf("limited dead letters: %d, want 4", n)
	}
	ofA := list(Filter{RunID: runA})
	if len(ofA) != 3 || ofA[0].RunID != runA {
		t.Fatalf("dead letters of run A: %+v", ofA)
	}

	// Redrive one message by id, then run B, then everything left.
	var moved []Message
	inTx(t, b.pool, func(tx pgx.Tx) (err error) {
		moved, err = b.q.Redrive(ctx, tx, Filter{IDs: []int64{ofA[1].ID}})
		return err
	})
	if len(moved) != 1 || moved[0].IdempotencyKey != ofA[1].IdempotencyKey {
		t.Fatalf("redrive by id moved %+v", moved)
	}
	again := mustClaim(t, b.q, 10, 1)[0]
	if again.ID != ofA[1].ID || again.Deliveries != 1 {
		t.Fatalf("redriven delivery: %+v, want id %d with deliveries 1", again, ofA[1].ID)
	}
	inTx(t, b.pool, func(tx pgx.Tx) (err error) {
		moved, err = b.q.Redrive(ctx, tx, Filter{RunID: runB})
		return err
	})
	if len(moved) != 3 || moved[0].RunID != runB {
		t.Fatalf("redrive of run B moved %+v", moved)
	}
	// A redrive rolled back moves nothing.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moved, err = b.q.Redrive(ctx, tx, Filter{}); err != nil || len(moved) != 2 {
		t.Fatalf("redrive all in rolled-back tx: %d moved, err %v", len(moved), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(list(Filter{})); n != 2 {
		t.Fatalf("dead letters after rollback: %d, want 2", n)
	}
	inTx(t, b.pool, func(tx pgx.Tx) (err error) {
		moved, err = b.q.Redrive(ctx, tx, Filter{})
		return err
	})
	if len(moved) != 2 || len(list(Filter{})) != 0 {
		t.Fatalf("redrive all moved %d", len(moved))
	}
	mustClaim(t, b.q, 10, 5)
}

func TestStatsEqualDirectCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{Visibility: time.Minute}, true)
	runA, runB := uuid.New(), uuid.New()
	mustPublish(t, b.q, b.pool, messages(runA, "nightly-2026-10-23", 0, 10))
	b.clock.Advance(time.Second)
	mustPublish(t, b.q, b.pool, messages(runB, "nightly-2026-10-24", 0, 7))
	b.clock.Advance(time.Second)
	ds := mustClaim(t, b.q, 8, 8) // all from run A, oldest first
	inTx(t, b.pool, func(tx pgx.Tx) error {
		if err := b.q.Ack(ctx, tx, ds[0]); err != nil {
			return err
		}
		if err := b.q.Ack(ctx, tx, ds[1]); err != nil {
			return err
		}
		if err := b.q.RetryAt(ctx, tx, ds[2], b.clock.Now().Add(time.Hour), "throttled"); err != nil {
			return err
		}
		return b.q.DeadLetter(ctx, tx, ds[3], "http_400", "bad request")
	})
	// ds[4:8] stay in flight; 2 of run A and 7 of run B are available.
	s, err := b.q.ExactStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Total: 17, Available: 9, InFlight: 4, Delayed: 1, DeadLettered: 1, Acked: 2, OldestAvailableAge: 2 * time.Second}
	if s.Counts != want {
		t.Errorf("stats %+v, want %+v", s.Counts, want)
	}
	// Stats counts the same open messages, and the acked ones too on a
	// table without statistics yet; with statistics, an estimate that an
	// ANALYZE of so small a table makes exact.
	fast, err := b.q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (Autovacuum analyses a table after 50 changed rows; this one has 29.)
	if fast.Counts != want || fast.RunsAcked {
		t.Errorf("stats without statistics %+v, want %+v", fast.Counts, want)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE queue_messages`); err != nil {
		t.Fatal(err)
	}
	if fast, err = b.q.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	estimated := want
	estimated.Estimated = true
	if fast.Counts != estimated {
		t.Errorf("stats with statistics %+v, want %+v", fast.Counts, estimated)
	}
	for _, r := range fast.Runs {
		if r.Acked != 0 || r.Total != 0 {
			t.Errorf("run %s: acked %d, total %d without ExactStats", r.ReconciliationID, r.Acked, r.Total)
		}
	}
	// OpenStats leaves the acked messages out.
	open, err := b.q.OpenStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	openOnly := want
	openOnly.Acked, openOnly.Total = 0, want.Total-want.Acked
	if open.Counts != openOnly || !slices.Equal(open.Runs, fast.Runs) {
		t.Errorf("open stats %+v %+v, want %+v and the runs of Stats %+v", open.Counts, open.Runs, openOnly, fast.Runs)
	}
	// The same numbers straight from the table.
	var direct Counts
	err = b.pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM queue_messages),
       (SELECT count(*) FROM queue_messages WHERE state = 'ready' AND visible_at <= $1),
       (SELECT count(*) FROM queue_messages WHERE state = 'ready' AND visible_at > $1 AND lease IS NOT NULL),
       (SELECT count(*) FROM queue_messages WHERE state = 'ready' AND visible_at > $1 AND lease IS NULL),
       (SELECT count(*) FROM queue_messages WHERE state = 'dead'),
       (SELECT count(*) FROM queue_messages WHERE state = 'acked')`, b.clock.Now()).
		Scan(&direct.Total, &direct.Available, &direct.InFlight, &direct.Delayed, &direct.DeadLettered, &direct.Acked)
	if err != nil {
		t.Fatal(err)
	}
	direct.OldestAvailableAge = s.OldestAvailableAge
	if s.Counts != direct {
		t.Errorf("stats %+v, direct count %+v", s.Counts, direct)
	}
	if len(s.Runs) != 2 || s.Runs[0].RunID != runA || s.Runs[1].RunID != runB {
		t.Fatalf("per-run stats: %+v", s.Runs)
	}
	wantA := Counts{Total: 10, Available: 2, InFlight: 4, Delayed: 1, DeadLettered: 1, Acked: 2, OldestAvailableAge: 2 * time.Second}
	wantB := Counts{Total: 7, Available: 7, OldestAvailableAge: time.Second}
	if s.Runs[0].Counts != wantA || s.Runs[1].Counts != wantB {
		t.Errorf("per-run stats %+v %+v, want %+v %+v", s.Runs[0].Counts, s.Runs[1].Counts, wantA, wantB)
	}

	// RunWaits reads the same figures but the available count, in the
	// order asked, a run without messages included.
	none := uuid.New()
	ws, err := b.q.RunWaits(ctx, b.pool, []uuid.UUID{runB, none, runA})
	if err != nil {
		t.Fatal(err)
	}
	wantWaits := []RunWait{{RunID: runB, OldestAvailableAge: time.Second}, {RunID: none},
		{RunID: runA, InFlight: 4, Delayed: 1, DeadLettered: 1, OldestAvailableAge: 2 * time.Second}}
	if !slices.Equal(ws, wantWaits) {
		t.Errorf("run waits %+v, want %+v", ws, wantWaits)
	}
	// With every available message claimed, run A has none waiting: its
	// oldest is found past its messages in flight, which are not. An hour
	// on, the leases have expired and the retry is due: all of them wait
	// again, the oldest since the first publication.
	mustClaim(t, b.q, 9, 9)
	if ws, err = b.q.RunWaits(ctx, b.pool, []uuid.UUID{runA}); err != nil {
		t.Fatal(err)
	}
	if want := (RunWait{RunID: runA, InFlight: 6, Delayed: 1, DeadLettered: 1}); len(ws) != 1 || ws[0] != want {
		t.Errorf("run waits with nothing available %+v, want %+v", ws, want)
	}
	b.clock.Advance(time.Hour)
	if ws, err = b.q.RunWaits(ctx, b.pool, []uuid.UUID{runA}); err != nil {
		t.Fatal(err)
	}
	if want := (RunWait{RunID: runA, DeadLettered: 1, OldestAvailableAge: time.Hour + 2*time.Second}); len(ws) != 1 || ws[0] != want {
		t.Errorf("run waits an hour on %+v, want %+v", ws, want)
	}
}

// TestStatsReadsOpenMessagesThroughTheirIndexes checks that Stats costs what
// is open, not what the retention keeps: on a table of 50,000 acked
// messages and a few open ones, its statement reads the partial indexes of
// ready and dead messages, where ExactStats's scans the table.
func TestStatsReadsOpenMessagesThroughTheirIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, state, visible_at,
		                            enqueued_at, changed_at)
		SELECT $1, 'nightly-2026-10-24', 'tx' || n, 'nightly-2026-10-24:tx' || n,
		       CASE WHEN n <= 50000 THEN 'acked' WHEN n <= 50010 THEN 'dead' ELSE 'ready' END, now(), now(), now()
		  FROM generate_series(1, 50030) n`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE queue_messages`); err != nil {
		t.Fatal(err)
	}
	plan := func(query string) string {
		t.Helper()
		return strings.Join(explain(t, b.pool, `EXPLAIN `+query, nil), "\n")
	}
	if p := plan(openCountsSQL); strings.Contains(p, "Seq Scan on queue_messages") ||
		!strings.Contains(p, "queue_messages_dead") || !strings.Contains(p, "ready") {
		t.Errorf("Stats's plan does not read the open messages through their indexes:\n%s", p)
	}
	if p := plan(strings.ReplaceAll(runWaitsSQL, "$2", "ARRAY['"+uuid.NewString()+"']::uuid[]")); strings.Contains(p, "Seq Scan on queue_messages") ||
		strings.Contains(p, "queue_messages_provider_ready") || !strings.Contains(p, "queue_messages_dead") {
		t.Errorf("RunWaits's plan does not read through the indexes of ready and dead messages:\n%s", p)
	}
	if p := plan(exactCountsSQL); !strings.Contains(p, "Seq Scan on queue_messages") {
		t.Errorf("ExactStats's plan does not scan the table:\n%s", p)
	}
	s, err := b.q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Available != 20 || s.DeadLettered != 10 || !s.Estimated || s.Acked != 50000 || s.Total != 50030 {
		t.Errorf("stats %+v, want 20 available, 10 dead, an estimate of 50000 acked", s.Counts)
	}
}

func TestPublishDeduplicatesForever(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	run := uuid.New()
	const rec = "nightly-2026-10-24"
	mustPublish(t, b.q, b.pool, messages(run, rec, 0, 5))
	// Ack them all: an acked key still counts as a duplicate.
	ds := mustClaim(t, b.q, 10, 5)
	if _, err := b.q.AckBatch(ctx, b.pool, ds); err != nil {
		t.Fatal(err)
	}
	batch := append(messages(run, rec, 3, 4), messages(run, rec, 6, 1)...) // keys 3..6, 6 twice
	res, err := b.q.Publish(ctx, b.pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if res != (PublishResult{Published: 2, Duplicates: 3}) {
		t.Fatalf("array publish: %+v, want 2 published, 3 duplicates", res)
	}

	// The COPY path, in the caller's transaction, twice in one transaction.
	big := messages(run, rec, 0, 3*copyThreshold)
	inTx(t, b.pool, func(tx pgx.Tx) error {
		res, err = b.q.Publish(ctx, tx, big[:2*copyThreshold])
		if err != nil || res != (PublishResult{Published: 2*copyThreshold - 7, Duplicates: 7}) {
			return fmt.Errorf("first copy publish: %+v %v", res, err)
		}
		res, err = b.q.Publish(ctx, tx, big)
		if err != nil || res != (PublishResult{Published: copyThreshold, Duplicates: 2 * copyThreshold}) {
			return fmt.Errorf("second copy publish: %+v %v", res, err)
		}
		return nil
	})
	// Through the pool (its own transaction).
	res, err = b.q.Publish(ctx, b.pool, big)
	if err != nil || res != (PublishResult{Duplicates: 3 * copyThreshold}) {
		t.Fatalf("copy publish of known keys: %+v %v", res, err)
	}

	// New keys without the duplicate check; a known key fails the lot.
	fresh := `SELECT $1::uuid, $2::text, 'tx' || lpad(g::text, 6, '0'), $2 || ':tx' || lpad(g::text, 6, '0'), 0, ''
  FROM generate_series($3::int, $4::int) g`
	if n, err := b.q.PublishNewQuery(ctx, b.pool, fresh, run, rec, 3*copyThreshold+3, 3*copyThreshold+7); err != nil || n != 5 {
		t.Fatalf("publish new query: %d %v", n, err)
	}
	var pgErr *pgconn.PgError
	if n, err := b.q.PublishNewQuery(ctx, b.pool, fresh, run, rec, 3*copyThreshold+7, 3*copyThreshold+9); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("publish new query of a known key: %d %v, want a unique violation", n, err)
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM queue_messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3*copyThreshold+5 {
		t.Fatalf("%d messages stored, want %d", n, 3*copyThreshold+5)
	}
}

func TestReleaseMakesMessagesVisibleAndUndoesTheDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, true)
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 3))
	ds := mustClaim(t, b.q, 3, 3)
	if err := b.q.Release(ctx, ds[:2]); err != nil {
		t.Fatal(err)
	}
	again := mustClaim(t, b.q, 3, 2)
	for i, d := range again {
		if d.ID != ds[i].ID || d.Deliveries != 1 {
			t.Fatalf("released delivery %d came back as %+v", i, d)
		}
	}
	// Releasing with the old leases changes nothing.
	if err := b.q.Release(ctx, ds[:2]); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, b.q, 3, 0)
}

// waitListener runs l.Wait in a goroutine and returns a channel that receives
// its result, after the listener has blocked.
func waitListener(t *testing.T, l *Listener, maxWait time.Duration) (<-chan error, time.Time) {
	t.Helper()
	blocked := make(chan struct{}, 1)
	l.blocked = func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background(), maxWait) }()
	select {
	case <-blocked:
	case err := <-done:
		t.Fatalf("Wait returned on an idle queue: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("listener never blocked")
	}
	return done, time.Now()
}

func TestListenerWakesOnPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	l, err := b.q.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)

	// With nothing queued and no notification, Wait sleeps until maxWait.
	start := time.Now()
	if err := l.Wait(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("Wait on an idle queue returned after %v, before maxWait", waited)
	}

	// maxWait is a minute and nothing is due: only the notification can
	// wake the listener.
	done, _ := waitListener(t, l, time.Minute)
	published := time.Now()
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 1))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("woken %v after Publish was called", time.Since(published))
	case <-time.After(20 * time.Second):
		t.Fatal("listener not woken by a publish")
	}
	mustClaim(t, b.q, 1, 1)
}

func TestListenerWakesWhenRetryBecomesDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	mustPublish(t, b.q, b.pool, messages(uuid.New(), "nightly-2026-10-24", 0, 1))
	d := mustClaim(t, b.q, 1, 1)[0]
	l, err := b.q.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)

	// The listener sleeps on the in-flight message's 30 s visibility
	// timeout; a retry half a second from now (database clock) shortens its
	// sleep to half a second.
	done, _ := waitListener(t, l, time.Minute)
	var at time.Time
	if err := b.pool.QueryRow(ctx, `SELECT now() + interval '500 milliseconds'`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	if err := b.q.RetryAt(ctx, b.pool, d, at, "http_503"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("listener not woken when the retry became due")
	}
	// Woken no earlier than the retry's time: the message is claimable.
	mustClaim(t, b.q, 1, 1)
}

// TestListenerOutageLogsOneLineWithACount waits many times on a listener
// whose database cannot be reached: one warning line with the count and the
// first error, not one per attempt; the way back is logged once at info.
func TestListenerOutageLogsOneLineWithACount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	pool := pgtest.New(t)
	// A port nothing listens on: every connection attempt is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("host=127.0.0.1 port=%d user=nobody dbname=none sslmode=disable connect_timeout=2", ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	q := New(pool, Config{ListenURL: dead, Logger: logger})
	if _, err := q.Listen(ctx); err == nil {
		t.Fatal("Listen on an unreachable listen URL succeeded")
	}
	l := &Listener{q: q}
	for range 50 {
		if err := l.Wait(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"failures":1,`) || !strings.Contains(lines[0], `"first_err":"connect listener`) {
		t.Fatalf("log after 50 failed waits:\n%s", logs.String())
	}
}

// TestListenerReconnectsQuietlyAfterACancelledWait: a Wait cancelled in the
// middle of its query leaves a closed connection behind (pgx closes it); the
// next Wait reconnects without warning that the listener is unavailable,
// which would end every clean `consume --until-done` with a WARN.
func TestListenerReconnectsQuietlyAfterACancelledWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs bytes.Buffer
	b := setup(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, false)
	l, err := b.q.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	// What a cancellation mid-query does to the connection.
	if err := l.conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Errorf("Wait after a cancelled one warned:\n%s", logs.String())
	}
	if l.conn == nil || l.conn.IsClosed() {
		t.Error("listener did not reconnect")
	}
}

// TestRunWaitsReadsFewEntriesWithStaleStatistics checks RunWaits's plan
// where a big queue table is planned from statistics taken when every
// message was acked (autovacuum analyses it after a tenth of its rows
// changed, so a night's new messages are never in them): a night of 18,000
// messages of two providers just published, two in flight and one delayed.
// Its statement must reach the few messages in flight or delayed and the
// run's first available one through ranges of queue_messages_ready, not
// walk every ready message (the provider claim index, whose predicate
// names a provider, cannot serve it).
func TestRunWaitsReadsFewEntriesWithStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	night := uuid.New()
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, state, visible_at,
		                            enqueued_at, changed_at)
		SELECT $1, 'nightly-2026-10-23', 'tx' || n, 'nightly-2026-10-23:tx' || n, 'acked', now(), now(), now()
		  FROM generate_series(1, 50000) n`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE queue_messages`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, state, visible_at,
		                            enqueued_at, changed_at, lease, provider)
		SELECT $1, 'nightly-2026-10-24', 'tx' || n, 'nightly-2026-10-24:tx' || n, 'ready',
		       CASE WHEN n <= 3 THEN now() + interval '1 minute' ELSE now() - interval '1 minute' END,
		       now() - interval '1 hour', now(), CASE WHEN n <= 2 THEN gen_random_uuid() END,
		       CASE WHEN n % 4 = 0 THEN '' ELSE 'stripe' END
		  FROM generate_series(1, 18000) n`, night); err != nil {
		t.Fatal(err)
	}
	lines := explain(t, b.pool, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+runWaitsSQL, nil, []uuid.UUID{night})
	plan := strings.Join(lines, "\n")
	// Each scan's rows, and those its filter removed: the entries it read.
	read := 0
	for _, l := range lines {
		var n int
		if i := strings.Index(l, "rows="); i >= 0 && strings.Contains(l, "Scan") {
			if _, err := fmt.Sscanf(l[i:], "rows=%d", &n); err == nil {
				read += n
			}
		} else if _, err := fmt.Sscanf(strings.TrimSpace(l), "Rows Removed by Filter: %d", &n); err == nil {
			read += n
		}
	}
	if read > 10 {
		t.Errorf("RunWaits's plan reads %d entries, want a few:\n%s", read, plan)
	}
	ws, err := b.q.RunWaits(ctx, b.pool, []uuid.UUID{night})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].InFlight != 2 || ws[0].Delayed != 1 || ws[0].OldestAvailableAge < time.Hour {
		t.Errorf("run waits %+v, want 2 in flight, 1 delayed, the oldest an hour old", ws)
	}
}

// TestProviderClaimIndexServesOnlyStatementsNamingAProvider checks the
// predicate of queue_messages_provider_ready: a claim of one provider's
// messages is planned through it, and a statement that names no provider,
// RunWaits's, is not, even with queue_messages_ready gone (the planner of a
// big table, whose statistics count no ready message, has chosen full
// scans of it over ranges of queue_messages_ready).
func TestProviderClaimIndexServesOnlyStatementsNamingAProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{}, false)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	claim := `SELECT message_id FROM queue_messages
	           WHERE state = 'ready' AND visible_at <= now() AND provider = $1 ORDER BY visible_at, message_id LIMIT 8`
	if p := strings.Join(explain(t, tx, `EXPLAIN `+claim, "stripe"), "\n"); !strings.Contains(p, "queue_messages_provider_ready") {
		t.Errorf("a claim of one provider's messages is not planned through its index:\n%s", p)
	}
	if _, err := tx.Exec(ctx, `DROP INDEX queue_messages_ready`); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(explain(t, tx, `EXPLAIN `+runWaitsSQL, nil, []uuid.UUID{uuid.New()}), "\n"); strings.Contains(p, "queue_messages_provider_ready") {
		t.Errorf("RunWaits, which names no provider, is planned through the provider claim index:\n%s", p)
	}
}

// explain returns the lines of an EXPLAIN statement's plan.
func explain(t *testing.T, db Querier, statement string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), statement, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}
