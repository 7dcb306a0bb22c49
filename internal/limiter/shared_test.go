package limiter

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// twoPools returns two pools on one fresh database: two processes.
func twoPools(t testing.TB) (*pgxpool.Pool, *pgxpool.Pool) {
	t.Helper()
	conn := pgtest.ConnString(t)
	open := func() *pgxpool.Pool {
		p, err := pgxpool.New(context.Background(), conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	return open(), open()
}

func openShared(t testing.TB, pool *pgxpool.Pool, cfg Config) *Shared {
	t.Helper()
	l, err := Open(context.Background(), pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	s, err := LoadSettings(ctx, pool, "provider")
	if err != nil || s != (Settings{Rate: DefaultRate, Burst: DefaultBurst}) {
		t.Fatalf("LoadSettings without a row = %+v, %v; want defaults", s, err)
	}
	if err := SaveSettings(ctx, pool, "provider", Settings{Rate: 2.5, Burst: 3}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadSettings(ctx, pool, "provider"); err != nil || s != (Settings{Rate: 2.5, Burst: 3}) {
		t.Fatalf("LoadSettings = %+v, %v; want 2.5/3", s, err)
	}
	for _, bad := range []Settings{{0, 1}, {-1, 1}, {1, 0}} {
		if err := SaveSettings(ctx, pool, "provider", bad, SetBy{Actor: "test"}); err == nil {
			t.Errorf("SaveSettings(%+v) accepted", bad)
		}
	}
}

// TestSharedTwoProcessesStayUnderLimit drives two limiters (two pools, one
// row) from eight goroutines for a short real window and checks every
// window of the grant timestamps against burst + rate×t.
func TestSharedTwoProcessesStayUnderLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)
	const rate, burst = 40.0, 5
	if err := SaveSettings(ctx, p1, DefaultName, Settings{Rate: rate, Burst: burst}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	limiters := []*Shared{openShared(t, p1, Config{}), openShared(t, p2, Config{})}
	var mu sync.Mutex
	var grants []time.Time
	runCtx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		l := limiters[i%2]
		wg.Go(func() {
			for {
				if err := l.Wait(runCtx); err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
					}
					return
				}
				now := time.Now()
				mu.Lock()
				grants = append(grants, now)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Slack: a slot used late by timer latency, at most one lease window.
	checkRateBound(t, grants, rate, burst, rate*0.1)
	if min := burst + rate*1.5*0.5; float64(len(grants)) < min {
		t.Errorf("%d grants in 1.5s, want at least %v (half the budget)", len(grants), min)
	}
	var trips, granted int64
	for _, l := range limiters {
		s := l.Snapshot()
		trips += s.RoundTrips
		granted += s.Grants
	}
	if granted != int64(len(grants)) {
		t.Errorf("snapshots count %d grants, callers saw %d", granted, len(grants))
	}
	t.Logf("%d grants, %d round trips", granted, trips)
}

func TestSharedPenaltyHonouredByOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)
	if err := SaveSettings(ctx, p1, DefaultName, Settings{Rate: 100, Burst: 10}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	a, b := openShared(t, p1, Config{}), openShared(t, p2, Config{})
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := a.Throttled(ctx, 700*time.Millisecond, RateLimited); err != nil {
		t.Fatal(err)
	}
	// Postgres keeps microseconds.
	deadline := before.Add(700 * time.Millisecond).Truncate(time.Microsecond)
	for _, l := range []*Shared{a, b} {
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if got := time.Now(); got.Before(deadline) {
			t.Errorf("granted at %v, %v before the penalty ends", got, deadline.Sub(got))
		}
	}
	// The limit set is kept after one refusal: the pause is the only
	// change.
	if s := b.Snapshot(); s.EffectiveRate != 100 || s.Throttles != 1 || s.PenaltyUntil.Before(deadline) {
		t.Errorf("other process sees %+v, want effective rate 100, 1 throttle, penalty until %v", s, deadline)
	}
}

func TestSharedPicksUpSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)
	l := openShared(t, p1, Config{})
	if s := l.Snapshot(); s.Rate != DefaultRate || s.Burst != DefaultBurst {
		t.Fatalf("new limiter %+v, want default settings", s)
	}
	if err := SaveSettings(ctx, p2, DefaultName, Settings{Rate: 3, Burst: 2}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	saved := time.Now()
	for {
		s := l.Snapshot()
		if s.Rate == 3 && s.Burst == 2 && s.EffectiveRate == 3 {
			break
		}
		if time.Since(saved) > time.Second {
			t.Fatalf("after 1s the running limiter still has %+v", s)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
	}
}

// TestSharedAIMD drives the shared adaptive rate on a fake clock: one
// decrease per throttle window, the floor, additive increase up to the
// ceiling, header caps.
func TestSharedAIMD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)
	if err := SaveSettings(ctx, p1, DefaultName, Settings{Rate: 100, Burst: 100}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	// Plain AIMD: the recovery curve is tested on its own.
	l := openShared(t, p1, Config{Now: clock.Now, LocalClock: true, Recovery: -1})
	other := openShared(t, p2, Config{Now: clock.Now, LocalClock: true})
	rate := func() float64 { return l.Snapshot().EffectiveRate }

	mustThrottle := func(d time.Duration) {
		t.Helper()
		if err := l.Throttled(ctx, d, RateLimited); err != nil {
			t.Fatal(err)
		}
	}
	mustThrottle(0)
	if r := rate(); r != 50 {
		t.Fatalf("after a throttle: %v, want 50", r)
	}
	clock.Advance(500 * time.Millisecond)
	mustThrottle(0)
	if r := rate(); r != 50 {
		t.Fatalf("second throttle inside the 1s window: %v, want 50", r)
	}
	for range 10 {
		clock.Advance(time.Second)
		mustThrottle(0)
		if r := rate(); r < 1 || r > 100 {
			t.Fatalf("rate %v outside [floor 1, ceiling 100]", r)
		}
	}
	if r := rate(); r != 1 {
		t.Fatalf("after 11 throttle windows: %v, want the floor 1", r)
	}
	// Sustained success: +5/s (5% of the ceiling per second), up to 100.
	for i := range 25 {
		clock.Advance(time.Second)
		l.Succeeded()
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		want := min(100, 1+5*float64(i))
		if r := rate(); r != want {
			t.Fatalf("after %d s of success: %v, want %v", i+1, r, want)
		}
	}
	// A header implying 10/s caps every process at the next lease.
	l.Observe(Hints{Quota: 10, Window: time.Second})
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rate(); r != 10 {
		t.Fatalf("after a 10/s policy hint: %v, want 10", r)
	}
	// An exhausted quota stops this process at once and the other at its
	// next lease; the clock does not move, so both wait until ctx ends.
	reset := clock.Now().Add(30 * time.Second)
	l.Observe(Hints{HasRemaining: true, Remaining: 0, Reset: reset})
	for i, lim := range []*Shared{l, other} {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := lim.Wait(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("process %d: Wait during an exhausted quota = %v, want deadline exceeded", i, err)
		}
	}
	if s := other.Snapshot(); !s.PenaltyUntil.Equal(reset) {
		t.Errorf("other process sees penalty until %v", s.PenaltyUntil)
	}
}

// BenchmarkSharedWait measures the grant path with an unreachable limit:
// grants per second and database round trips per grant.
func BenchmarkSharedWait(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(map[int]string{1: "goroutines=1", 8: "goroutines=16"}[par], func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.New(b)
			if err := SaveSettings(ctx, pool, DefaultName, Settings{Rate: 1e6, Burst: 1000}, SetBy{Actor: "test"}); err != nil {
				b.Fatal(err)
			}
			l := openShared(b, pool, Config{})
			start := time.Now()
			b.ResetTimer()
			if par == 1 {
				for range b.N {
					if err := l.Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := l.Wait(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			s := l.Snapshot()
			b.ReportMetric(float64(s.Grants)/time.Since(start).Seconds(), "grants/s")
			b.ReportMetric(float64(s.RoundTrips)/float64(s.Grants), "trips/grant")
		})
	}
}

func TestLoadState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	s, err := LoadState(ctx, pool, "other")
	if err != nil || s.Stored || s.Rate != DefaultRate || s.EffectiveRate != DefaultRate {
		t.Fatalf("LoadState without a row = %+v, %v", s, err)
	}
	l := openShared(t, pool, Config{Name: "other"})
	if err := l.Throttled(ctx, time.Minute, RateLimited); err != nil {
		t.Fatal(err)
	}
	s, err = LoadState(ctx, pool, "other")
	if err != nil || !s.Stored || s.EffectiveRate != DefaultRate || s.Throttles != 1 || s.Refusals != 1 || s.PenaltyUntil.IsZero() {
		t.Fatalf("LoadState after a throttle = %+v, %v; want the rate kept and one refusal", s, err)
	}
	// The second refusal, after the first one's hold, lowers the rate.
	l2 := openShared(t, pool, Config{Name: "other", Now: func() time.Time { return time.Now().Add(2 * time.Minute) }, LocalClock: true})
	if err := l2.Throttled(ctx, time.Second, RateLimited); err != nil {
		t.Fatal(err)
	}
	s, err = LoadState(ctx, pool, "other")
	if err != nil || s.EffectiveRate != DefaultRate/2 || s.Throttles != 2 || s.Refusals != 2 {
		t.Fatalf("LoadState after a second throttle = %+v, %v; want the rate halved and two refusals", s, err)
	}
}

// twoProcessesOnAClock sets the default limiter's settings and returns two
// processes' limiters on their own pools, both on one fake clock.
func twoProcessesOnAClock(t *testing.T, set Settings) (l, other *Shared, clock *fakeClock) {
	t.Helper()
	p1, p2 := twoPools(t)
	if err := SaveSettings(context.Background(), p1, DefaultName, set, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	clock = &fakeClock{now: t0}
	l = openShared(t, p1, Config{Now: clock.Now, LocalClock: true})
	other = openShared(t, p2, Config{Now: clock.Now, LocalClock: true})
	return l, other, clock
}

// TestSharedCountsThrottlesForDiscovery checks that every process measures
// from the same throttles: the row counts one per hold, with the fleet's
// accepted calls at that moment, and a process that did not see the 429
// learns of it at its next lease. A ConcurrencyLimited throttle pauses but
// is not counted and does not lower the rate.
func TestSharedCountsThrottlesForDiscovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, other, clock := twoProcessesOnAClock(t, Settings{Rate: 200, Burst: 200})
	for range 30 {
		l.Succeeded()
	}
	if err := l.Throttled(ctx, 0, ConcurrencyLimited); err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Throttles != 0 || s.EffectiveRate != 200 || s.Accepted != 30 {
		t.Fatalf("after a concurrency throttle: %+v, want no throttle counted, rate 200, 30 accepted", s)
	}
	clock.Advance(time.Second)
	if err := l.Throttled(ctx, time.Second, RateLimited); err != nil {
		t.Fatal(err)
	}
	// A second 429 inside the hold is the same event.
	if err := l.Throttled(ctx, time.Second, RateLimited); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if err := other.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Shared{l, other} {
		if p == l {
			if err := l.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p.mu.Lock()
		d := *p.disc
		seen := p.seenAt
		p.mu.Unlock()
		if d.phase == phaseCold || !d.last.at.Equal(t0.Add(time.Second)) || d.last.accepted != 30 || !seen.Equal(t0.Add(time.Second)) {
			t.Errorf("discovery after one throttle: phase %v, last %+v, want measuring from the throttle at +1s with 30 accepted", d.phase, d.last)
		}
	}
	if s := other.Snapshot(); s.Throttles != 2 {
		t.Errorf("throttles %d, want 2 (both inside one hold)", s.Throttles)
	}
}

// countingHandler counts log records by message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Message]++
	return nil
}

func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

// TestPollWarnsOncePerOutage polls a database that has gone away every
// millisecond: the first failure is a warning, the following ones within
// the warning interval are not.
func TestPollWarnsOncePerOutage(t *testing.T) {
	t.Parallel()
	pool, _ := twoPools(t)
	logs := &countingHandler{counts: map[string]int{}}
	l := openShared(t, pool, Config{PollInterval: time.Millisecond, Logger: slog.New(logs)})
	pool.Close()
	before := l.Snapshot().RoundTrips
	for deadline := time.Now().Add(20 * time.Second); l.Snapshot().RoundTrips < before+20; {
		if time.Now().After(deadline) {
			t.Fatalf("the poll made %d reads in 20 s, want 20", l.Snapshot().RoundTrips-before)
		}
		time.Sleep(time.Millisecond)
	}
	if got := logs.count("limiter poll failed"); got != 1 {
		t.Errorf("%d warnings for %d failed polls, want 1", got, l.Snapshot().RoundTrips-before)
	}
}

// TestHistory checks that `limit set` and the discovery's changes reach the
// history, oldest first, and that LoadHistory keeps the last n before until.
func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	if err := SaveSettings(ctx, pool, "h", Settings{Rate: 100, Burst: 10}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Now()}
	l := openShared(t, pool, Config{Name: "h", Now: clock.Now, LocalClock: true})
	if err := l.Throttled(ctx, time.Second, RateLimited); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := LoadHistory(ctx, pool, "h", clock.Now().Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 || all[0].Cause != "limit set" || all[0].Rate != 100 || all[1].Cause != causeThrottle || all[1].Estimate <= 0 {
		t.Fatalf("history %+v, want limit set at 100/s, then a throttle with an estimate (then the probe it plans)", all)
	}
	last, err := LoadHistory(ctx, pool, "h", clock.Now().Add(time.Hour), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != 1 || last[0] != all[len(all)-1] {
		t.Errorf("last change %+v, want %+v", last, all[len(all)-1])
	}
}

// refusedOnce has the limit set refused once by l's 429, then 60 calls
// accepted over 1.5 s: l's next 429, the second refusal, measures the
// provider (20/s) and halves the row's rate.
func refusedOnce(t *testing.T, l *Shared, clock *fakeClock) {
	t.Helper()
	if err := l.Throttled(context.Background(), 0, RateLimited); err != nil {
		t.Fatal(err)
	}
	clock.Advance(1500 * time.Millisecond)
	for range 60 {
		l.Succeeded()
	}
}

// discoveredRate is the rate l's discovery sets in the row at now, within
// the row's floor and rate.
func discoveredRate(l *Shared, now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return math.Max(l.floor(), math.Min(l.snap.Rate, l.disc.rate(now)))
}

// TestOneProcessSetsTheDiscoveredRate: the process whose 429 the row
// counted sets the row's rate with its leases; another process's lease
// leaves it as it is, so the row does not take each process's measurement
// in turn.
func TestOneProcessSetsTheDiscoveredRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, other, clock := twoProcessesOnAClock(t, Settings{Rate: 200, Burst: 200})
	// Two refusals of the limit set, both counted: the second measures
	// the provider and halves the row's rate.
	refusedOnce(t, l, clock)
	if err := l.Throttled(ctx, 0, RateLimited); err != nil {
		t.Fatal(err)
	}
	halved := l.Snapshot().EffectiveRate
	clock.Advance(100 * time.Millisecond)
	if err := other.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := other.Snapshot().EffectiveRate; got != halved {
		t.Errorf("after the other process's lease the row's rate is %g, want %g: it follows the process that counted the 429", got, halved)
	}
	want := discoveredRate(l, t0.Add(1600*time.Millisecond))
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.Snapshot().EffectiveRate; math.Abs(got-want) > 1e-9 || got == halved {
		t.Errorf("after the leading process's lease the row's rate is %g, want its discovery's %g", got, want)
	}
}

// TestOwnThrottleLeadsWhicheverAnswerComesFirst: the process whose 429 the
// row counted leads the discovery, and sets the row's rate, even when
// another of its statements brings the throttle back first: a lease that
// ran just after the 429's statement, or a second 429 of the same pause
// that the row did not count, whose answers are applied before the
// counting one's. It used to take such an answer for another process's
// throttle and follow itself: no process set the row's rate, which stayed
// halved for the rest of the night (a consumer ran at 128/s for 40 s
// against a provider allowing 200/s). An answer overtaken on its way back
// (a lease read before the 429) does not bring the older throttle back.
func TestOwnThrottleLeadsWhicheverAnswerComesFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, first := range []string{"lease", "uncounted 429"} {
		t.Run("first "+first, func(t *testing.T) {
			t.Parallel()
			l, _, clock := twoProcessesOnAClock(t, Settings{Rate: 200, Burst: 200})
			refusedOnce(t, l, clock)
			lease := func() leaseResult {
				t.Helper()
				res, err := l.lease(ctx, clock.Now(), 1, report{}, 0, DefaultFloor(200), stored{})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			overtaken := lease()
			clock.Advance(time.Millisecond)
			counted := l.throttle(0, RateLimited).send(ctx)
			clock.Advance(time.Millisecond)
			switch first {
			case "lease":
				res := lease()
				l.mu.Lock()
				l.apply(res.row, clock.Now())
				l.mu.Unlock()
			default:
				if err := l.applyPenalty(l.throttle(0, RateLimited).send(ctx)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.applyPenalty(counted); err != nil {
				t.Fatal(err)
			}
			l.mu.Lock()
			l.apply(overtaken.row, clock.Now())
			follows, seen := l.follows, l.seenAt
			l.mu.Unlock()
			if counted.row.ThrottledAt == nil || !counted.row.ThrottledAt.Equal(counted.row.Now) {
				t.Fatalf("the second 429 was not counted by the row: %+v", counted.row)
			}
			if follows {
				t.Error("the process follows the 429 it counted itself")
			}
			if !seen.Equal(*counted.row.ThrottledAt) {
				t.Errorf("the throttle last applied is at %v, want the counted one's %v", seen, *counted.row.ThrottledAt)
			}
			halved := counted.row.EffectiveRate
			clock.Advance(100 * time.Millisecond)
			want := discoveredRate(l, clock.Now())
			if err := l.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if got := l.Snapshot().EffectiveRate; math.Abs(got-want) > 1e-9 || got == halved {
				t.Errorf("after the process's lease the row's rate is %g (halved by the 429: %g), want its discovery's %g", got, halved, want)
			}
		})
	}
}

// TestFleetTakesTheLeadWhenTheLeaderIsGone: the process whose 429 the row
// counted sets the row's rate; when it stops, another process takes the
// lead once the row has gone takeoverAfter without a rate set, and sets
// its own discovery's rate. Without the takeover the row kept the rate the
// 429 had halved until the next 429, which a fleet held under the
// provider's rate never draws.
func TestFleetTakesTheLeadWhenTheLeaderIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, other, clock := twoProcessesOnAClock(t, Settings{Rate: 200, Burst: 200})
	refusedOnce(t, l, clock)
	if err := l.Throttled(ctx, 0, RateLimited); err != nil {
		t.Fatal(err)
	}
	halved := l.Snapshot().EffectiveRate
	clock.Advance(100 * time.Millisecond)
	if err := l.Wait(ctx); err != nil { // the leader sets the rate once
		t.Fatal(err)
	}
	led := l.Snapshot().EffectiveRate
	if led == halved {
		t.Fatalf("the leader's lease left the row's rate at %g", halved)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := clock.Now()
	var took time.Duration
	for clock.Now().Sub(stoppedAt) < 2*takeoverAfter {
		clock.Advance(100 * time.Millisecond)
		for range 2 {
			other.Succeeded()
		}
		nightDriver{t: t, l: other, clock: clock}.lease()
		want := discoveredRate(other, clock.Now())
		other.mu.Lock()
		follows := other.follows
		other.mu.Unlock()
		got := other.Snapshot().EffectiveRate
		since := clock.Now().Sub(stoppedAt)
		switch {
		case follows && got != led:
			t.Fatalf("%v after the leader stopped, with another process leading, the row's rate is %g, want the leader's %g", since, got, led)
		case !follows && took == 0:
			took = since
		}
		if !follows && clock.Now().Sub(stoppedAt) > took && math.Abs(got-want) > 1e-9 {
			t.Fatalf("%v after the leader stopped, leading since %v, the row's rate is %g, want this process's discovery's %g", since, took, got, want)
		}
	}
	switch {
	case took == 0:
		t.Errorf("the other process never took the lead in the %v after the leader stopped, want it within a second after %v", 2*takeoverAfter, takeoverAfter)
	case took <= takeoverAfter || took > takeoverAfter+time.Second:
		t.Errorf("the other process took the lead %v after the leader stopped, want within a second after %v", took, takeoverAfter)
	}
}

// TestLeaseAfterARiseFollowsTheSlotsGranted has one process lease at 50/s
// (a slot every 20 ms for 100 ms) and another, 30 ms later, raise the rate
// to 100/s: the second one's slots
// come after the first one's last, at the new spacing, and not among them
// (a provider whose bucket holds one call would refuse the second of two
// calls closer than its rate allows).
func TestLeaseAfterARiseFollowsTheSlotsGranted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, other, clock := twoProcessesOnAClock(t, Settings{Rate: 100, Burst: 1})
	grant := func(p *Shared, rate float64) []time.Time {
		t.Helper()
		now := clock.Now()
		res, err := p.lease(ctx, now, 10, report{}, rate, DefaultFloor(100), stored{})
		if err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.apply(res.row, now)
		p.local.leased(now, 10, res)
		slots := p.local.slots
		p.local.slots = nil
		return slots
	}
	grant(l, 50) // the rate falls to 50/s
	clock.Advance(time.Second)
	first := grant(l, 50)
	clock.Advance(30 * time.Millisecond)
	second := grant(other, 100)
	if len(first) == 0 || len(second) == 0 {
		t.Fatalf("slots %v and %v, want some in each", first, second)
	}
	last := first[len(first)-1]
	for i, s := range second {
		if want := last.Add(time.Duration(i+1) * 10 * time.Millisecond); s.Sub(want).Abs() > time.Microsecond {
			t.Errorf("second process's slot %d at +%v, want +%v (10 ms after the first's last, +%v, and each other)",
				i, s.Sub(t0), want.Sub(t0), last.Sub(t0))
		}
	}
}

// TestPenaltyDatedByTheAnswer: a burst of 429s is one penalty statement
// each, and they queue for the pool's connections. A statement that waited
// must still start the pause when its 429 was answered, not when it ran:
// dated by the statement's clock, the 45 of one burst (80 workers, 200 ms
// answers) pushed the fleet's pause 0.75 s past the last Retry-After.
func TestPenaltyDatedByTheAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ConnString(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := SaveSettings(ctx, pool, DefaultName, Settings{Rate: 100, Burst: 10}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	l := openShared(t, pool, Config{})
	if err := l.Wait(ctx); err != nil { // a round trip: the database's clock is learned
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx) // the pool's one connection, busy
	if err != nil {
		t.Fatal(err)
	}
	const pause, busy = time.Second, 400 * time.Millisecond
	answered := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.Throttled(ctx, pause, RateLimited) }()
	time.Sleep(busy)
	conn.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := answered.Add(pause)
	if got := l.Snapshot().PenaltyUntil; got.Before(want.Add(-50*time.Millisecond)) || got.After(want.Add(busy/2)) {
		t.Errorf("penalty until %v after the 429, want %v: the pause starts when the 429 was answered, not when a connection was free",
			got.Sub(answered), pause)
	}
}
