package limiter

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 10, 24, 2, 0, 0, 0, time.UTC)

func TestBucketReserve(t *testing.T) {
	t.Parallel()
	type step struct {
		at   time.Duration // offset from t0
		want time.Duration // wait returned by Reserve
	}
	tests := []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{"burst then debt", 10, 2, []step{{0, 0}, {0, 0}, {0, 100 * time.Millisecond}, {0, 200 * time.Millisecond}}},
		{"refill on read", 10, 2, []step{{0, 0}, {0, 0}, {100 * time.Millisecond, 0}, {100 * time.Millisecond, 100 * time.Millisecond}}},
		{"refill capped at burst", 1, 1, []step{{0, 0}, {time.Hour, 0}, {time.Hour, time.Second}}},
		{"debt repaid over time", 2, 1, []step{{0, 0}, {0, 500 * time.Millisecond}, {time.Second, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBucket(tt.rate, tt.burst, t0)
			for i, s := range tt.steps {
				if got := b.Reserve(t0.Add(s.at)); got != s.want {
					t.Errorf("step %d at +%v: wait %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

func TestBucketPenalise(t *testing.T) {
	t.Parallel()
	b := newBucket(100, 50, t0)
	b.Penalise(t0, 30*time.Second, 1)
	deadline := t0.Add(30 * time.Second)
	if got := b.PenaltyUntil(); !got.Equal(deadline) {
		t.Fatalf("PenaltyUntil = %v, want %v", got, deadline)
	}
	// Every reservation made during the penalty waits until its end, and the
	// end does not release a burst: the first is granted at the deadline,
	// the next ones at the rate.
	for i := range 5 {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		grant := now.Add(b.Reserve(now))
		want := deadline.Add(time.Duration(i) * 10 * time.Millisecond)
		if !grant.Equal(want) {
			t.Errorf("reservation %d at %v granted at %v, want %v", i, now, grant, want)
		}
	}
	// A shorter penalty does not shorten the longer one.
	b.Penalise(t0.Add(time.Second), time.Second, 1)
	if w := b.Reserve(t0.Add(2 * time.Second)); t0.Add(2 * time.Second).Add(w).Before(deadline) {
		t.Errorf("shorter penalty released a token before the first deadline")
	}
}

// TestBucketRateBound is the property test: for random sequences of
// reservations and penalties on a simulated clock, no window of length t
// contains more than burst + rate×t grants, and no reservation made after a
// penalty is granted before its deadline.
func TestBucketRateBound(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		rate := 0.5 + rng.Float64()*200
		burst := 1 + rng.IntN(30)
		b := newBucket(rate, burst, t0)
		now := t0
		var grants []time.Time
		for range 400 {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(time.Second) / rate * 2))
			switch r := rng.IntN(100); {
			case r < 3:
				d := time.Duration(rng.Int64N(int64(3 * time.Second)))
				b.Penalise(now, d, 1)
				deadline := now.Add(d)
				for range 1 + rng.IntN(5) {
					g := now.Add(b.Reserve(now))
					if g.Before(deadline) {
						t.Fatalf("seed %d: grant at %v before penalty deadline %v", seed, g, deadline)
					}
					grants = append(grants, g)
				}
			default:
				for range 1 + rng.IntN(4) {
					grants = append(grants, now.Add(b.Reserve(now)))
				}
			}
		}
		checkRateBound(t, grants, rate, burst, 0)
	}
}

// checkRateBound fails if any closed window [grants[i], grants[j]] holds more
// than burst + rate×(its length) + slack grants. For each j it keeps the
// best start i (the maximum of rate×g[i] − i), so the check is linear.
func checkRateBound(t *testing.T, grants []time.Time, rate float64, burst int, slack float64) {
	t.Helper()
	g := slices.Clone(grants)
	slices.SortFunc(g, func(a, b time.Time) int { return a.Compare(b) })
	if len(g) == 0 {
		return
	}
	sec := func(i int) float64 { return g[i].Sub(g[0]).Seconds() }
	best, bestI := math.Inf(-1), 0
	for j := range g {
		if v := rate*sec(j) - float64(j); v > best {
			best, bestI = v, j
		}
		// count - rate×length for the window [bestI, j]
		excess := float64(j+1) - rate*sec(j) + best
		if excess > float64(burst)+slack+1e-6 {
			t.Fatalf("%d grants in [%v, %v] (%v), limit burst %d + rate %.3f×t + %.1f",
				j-bestI+1, g[bestI].Format(time.StampMicro), g[j].Format(time.StampMicro), g[j].Sub(g[bestI]), burst, rate, slack)
		}
	}
}

func TestBucketSetLimit(t *testing.T) {
	t.Parallel()
	b := newBucket(10, 10, t0)
	b.SetLimit(t0, 1, 2)
	if got := b.Tokens(t0); got != 2 {
		t.Fatalf("tokens after lowering burst = %v, want 2", got)
	}
	b.Reserve(t0)
	b.Reserve(t0)
	if w := b.Reserve(t0); w != time.Second {
		t.Fatalf("wait at new rate 1/s = %v, want 1s", w)
	}
	if newBucket(math.NaN(), 0, t0).Burst() != 1 {
		t.Fatal("invalid burst not raised to 1")
	}
}
