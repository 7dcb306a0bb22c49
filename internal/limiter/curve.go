package limiter

import (
	"math"
	"time"
)

// The recovery curve's shape (see curve).
const (
	// probeRecovery is the concave approach after a throttle while probing
	// above the plateau: the plateau just held, so the way back is short.
	probeRecovery = time.Second
	// plateauHold is how long the rate stays on the plateau before probing.
	plateauHold = 5 * time.Second
	// probeScale is how long the probe takes to double the plateau.
	probeScale = 4 * time.Second
	// plateauMargin is how far under the learned ceiling a new plateau sits.
	plateauMargin = 0.05
	// plateauCreep bounds how much a probe throttle raises the plateau: a
	// steady limit is approached from below, a step at a time.
	plateauCreep = 0.01
	// probeJump is how far above the plateau a probe must get before its
	// throttle counts as a raised limit, which moves the plateau at once.
	probeJump = 0.5
	// estimateWindow is the span of effective rate before a throttle that
	// the learned ceiling averages.
	estimateWindow = 2 * time.Second
	// minEstimateSpan is the shortest span worth averaging; below it the
	// ceiling is the rate at the throttle.
	minEstimateSpan = 250 * time.Millisecond
)

// curve drives the effective rate after a throttle, in the shape of TCP
// CUBIC's window: a concave approach to a plateau under the learned ceiling,
// a stay on the plateau, then a convex probe beyond it.
//
// At a throttle it learns the ceiling: the mean rate in force over the
// estimateWindow before it (since the end of the previous pause), never more
// than the rate at the throttle. Against a token-bucket provider the rate at
// the throttle overshoots by however long the provider's burst hid the
// excess; the mean does much less. The plateau is (1−plateauMargin)×ceiling.
// A throttle while probing above the plateau proves the plateau held: the
// plateau rises by at most plateauCreep (unless the new ceiling is more than
// probeJump above it: then the limit was raised and the plateau follows the
// ceiling), and the way back after the pause is short (probeRecovery).
//
// The rate at time x after the pause, with P the plateau and s the rate just
// after the multiplicative decrease (Decrease × the rate at the throttle):
// P − (P−s)(1 − x/K)³ up to K, P for plateauHold, then P(1 + (y/probeScale)³)
// with y the time since the plateau ended.
//
// The zero value is not usable; call newCurve. Not safe for concurrent use.
type curve struct {
	decrease float64
	recovery time.Duration

	// Integral of the observed rate: samples of (time, tokens since the
	// first sample), oldest first, pruned to about estimateWindow.
	samples []rateSample
	lastAt  time.Time
	last    float64 // rate in force since lastAt

	at       time.Time     // latest throttle; zero: none, no curve
	hold     time.Time     // throttles before this belong to the one at at
	resumeAt time.Time     // end of the throttle's pause: the curve's origin
	approach time.Duration // concave approach after this throttle
	start    float64       // rate at resumeAt
	plateau  float64
}

type rateSample struct {
	at     time.Time
	tokens float64
}

// newCurve returns a curve for the given multiplicative decrease (in
// (0, 1)) and concave approach after a throttle (> 0).
func newCurve(decrease float64, recovery time.Duration) *curve {
	return &curve{decrease: decrease, recovery: recovery}
}

// observe records that rate is in force from now on.
func (c *curve) observe(now time.Time, rate float64) {
	switch {
	case c.lastAt.IsZero():
		c.samples = append(c.samples[:0], rateSample{at: now})
	case now.After(c.lastAt):
		tokens := c.samples[len(c.samples)-1].tokens + c.last*now.Sub(c.lastAt).Seconds()
		c.samples = append(c.samples, rateSample{at: now, tokens: tokens})
		// Keep one sample at or before the window's start.
		i := 0
		for i+1 < len(c.samples) && !c.samples[i+1].at.After(now.Add(-estimateWindow)) {
			i++
		}
		if i > 0 {
			c.samples = append(c.samples[:0], c.samples[i:]...)
		}
	default:
		c.last = rate
		return
	}
	c.lastAt, c.last = now, rate
}

// tokensAt returns the integral of the observed rate from the first sample
// to t, which must not be before it.
func (c *curve) tokensAt(t time.Time) float64 {
	n := len(c.samples)
	if !t.Before(c.lastAt) {
		return c.samples[n-1].tokens + c.last*t.Sub(c.lastAt).Seconds()
	}
	for i := n - 2; i >= 0; i-- {
		if s, next := c.samples[i], c.samples[i+1]; !t.Before(s.at) {
			return s.tokens + (next.tokens-s.tokens)*t.Sub(s.at).Seconds()/next.at.Sub(s.at).Seconds()
		}
	}
	return 0
}

// average returns the mean observed rate over [from, now], or false when
// the samples cover less than minEstimateSpan of it.
func (c *curve) average(from, now time.Time) (float64, bool) {
	if len(c.samples) == 0 {
		return 0, false
	}
	if first := c.samples[0].at; from.Before(first) {
		from = first
	}
	span := now.Sub(from)
	if span < minEstimateSpan {
		return 0, false
	}
	return (c.tokensAt(now) - c.tokensAt(from)) / span.Seconds(), true
}

// throttled records a throttle seen at now, while rate was in force, whose
// pause ends at resume (now plus the provider's Retry-After; for a throttle
// another process saw, the penalty in the row), and reports whether it
// counted: a throttle inside the hold of the previous one (its pause, at
// least 1 s) is the same event, seen by calls already in flight, and changes
// nothing.
func (c *curve) throttled(now time.Time, rate float64, resume time.Time) bool {
	if !c.at.IsZero() && now.Before(c.hold) {
		return false
	}
	c.observe(now, rate)
	ceiling, ok := c.average(maxTime(now.Add(-estimateWindow), c.resumeAt), now)
	if !ok || ceiling > rate {
		ceiling = rate
	}
	plateau := ceiling * (1 - plateauMargin)
	c.approach = c.recovery
	if !c.at.IsZero() && now.Sub(c.resumeAt) >= c.approach+plateauHold {
		// Thrown while probing: the plateau held.
		c.approach = min(c.recovery, probeRecovery)
		if ceiling <= c.plateau*(1+probeJump) {
			plateau = math.Max(c.plateau, math.Min(plateau, c.plateau*(1+plateauCreep)))
		}
	}
	c.plateau = plateau
	c.at, c.hold = now, maxTime(resume, now.Add(minHold))
	c.resumeAt = resume
	c.start = math.Min(rate*c.decrease, plateau)
	return true
}

// rate returns the curve's rate at now, or 0 before the first throttle.
func (c *curve) rate(now time.Time) float64 {
	if c.at.IsZero() {
		return 0
	}
	x := max(now.Sub(c.resumeAt), 0)
	p := c.plateau
	switch {
	case x < c.approach:
		left := 1 - x.Seconds()/c.approach.Seconds()
		return p - (p-c.start)*left*left*left
	case x < c.approach+plateauHold:
		return p
	default:
		y := (x - c.approach - plateauHold).Seconds() / probeScale.Seconds()
		return p * (1 + y*y*y)
	}
}
