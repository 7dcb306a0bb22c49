package limiter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// modelRow is the row's state in the model's terms, for comparison.
type modelRow struct {
	tokens        float64
	updatedAt     time.Time
	effectiveRate float64
	penaltyUntil  time.Time
	holdUntil     time.Time
	increasedAt   time.Time
	throttles     int64
	// The discovery's counts: accepted calls, and the latest counted
	// throttle with the count then.
	accepted          int64
	throttledAt       time.Time
	throttledAccepted int64
}

func (r modelRow) String() string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return "+" + t.Sub(t0).String()
	}
	return fmt.Sprintf("tokens %.9f at %s, effective rate %.9f, penalty until %s, hold until %s, increased at %s, %d throttles, "+
		"%d accepted, throttled at %s with %d",
		r.tokens, at(r.updatedAt), r.effectiveRate, at(r.penaltyUntil), at(r.holdUntil), at(r.increasedAt), r.throttles,
		r.accepted, at(r.throttledAt), r.throttledAccepted)
}

func readModelRow(t *testing.T, pool *pgxpool.Pool, name string) modelRow {
	t.Helper()
	var r modelRow
	var updated, penalty, hold, increased, throttled *time.Time
	err := pool.QueryRow(context.Background(), `
		SELECT tokens, updated_at, effective_rate, penalty_until, decrease_hold_until, increased_at, throttles,
		       accepted, throttled_at, throttled_accepted
		  FROM rate_limiters WHERE name = $1`, name).
		Scan(&r.tokens, &updated, &r.effectiveRate, &penalty, &hold, &increased, &r.throttles,
			&r.accepted, &throttled, &r.throttledAccepted)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		dst *time.Time
		src *time.Time
	}{{&r.updatedAt, updated}, {&r.penaltyUntil, penalty}, {&r.holdUntil, hold}, {&r.increasedAt, increased}, {&r.throttledAt, throttled}} {
		if p.src != nil {
			*p.dst = p.src.UTC()
		}
	}
	return r
}

// TestStatementsMatchModel drives the lease and penalty statements of one
// row and the test model (bucket and aimd) with the same random sequence of
// leases (with successes, header caps and recovery-curve rates) and
// penalties (throttles and exhausted quotas) on a simulated clock, and
// compares the row with the model after every step.
func TestStatementsMatchModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 11))
		name := fmt.Sprintf("model-%d", seed)
		rate := 1 + rng.Float64()*300
		burst := 1 + rng.IntN(40)
		cfg := Config{
			Name:        name,
			Recovery:    -1,
			Decrease:    0.2 + rng.Float64()*0.7,
			Increase:    0.01 + rng.Float64()*0.3,
			LeaseWindow: time.Duration(10+rng.IntN(300)) * time.Millisecond,
		}
		if err := SaveSettings(ctx, pool, name, Settings{Rate: rate, Burst: burst}, SetBy{Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		clock := &fakeClock{now: t0}
		cfg.Now, cfg.LocalClock = clock.Now, true
		l := openShared(t, pool, cfg)
		floor := DefaultFloor(rate)

		b := newBucket(rate, burst, t0)
		a := newAIMD(rate, floor, cfg.Decrease, cfg.Increase)
		var throttles, accepted, throttledAccepted int64
		var throttledAt time.Time

		for step := range 120 {
			clock.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))).Truncate(time.Microsecond))
			now := clock.Now()
			var what string
			switch r := rng.IntN(10); {
			case r < 2: // a throttle, or an exhausted quota
				d := time.Duration(rng.Int64N(int64(3 * time.Second))).Truncate(time.Microsecond)
				if rng.IntN(4) == 0 {
					d = 0
				}
				factor := cfg.Decrease
				if r == 1 {
					factor = 1
				}
				n := rng.Int64N(5)
				what = fmt.Sprintf("penalise %v ×%.3f, %d accepted", d, factor, n)
				if err := l.penalise(ctx, now, now.Add(d), factor, 1, n); err != nil {
					t.Fatal(err)
				}
				b.Penalise(now, d, 1)
				accepted += n
				if factor < 1 {
					if !now.Before(a.holdUntil) {
						throttledAt, throttledAccepted = now, accepted
					}
					a.Throttled(now, d)
					throttles++
				}
			default: // a lease
				want := 1 + rng.IntN(2*burst)
				success := rng.IntN(3) > 0
				var hint, follow float64
				if rng.IntN(5) == 0 {
					hint = rng.Float64() * rate * 1.2
				}
				if rng.IntN(6) == 0 {
					follow = rng.Float64() * rate * 1.5
				}
				ok := rng.Int64N(5)
				var capacity float64 // the learned bucket, when known
				if rng.IntN(3) == 0 {
					capacity = float64(1 + rng.IntN(burst))
				}
				// The discovery leads from the row's latest throttle, or
				// has not read it yet.
				led := throttledAt
				if rng.IntN(4) == 0 {
					led = throttledAt.Add(-time.Second)
				}
				leads := led.Equal(throttledAt)
				what = fmt.Sprintf("lease %d success %v hint %.3f follow %.3f leads %v, %d accepted", want, success, hint, follow, leads, ok)
				res, err := l.lease(ctx, now, want, report{success: success, accepted: ok, hintRate: hint}, follow, floor,
					stored{capacity: capacity, led: led})
				accepted += ok
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case follow > 0 && leads:
					a.Follow(now, follow)
				case follow > 0:
					// A rate from a discovery that has not read the
					// latest throttle: the row keeps its own.
				case success && !now.Before(b.PenaltyUntil()):
					a.Succeeded(now)
				}
				if hint > 0 {
					a.Cap(hint)
				}
				n, avail, at := b.Lease(now, want, cfg.LeaseWindow, capacity, a.Rate())
				if res.n != n || !near(res.avail, avail) || !res.t0.Equal(at) {
					t.Fatalf("seed %d step %d (%s): lease granted %d of %.6f at %v, model %d of %.6f at %v",
						seed, step, what, res.n, res.avail, res.t0, n, avail, at)
				}
			}
			b.SetLimit(now, a.Rate(), b.Burst())

			got := readModelRow(t, pool, name)
			model := modelRow{
				tokens: b.tokens, effectiveRate: a.Rate(), penaltyUntil: b.PenaltyUntil(),
				holdUntil: a.holdUntil, increasedAt: a.increasedAt, throttles: throttles, updatedAt: b.last,
				accepted: accepted, throttledAt: throttledAt, throttledAccepted: throttledAccepted,
			}
			if !near(got.tokens, model.tokens) || !near(got.effectiveRate, model.effectiveRate) ||
				!got.updatedAt.Equal(model.updatedAt) || !got.penaltyUntil.Equal(model.penaltyUntil) ||
				!got.holdUntil.Equal(model.holdUntil) || !got.increasedAt.Equal(model.increasedAt) ||
				got.throttles != model.throttles || got.accepted != model.accepted ||
				!got.throttledAt.Equal(model.throttledAt) || got.throttledAccepted != model.throttledAccepted {
				t.Fatalf("seed %d step %d (%s) at +%v:\nrow   %v\nmodel %v", seed, step, what, now.Sub(t0), got, model)
			}
		}
	}
}

// near reports whether a and b agree up to rounding.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}
