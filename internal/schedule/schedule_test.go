package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/schedule"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var berlin = mustLoad("Europe/Berlin")

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// fakeClock is a Clock whose time moves only when the test says so.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	changed chan struct{}
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, changed: make(chan struct{}, 1)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return ch
}

// awaitWaiter waits until something waits on the clock and returns the
// instant it waits for.
func (c *fakeClock) awaitWaiter(t *testing.T) time.Time {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		c.mu.Lock()
		if len(c.waiters) > 0 {
			at := c.waiters[0].at
			c.mu.Unlock()
			return at
		}
		c.mu.Unlock()
		select {
		case <-c.changed:
		case <-timeout:
			t.Fatal("nothing waits on the clock after 15s")
		}
	}
}

// advanceTo sets the time and wakes every waiter due by then.
func (c *fakeClock) advanceTo(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(at) {
			w.ch <- at
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// csvFor returns a valid export of n payments on date d.
func csvFor(d payments.Date, n int) string {
	var b strings.Builder
	b.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at\n")
	for i := range n {
		fmt.Fprintf(&b, "tx_%s_%03d,acc_%d,%d,EUR,succeeded,%sT10:%02d:00Z\n", d, i, i%3, 100+i, d, i%60)
	}
	return b.String()
}

type testBundle struct {
	pool *pgxpool.Pool
	dir  string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{pool: pgtest.New(t), dir: t.TempDir()}
}

// writeDay writes the export of d into the bundle's directory.
func (b *testBundle) writeDay(t *testing.T, d payments.Date, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(b.dir, "payments-"+d.String()+".csv"), []byte(csvFor(d, n)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// scheduler returns a scheduler reading the bundle's directory.
func (b *testBundle) scheduler(t *testing.T, name, expr string, clock schedule.Clock, catchUp time.Duration) *schedule.Scheduler {
	t.Helper()
	spec, err := schedule.ParseSpec(expr, berlin)
	if err != nil {
		t.Fatal(err)
	}
	src, err := schedule.FileTemplate(filepath.Join(b.dir, "payments-{date}.csv"))
	if err != nil {
		t.Fatal(err)
	}
	enq, err := enqueue.New(b.pool, enqueue.Config{Queue: queue.New(b.pool, queue.Config{}), Actor: name})
	if err != nil {
		t.Fatal(err)
	}
	s, err := schedule.New(b.pool, enq, schedule.Config{Spec: spec, DateOffset: -1, Source: src, CatchUp: catchUp,
		Name: name, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// start runs s in the background until the test ends.
func start(t *testing.T, s *schedule.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
}

func date(s string) payments.Date {
	d, err := payments.ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

// TestTwoSchedulersEnqueueEachTickOnce runs two schedulers on one database
// through three ticks of "30 2 * * *" in Europe/Berlin that cross the spring
// daylight-saving change: each date gets exactly one run and one set of
// messages, and the tick inside the DST gap is not lost.
func TestTwoSchedulersEnqueueEachTickOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const perDay = 40
	dates := []payments.Date{date("2026-03-27"), date("2026-03-28"), date("2026-03-29")}
	for _, d := range dates {
		b.writeDay(t, d, perDay)
	}
	begin := time.Date(2026, 3, 27, 12, 0, 0, 0, berlin)
	clocks := []*fakeClock{newFakeClock(begin), newFakeClock(begin)}
	for i, c := range clocks {
		start(t, b.scheduler(t, fmt.Sprintf("scheduler-%d", i), "30 2 * * *", c, 0))
	}
	want := []time.Time{
		time.Date(2026, 3, 28, 2, 30, 0, 0, berlin),
		time.Date(2026, 3, 29, 3, 30, 0, 0, berlin), // 02:30 does not exist that day
		time.Date(2026, 3, 30, 2, 30, 0, 0, berlin),
	}
	for _, at := range want {
		for _, c := range clocks {
			if got := c.awaitWaiter(t); !got.Equal(at) {
				t.Fatalf("scheduler waits for %s, want %s", got.In(berlin), at)
			}
		}
		// Fire both at once: their enqueues of the date race.
		var wg sync.WaitGroup
		for _, c := range clocks {
			wg.Go(func() { c.advanceTo(at) })
		}
		wg.Wait()
	}
	for _, c := range clocks {
		c.awaitWaiter(t) // both have finished the last tick
	}
	if n := b.count(t, `SELECT count(*) FROM schedule_ticks`); n != 6 {
		t.Fatalf("%d ticks recorded, want 6", n)
	}
	for _, d := range dates {
		if n := b.count(t, `SELECT count(*) FROM runs WHERE business_date = $1 AND trigger = 'cron' AND item_count = $2`, d.String(), perDay); n != 1 {
			t.Errorf("%s: %d cron runs of %d items, want 1", d, n, perDay)
		}
		if n := b.count(t, `SELECT count(*) FROM schedule_ticks WHERE business_date = $1 AND outcome = 'enqueued'`, d.String()); n != 1 {
			t.Errorf("%s: %d ticks enqueued it, want 1", d, n)
		}
		if n := b.count(t, `SELECT count(*) FROM schedule_ticks WHERE business_date = $1 AND outcome IN ('existing', 'skipped')`, d.String()); n != 1 {
			t.Errorf("%s: %d ticks found it enqueued or locked, want 1", d, n)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM queue_messages`); n != len(dates)*perDay {
		t.Errorf("%d queue messages, want %d", n, len(dates)*perDay)
	}
}

func TestCatchUpEnqueuesTwoMissedDates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, d := range []payments.Date{date("2026-10-22"), date("2026-10-23"), date("2026-10-24")} {
		b.writeDay(t, d, 10)
	}
	// 2026-10-22 was enqueued by hand; the scheduler was down for the ticks
	// of 10-24 and 10-25 02:00 (dates 10-23 and 10-24).
	enq, err := enqueue.New(b.pool, enqueue.Config{Queue: queue.New(b.pool, queue.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := schedule.FileTemplate(filepath.Join(b.dir, "payments-{date}.csv"))
	s22 := src(date("2026-10-22"))
	if _, err := enq.Enqueue(context.Background(), enqueue.Request{Date: date("2026-10-22"), Location: berlin,
		Source: s22.Name, Open: s22.Open}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 10, 25, 12, 0, 0, 0, berlin)
	clock := newFakeClock(now)
	start(t, b.scheduler(t, "s", "0 2 * * *", clock, 72*time.Hour))
	if at := clock.awaitWaiter(t); !at.Equal(time.Date(2026, 10, 26, 2, 0, 0, 0, berlin)) {
		t.Fatalf("first tick after catch-up at %s, want 2026-10-26 02:00", at)
	}
	if n := b.count(t, `SELECT count(*) FROM runs WHERE business_date IN ('2026-10-23', '2026-10-24') AND trigger = 'cron' AND item_count = 10`); n != 2 {
		t.Fatalf("%d caught-up runs, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM schedule_ticks WHERE catch_up AND outcome = 'enqueued'`); n != 2 {
		t.Fatalf("%d catch-up ticks recorded, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM runs`); n != 3 {
		t.Fatalf("%d runs, want 3 (the manual one untouched)", n)
	}
}

func TestCatchUpOffDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeDay(t, date("2026-10-24"), 5)
	s := b.scheduler(t, "s", "0 2 * * *", newFakeClock(time.Time{}), 0)
	if ticks := s.CatchUp(context.Background(), time.Date(2026, 10, 25, 12, 0, 0, 0, berlin)); len(ticks) != 0 {
		t.Fatalf("catch-up 0 handled %d ticks", len(ticks))
	}
	if n := b.count(t, `SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("%d runs, want 0", n)
	}
}

func TestOverlappingTickIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := date("2026-10-24")
	b.writeDay(t, d, 5)
	s := b.scheduler(t, "s", "0 2 * * *", newFakeClock(time.Time{}), 0)
	at := time.Date(2026, 10, 25, 2, 0, 0, 0, berlin)

	// Another enqueue of the date is running: it holds the date's lock.
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	class, key := schedule.LockKey(d)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1::int4, $2::int4)`, class, key); err != nil {
		t.Fatal(err)
	}
	if tick := s.Tick(ctx, at, false); tick.Outcome != schedule.Skipped || tick.Date != d {
		t.Fatalf("tick with the lock held: %+v, want skipped for %s", tick, d)
	}
	if n := b.count(t, `SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("skipped tick created %d runs", n)
	}
	if n := b.count(t, `SELECT count(*) FROM schedule_ticks WHERE outcome = 'skipped'`); n != 1 {
		t.Fatalf("%d skipped ticks recorded, want 1", n)
	}

	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1::int4, $2::int4)`, class, key); err != nil {
		t.Fatal(err)
	}
	if tick := s.Tick(ctx, at, false); tick.Outcome != schedule.Enqueued || tick.Result.Items != 5 {
		t.Fatalf("tick after release: %+v, want enqueued with 5 items", tick)
	}
	// The scheduler released the lock after its enqueue.
	var free bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int4, $2::int4)`, class, key).Scan(&free); err != nil || !free {
		t.Fatalf("lock still held after the tick (free=%v, err=%v)", free, err)
	}
}

func TestMissingSourceIsRecordedAndTheSchedulerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The export of 10-23 never arrived; 10-24's did.
	b.writeDay(t, date("2026-10-24"), 7)
	clock := newFakeClock(time.Date(2026, 10, 23, 12, 0, 0, 0, berlin))
	start(t, b.scheduler(t, "s", "0 2 * * *", clock, 0))
	for range 2 {
		clock.advanceTo(clock.awaitWaiter(t))
	}
	clock.awaitWaiter(t)
	var outcome, errText string
	err := b.pool.QueryRow(context.Background(),
		`SELECT outcome, error FROM schedule_ticks WHERE business_date = '2026-10-23'`).Scan(&outcome, &errText)
	if err != nil {
		t.Fatal(err)
	}
	if outcome != "failed" || !strings.Contains(errText, "payments-2026-10-23.csv") || !strings.Contains(errText, "no such file") {
		t.Fatalf("missing source recorded as %s: %q", outcome, errText)
	}
	if n := b.count(t, `SELECT count(*) FROM runs WHERE business_date = '2026-10-24' AND item_count = 7`); n != 1 {
		t.Fatalf("the next tick did not enqueue 2026-10-24 (%d runs)", n)
	}
}

// TestMissingSourceIsRetriedOnLaterTicks: with a catch-up window, a date
// whose file was missing at its tick is enqueued at a later tick once the
// file is there, without restarting the scheduler.
func TestMissingSourceIsRetriedOnLaterTicks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Started after the tick for 10-23, whose file has not arrived: the
	// start-up catch-up fails for it.
	clock := newFakeClock(time.Date(2026, 10, 24, 12, 0, 0, 0, berlin))
	start(t, b.scheduler(t, "s", "0 2 * * *", clock, 72*time.Hour))
	next := clock.awaitWaiter(t)
	if n := b.count(t, `SELECT count(*) FROM schedule_ticks WHERE business_date = '2026-10-23' AND outcome = 'failed'`); n != 1 {
		t.Fatalf("failed ticks of 2026-10-23 = %d, want 1", n)
	}
	b.writeDay(t, date("2026-10-23"), 5)
	b.writeDay(t, date("2026-10-24"), 7)
	clock.advanceTo(next)
	clock.awaitWaiter(t)
	if n := b.count(t, `SELECT count(*) FROM runs WHERE business_date = '2026-10-23' AND item_count = 5`); n != 1 {
		t.Errorf("2026-10-23 not enqueued at the next tick (%d runs)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM runs WHERE business_date = '2026-10-24' AND item_count = 7`); n != 1 {
		t.Errorf("2026-10-24 not enqueued at its tick (%d runs)", n)
	}
}

func TestTableSourceReadsTheDateWindowInTheZone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE TABLE game_payments (transaction_id text, account_id text, amount_minor bigint, currency text,
		                            status text, occurred_at timestamptz, note text);
		INSERT INTO game_payments VALUES
		  ('before', 'a', 1, 'EUR', 'succeeded', '2026-10-23 23:59:59+02', 'previous day in Berlin'),
		  ('first',  'a', 2, 'EUR', 'succeeded', '2026-10-24 00:00:00+02', 'midnight in Berlin'),
		  ('late',   'b', 3, 'USD', 'refunded',  '2026-10-24 23:30:00+02', 'still 10-24 in Berlin, 10-24 21:30 UTC'),
		  ('after',  'b', 4, 'EUR', 'succeeded', '2026-10-25 00:00:00+02', 'next day')`)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := schedule.ParseSpec("0 2 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	src, err := schedule.Table(b.pool, "game_payments", berlin)
	if err != nil {
		t.Fatal(err)
	}
	enq, err := enqueue.New(b.pool, enqueue.Config{Queue: queue.New(b.pool, queue.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	s, err := schedule.New(b.pool, enq, schedule.Config{Spec: spec, DateOffset: -1, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	tick := s.Tick(ctx, time.Date(2026, 10, 25, 2, 0, 0, 0, berlin), false)
	if tick.Outcome != schedule.Enqueued || tick.Result.Items != 2 {
		t.Fatalf("tick = %+v (err %v), want 2 items enqueued", tick, tick.Err)
	}
	if n := b.count(t, `SELECT count(*) FROM items WHERE transaction_id IN ('first', 'late')`); n != 2 {
		t.Fatalf("items of the window: %d, want first and late", n)
	}
	if n := b.count(t, `SELECT count(*) FROM runs WHERE source = 'table:game_payments' AND time_zone = 'Europe/Berlin'`); n != 1 {
		t.Fatal("run source is not table:game_payments")
	}

	// A bad row is rejected by the same validation as a file, naming it.
	if _, err := b.pool.Exec(ctx, `INSERT INTO game_payments VALUES ('bad', 'c', 5, 'euro', 'succeeded', '2026-10-25 10:00:00+02', '')`); err != nil {
		t.Fatal(err)
	}
	tick = s.Tick(ctx, time.Date(2026, 10, 26, 2, 0, 0, 0, berlin), false)
	if tick.Outcome != schedule.Failed || !strings.Contains(tick.Err.Error(), "table:game_payments") || !strings.Contains(tick.Err.Error(), "currency") {
		t.Fatalf("bad row: %+v, want a failure naming the table and the currency", tick)
	}
	// So is a table that does not exist.
	missing, err := schedule.Table(b.pool, "no_such_table", berlin)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := schedule.New(b.pool, enq, schedule.Config{Spec: spec, DateOffset: -1, Source: missing})
	if err != nil {
		t.Fatal(err)
	}
	if tick := s2.Tick(ctx, time.Date(2026, 10, 27, 2, 0, 0, 0, berlin), false); tick.Outcome != schedule.Failed {
		t.Fatalf("missing table: %+v, want failed", tick)
	}
}

func TestParseTableName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"payments", "export.payments_2026", "_x", strings.Repeat("x", 63)} {
		if _, err := schedule.ParseTableName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", "a.b.c", "1payments", "payments; DROP TABLE runs", `"quoted"`, "pay-ments", strings.Repeat("x", 64)} {
		if _, err := schedule.ParseTableName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}

// TestPruneAfterEachTick runs a scheduler with PruneAfter 90 days through
// one tick: after it, the acked messages and the tick of a run completed
// more than 90 days before the tick are gone, those of a run completed 27
// days before stay, and the ledger keeps both runs' items.
func TestPruneAfterEachTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, recent, today := date("2025-11-30"), date("2026-02-28"), date("2026-03-27")
	for _, d := range []payments.Date{old, recent, today} {
		b.writeDay(t, d, 5)
	}
	spec, err := schedule.ParseSpec("30 2 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	src, err := schedule.FileTemplate(filepath.Join(b.dir, "payments-{date}.csv"))
	if err != nil {
		t.Fatal(err)
	}
	q := queue.New(b.pool, queue.Config{})
	enq, err := enqueue.New(b.pool, enqueue.Config{Queue: q, Actor: "pruner"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var befores []time.Time
	prune := func(ctx context.Context, before time.Time) error {
		mu.Lock()
		befores = append(befores, before)
		mu.Unlock()
		completed, err := ledger.RunsCompletedBefore(ctx, b.pool, before)
		if err != nil {
			return err
		}
		if _, err := q.PruneAcked(ctx, completed, 2, false); err != nil {
			return err
		}
		_, err = schedule.PruneTicks(ctx, b.pool, before, completed, false)
		return err
	}
	clock := newFakeClock(time.Date(2025, 12, 1, 2, 30, 0, 0, berlin))
	s, err := schedule.New(b.pool, enq, schedule.Config{Spec: spec, DateOffset: -1, Source: src, Name: "pruner",
		Clock: clock, PruneAfter: 90 * 24 * time.Hour, Prune: prune})
	if err != nil {
		t.Fatal(err)
	}
	// The two earlier nights, ticked by hand, their runs done and completed
	// an hour after their tick.
	for _, at := range []time.Time{time.Date(2025, 12, 1, 2, 30, 0, 0, berlin), time.Date(2026, 3, 1, 2, 30, 0, 0, berlin)} {
		clock.advanceTo(at)
		if tk := s.Tick(ctx, at, false); tk.Outcome != schedule.Enqueued {
			t.Fatalf("tick at %s: %s (%v)", at, tk.Outcome, tk.Err)
		}
		d := spec.DateOf(at, -1)
		for _, sql := range []string{
			`UPDATE queue_messages SET state = 'acked' WHERE run_id IN (SELECT run_id FROM runs WHERE business_date = $1)`,
			`UPDATE runs SET completed_at = $2 WHERE business_date = $1`,
		} {
			args := []any{d.String()}
			if strings.HasPrefix(sql, "UPDATE runs") {
				args = append(args, at.Add(time.Hour))
			}
			if _, err := b.pool.Exec(ctx, sql, args...); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	if len(befores) != 0 {
		t.Fatalf("Tick pruned (%v); only Run does", befores)
	}

	clock.advanceTo(time.Date(2026, 3, 27, 12, 0, 0, 0, berlin))
	start(t, s)
	tick := time.Date(2026, 3, 28, 2, 30, 0, 0, berlin)
	if got := clock.awaitWaiter(t); !got.Equal(tick) {
		t.Fatalf("scheduler waits for %s, want %s", got, tick)
	}
	clock.advanceTo(tick)
	clock.awaitWaiter(t) // the tick and its prune are done

	mu.Lock()
	got := append([]time.Time(nil), befores...)
	mu.Unlock()
	if want := tick.Add(-90 * 24 * time.Hour); len(got) != 1 || !got[0].Equal(want) {
		t.Fatalf("pruned with before %v, want once with %s", got, want)
	}
	for _, c := range []struct {
		d                     payments.Date
		messages, ticks, item int
	}{{old, 0, 0, 5}, {recent, 5, 1, 5}, {today, 5, 1, 5}} {
		if n := b.count(t, `SELECT count(*) FROM queue_messages m JOIN runs r USING (run_id) WHERE r.business_date = $1`, c.d.String()); n != c.messages {
			t.Errorf("%s: %d queue messages left, want %d", c.d, n, c.messages)
		}
		if n := b.count(t, `SELECT count(*) FROM schedule_ticks WHERE business_date = $1`, c.d.String()); n != c.ticks {
			t.Errorf("%s: %d ticks left, want %d", c.d, n, c.ticks)
		}
		if n := b.count(t, `SELECT count(*) FROM items i JOIN runs r USING (run_id) WHERE r.business_date = $1`, c.d.String()); n != c.item {
			t.Errorf("%s: %d items left, want %d", c.d, n, c.item)
		}
	}
}
