package limiter

import (
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// Where the matrix's figures cannot all hold.
//
// A bucket or a window without rate-limit headers says nothing of its limit
// while the fleet keeps under it: a limit that rose is found only by calling
// above the old one. To use a rise within riseTarget of when it came, however
// late in the night that is, a limiter must call above the limit at least
// every riseTarget; against a limit that did not rise each such probe draws
// a 429, and the fleet must not call again before its Retry-After. When the
// provider cannot bank what it refills during that pause, the pause is lost:
// probeLoss measures it, in seconds of the rate. Over a steady night of
// matrixLength the probes alone then cost probeLoss × matrixLength /
// riseTarget of matrixLength / 1 s, so a steady night reaches steadyTarget
// only while probeLoss <= (1 − steadyTarget) × riseTarget: 0.25 s. Past it
// the steady and rising nights of one provider (the same shape, rate,
// Retry-After, latency and fleet, indistinguishable until the rise) cannot
// both meet their figures: whichever probe schedule a limiter keeps, one of
// the two misses. The bound leaves out what the start-up and the calls in
// flight with a 429 cost, so it marks fewer cells than a sharper one would.
//
// IETF RateLimit fields give the quota on every answer: a rise shows there
// without a probe, and no cell with them is in conflict.

// conflictLoss is the probe loss past which a steady night's target and a
// rise's cannot both hold (see above).
const conflictLoss = time.Duration((1 - steadyTarget) * riseTarget * float64(time.Second))

// probeLoss is the least a probe's 429 costs against a provider of the
// shape, steady at rate, whose Retry-After is ra, in time at that rate: the
// calls a sender that calls whenever the provider would accept (the most any
// sender can have accepted) loses to the pause a refused call imposes, over
// probeHorizon after it. Two meters run alike until probeAt; there one
// takes the probe's 429 and pauses for its Retry-After (none: not at all),
// the other goes on.
func probeLoss(shape matrixShape, rate float64, ra raStyle) time.Duration {
	c := matrixCell{shape: shape, rate: rate}
	sp := c.spec()
	meter := func() *providersim.Meter {
		m, err := providersim.NewMeter(shape.alg, providersim.Schedule{{Rate: rate}}, sp.burst, shape.window)
		if err != nil {
			panic(err)
		}
		return m
	}
	// A tenth of the time between two of the provider's tokens, at most
	// a millisecond: fine enough that the greedy sender loses under a
	// call to the tick.
	tick := min(time.Millisecond, time.Duration(float64(time.Second)/(10*rate)))
	greedy := func(m *providersim.Meter, from, to time.Duration) (n int) {
		for at := from; at < to; at += tick {
			for {
				if ok, _, _ := m.Take(at); !ok {
					break
				}
				n++
			}
		}
		return n
	}
	end := probeAt + probeHorizon
	kept, paused := meter(), meter()
	greedy(kept, 0, probeAt)
	greedy(paused, 0, probeAt)
	// The probe: calls until one is refused (the greedy sender left
	// nothing, so the first one is), then the pause it says.
	probed := 0
	var wait time.Duration
	for {
		ok, w, _ := paused.Take(probeAt)
		if !ok {
			wait = w
			break
		}
		probed++
	}
	pause, _ := ra.pause(wait)
	probed += greedy(paused, probeAt+max(pause, tick), end)
	lost := greedy(kept, probeAt, end) - probed
	return time.Duration(float64(lost) / rate * float64(time.Second))
}

// The probe comes after the longest window has filled twice, and what it
// costs is counted until well after the longest pause and window.
const (
	probeAt      = 20 * time.Second
	probeHorizon = 30 * time.Second
)

// conflicting reports whether the cell's figures for a steady limit and a
// rise cannot both hold (see conflictLoss): not told the limit, no
// rate-limit headers, and a probe that costs more than conflictLoss.
// losses memoises probeLoss by shape, rate and Retry-After.
func (c matrixCell) conflicting(losses map[string]time.Duration) bool {
	if c.family != familyUnknown || c.shape.headers {
		return false
	}
	key := matrixCell{shape: c.shape, rate: c.rate, ra: c.ra}.String()
	loss, ok := losses[key]
	if !ok {
		loss = probeLoss(c.shape, c.rate, c.ra)
		losses[key] = loss
	}
	return loss > conflictLoss
}

// TestProbeLoss checks probeLoss against what each shape's arithmetic
// says a pause of the Retry-After costs: a bucket of B calls at rate R
// banks B of the pause's refill, so it loses the pause less B/R; a sliding
// or fixed window loses nothing to a pause that ends by the time its
// window frees (the sender that fills it at once waits that long anyway),
// and a whole window to one that ends a window later; a Retry-After
// that says when the provider accepts again, or none, costs nothing.
func TestProbeLoss(t *testing.T) {
	t.Parallel()
	whole := func(s int) raStyle {
		return raStyle{style: providersim.RetryAfterSeconds, min: time.Duration(s) * time.Second}
	}
	exact := raStyle{style: providersim.RetryAfterExact}
	absent := raStyle{style: providersim.RetryAfterAbsent}
	cases := []struct {
		shape string
		rate  float64
		ra    raStyle
		want  time.Duration
	}{
		{"bucket-1call", 20, whole(1), 950 * time.Millisecond},
		{"bucket-1call", 1000, whole(2), 1999 * time.Millisecond},
		{"bucket-0.1s", 200, whole(2), 1900 * time.Millisecond},
		{"bucket-0.1s", 5, whole(1), 800 * time.Millisecond}, // a bucket of one call
		{"bucket-1s", 200, whole(1), 0},
		{"bucket-1s", 200, whole(2), time.Second},
		{"bucket-5s", 20, whole(2), 0},
		{"leaky-20s", 200, whole(2), 0},
		{"log-1s", 200, whole(1), 0},
		{"log-1s", 200, whole(2), time.Second},
		{"log-10s", 20, whole(2), 0},
		{"window-1s", 200, whole(1), 0},
		{"window-1s", 200, whole(2), time.Second},
		{"bucket-1call", 1000, exact, 0},
		{"log-1s", 20, exact, 0},
		{"bucket-0.1s", 200, absent, 0},
		{"window-1s", 5, absent, 0},
	}
	for _, c := range cases {
		got := probeLoss(shapeNamed(c.shape), c.rate, c.ra)
		// Within a call at the rate and the greedy sender's tick.
		slack := time.Duration(float64(time.Second)/c.rate) + time.Millisecond
		if got < c.want-slack || got > c.want+slack {
			t.Errorf("%s at %g/s, Retry-After %v: a probe loses %v, want %v", c.shape, c.rate, c.ra, got, c.want)
		}
	}
}
