package limiter

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestAIMD(t *testing.T) {
	t.Parallel()
	type step struct {
		at        time.Duration
		throttle  time.Duration // Retry-After of a throttle; -1 for a success
		wantRate  float64
		wantLabel string
	}
	const success = -1
	tests := []struct {
		name  string
		steps []step
	}{
		{"decrease once per window", []step{
			{0, 2 * time.Second, 50, "first 429 halves"},
			{100 * time.Millisecond, 2 * time.Second, 50, "in-flight 429 ignored"},
			{1900 * time.Millisecond, 0, 50, "still inside the window"},
			{2 * time.Second, 0, 25, "next window halves again"},
		}},
		{"additive increase per second of success", []step{
			{0, 0, 50, "halved"},
			{500 * time.Millisecond, success, 50, "success inside the hold"},
			{time.Second, success, 50, "hold just ended"},
			{2 * time.Second, success, 55, "one second: +5% of ceiling"},
			{2500 * time.Millisecond, success, 57.5, "half a second"},
			{time.Hour, success, 62.5, "idle time counts one second at most"},
		}},
		{"never below floor", []step{
			{0, 0, 50, ""}, {2 * time.Second, 0, 25, ""}, {4 * time.Second, 0, 12.5, ""},
			{6 * time.Second, 0, 6.25, ""}, {8 * time.Second, 0, 5, "clamped to the floor"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAIMD(100, 5, 0, 0)
			for i, s := range tt.steps {
				var got float64
				if s.throttle == success {
					got = a.Succeeded(t0.Add(s.at))
				} else {
					got = a.Throttled(t0.Add(s.at), s.throttle)
				}
				if got != s.wantRate {
					t.Errorf("step %d (%s): rate %v, want %v", i, s.wantLabel, got, s.wantRate)
				}
			}
		})
	}
}

func TestAIMDStaysWithinBounds(t *testing.T) {
	t.Parallel()
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 1))
		ceiling := 0.1 + rng.Float64()*1000
		a := newAIMD(ceiling, 0, rng.Float64(), rng.Float64()*0.5)
		now := t0
		for range 2000 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
			switch rng.IntN(10) {
			case 0:
				a.Throttled(now, time.Duration(rng.Int64N(int64(5*time.Second))))
			case 1:
				a.Cap(rng.Float64() * ceiling * 2)
			case 2:
				if rng.IntN(20) == 0 {
					ceiling = 0.1 + rng.Float64()*1000
					a.SetCeiling(ceiling, 0)
				}
			default:
				a.Succeeded(now)
			}
			if r := a.Rate(); r > a.Ceiling() || r < a.Floor() || a.Floor() > a.Ceiling() {
				t.Fatalf("seed %d: rate %v outside [%v, %v]", seed, r, a.Floor(), a.Ceiling())
			}
		}
	}
}

func TestDefaultFloor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ceiling, want float64 }{{10, 0.5}, {500, 5}, {0.2, 0.2}} {
		if got := DefaultFloor(tt.ceiling); got != tt.want {
			t.Errorf("DefaultFloor(%v) = %v, want %v", tt.ceiling, got, tt.want)
		}
	}
}
