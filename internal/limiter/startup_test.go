package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// nightDriver feeds a Shared on a fake clock as a busy consumer would: every
// step the callers took rate×step tokens, the provider accepted them, and
// the answers travel to the row with the next lease.
type nightDriver struct {
	t     *testing.T
	l     *Shared
	clock *fakeClock
}

// run advances the clock by d in steps of 100 ms, each with the accepted
// answers of a consumer sending at rate.
func (n nightDriver) run(d time.Duration, rate float64) {
	n.t.Helper()
	const step = 100 * time.Millisecond
	for elapsed := time.Duration(0); elapsed < d; elapsed += step {
		n.clock.Advance(step)
		for range int(rate * step.Seconds()) {
			n.l.Succeeded()
		}
		n.lease()
	}
}

// lease makes the limiter read and write its row now, as a Wait does when
// it has no slot left.
func (n nightDriver) lease() {
	n.t.Helper()
	n.l.mu.Lock()
	n.l.local.slots = nil
	err := n.l.fetch(context.Background(), n.clock.Now())
	n.l.mu.Unlock()
	if err != nil {
		n.t.Fatal(err)
	}
}

func (n nightDriver) throttle(retryAfter time.Duration) {
	n.t.Helper()
	if err := n.l.Throttled(context.Background(), retryAfter, RateLimited); err != nil {
		n.t.Fatal(err)
	}
}

// settingsSet returns a database whose limiter "night" has the settings s,
// and a fake clock at t0.
func settingsSet(t *testing.T, s Settings) (*pgxpool.Pool, *fakeClock) {
	t.Helper()
	pool := pgtest.New(t)
	if err := SaveSettings(context.Background(), pool, "night", s, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return pool, &fakeClock{now: t0}
}

func newNight(t *testing.T, pool *pgxpool.Pool, clock *fakeClock) nightDriver {
	return nightDriver{t: t, l: openShared(t, pool, Config{Name: "night", Now: clock.Now, LocalClock: true}), clock: clock}
}

// TestStartUpAfterAnEarlierNight checks that a consumer started hours after
// a night with 429s starts at the rate that night ended with: the stored
// throttle is history, not a fresh 429 (a new process used to replay it and
// crawl at the floor, a hundredth of the rate, for seconds).
func TestStartUpAfterAnEarlierNight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		refusals  int // 429s of the night, a second apart
		nightRate float64
	}{
		// The provider refused the limit set once: it is still trusted.
		{"one refusal of the limit set", 1, 200},
		// Refused twice: the night measured the provider's rate.
		{"the limit measured", 3, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, clock := settingsSet(t, Settings{Rate: 200, Burst: 20})
			night := newNight(t, pool, clock)
			night.run(2*time.Second, tc.nightRate)
			for range tc.refusals {
				night.throttle(time.Second)
				night.run(2*time.Second, tc.nightRate)
			}
			night.run(10*time.Second, tc.nightRate)
			ended := night.l.Snapshot()
			want := ended.EffectiveRate
			if ended.Estimate > 0 {
				want = ended.Estimate
			}
			_ = night.l.Close()

			clock.Advance(8 * time.Hour)
			next := newNight(t, pool, clock)
			// Two seconds into the next night, with the calls it sent
			// accepted.
			next.run(2*time.Second, want)
			got := next.l.Snapshot()
			t.Logf("the night ended at %.1f/s (estimate %.1f/s); the next one runs at %.1f/s after 2 s",
				ended.EffectiveRate, ended.Estimate, got.EffectiveRate)
			if got.EffectiveRate < 0.9*want {
				t.Errorf("the next night runs at %.3f/s after 2 s, want at least 90%% of %.1f/s", got.EffectiveRate, want)
			}
		})
	}
}

// TestToldLimitTrustedUntilRefusedTwice checks that a limit an operator set
// (here the provider's exact 160/s with a burst of 10) is kept after one
// 429 in the first second, and given up only at the second refusal. It used
// to halve at the first 429 and climb back over seconds.
func TestToldLimitTrustedUntilRefusedTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, clock := settingsSet(t, Settings{Rate: 160, Burst: 10})
	n := newNight(t, pool, clock)
	n.run(300*time.Millisecond, 160)
	n.throttle(time.Second)
	for range 6 {
		n.run(time.Second, 160)
		if r := n.l.Snapshot().EffectiveRate; r != 160 {
			t.Fatalf("%v after one 429: effective rate %.3f/s, want the 160/s set", clock.Now().Sub(t0), r)
		}
	}

	// A provider that accepts only 100/s refuses the limit set twice in
	// quick succession: then the discovery measures.
	if err := SaveSettings(ctx, pool, "night", Settings{Rate: 160, Burst: 10}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	n.run(time.Second, 100)
	n.throttle(time.Second)
	// The second refusal comes after the pause: within it, a 429 is the
	// same event.
	n.run(1300*time.Millisecond, 100)
	n.throttle(time.Second)
	n.run(300*time.Millisecond, 100)
	if r := n.l.Snapshot().EffectiveRate; r >= 160 {
		t.Errorf("after the second refusal the effective rate is still %.3f/s: discovery should take over", r)
	}
}

// TestLimitSetClearsTheMeasurement checks that setting the limit after a
// night that measured the provider starts the next one from the limit set,
// trusted, at full rate: the refusals and the estimate stored are cleared,
// and the night's throttles are history.
func TestLimitSetClearsTheMeasurement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, clock := settingsSet(t, Settings{Rate: 200, Burst: 20})
	night := newNight(t, pool, clock)
	night.run(2*time.Second, 120)
	for range 3 {
		night.throttle(time.Second)
		night.run(2*time.Second, 120)
	}
	night.run(10*time.Second, 120)
	_ = night.l.Close()
	if s, err := LoadState(ctx, pool, "night"); err != nil || s.Refusals < trustedRefusals || s.Estimate == 0 {
		t.Fatalf("after the night: %+v, %v; want %d refusals or more and an estimate stored", s, err, trustedRefusals)
	}

	clock.Advance(8 * time.Hour)
	if err := SaveSettings(ctx, pool, "night", Settings{Rate: 150, Burst: 15}, SetBy{Actor: "test", Reason: "the provider's new quota"}); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadState(ctx, pool, "night"); err != nil || s.Refusals != 0 || s.Estimate != 0 || s.EstimateBurst != 0 {
		t.Fatalf("after limit set: %+v, %v; want no refusals and no estimate", s, err)
	}
	next := newNight(t, pool, clock)
	next.run(2*time.Second, 150)
	if r := next.l.Snapshot().EffectiveRate; r != 150 {
		t.Errorf("the night after limit set runs at %.3f/s after 2 s, want the 150/s set", r)
	}
}
