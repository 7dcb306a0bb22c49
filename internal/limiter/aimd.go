package limiter

import (
	"math"
	"time"
)

// AIMD defaults, shared by AIMD and Shared.
const (
	// DefaultDecrease multiplies the effective rate on a throttle.
	DefaultDecrease = 0.5
	// DefaultIncrease is the fraction of the ceiling added per second of
	// throttle-free success.
	DefaultIncrease = 0.05
	// minHold is the shortest time between two multiplicative decreases.
	minHold = time.Second
)

// DefaultFloor returns the floor used when none is configured: ceiling/100,
// at least 0.5 tokens per second, never above the ceiling.
func DefaultFloor(ceiling float64) float64 {
	return math.Min(ceiling, math.Max(0.5, ceiling/100))
}

// AIMD is the adaptive effective rate: additive increase, multiplicative
// decrease. A throttle multiplies the rate by Decrease, at most once per
// Retry-After window (so the 429s of calls already in flight count once);
// every second of throttle-free success adds Increase×ceiling. The rate stays
// within [floor, ceiling].
//
// Shared keeps the same state in its PostgreSQL row and applies the same
// rules in SQL; AIMD is the in-memory form and the reference for them. The
// zero value is not usable; call NewAIMD. Not safe for concurrent use.
type AIMD struct {
	ceiling  float64
	floor    float64
	decrease float64
	increase float64

	rate        float64
	holdUntil   time.Time // no decrease and no increase before this
	increasedAt time.Time // last additive increase
}

// NewAIMD returns an adaptive rate starting at ceiling. floor <= 0 means
// DefaultFloor(ceiling); decrease outside (0, 1) means DefaultDecrease;
// increase <= 0 means DefaultIncrease.
func NewAIMD(ceiling, floor, decrease, increase float64) *AIMD {
	a := &AIMD{decrease: decrease, increase: increase}
	if !(a.decrease > 0 && a.decrease < 1) {
		a.decrease = DefaultDecrease
	}
	if !(a.increase > 0) {
		a.increase = DefaultIncrease
	}
	a.SetCeiling(ceiling, floor)
	a.rate = a.ceiling
	return a
}

// SetCeiling changes the ceiling (and the floor, with the same defaulting as
// NewAIMD) and clamps the current rate into the new range.
func (a *AIMD) SetCeiling(ceiling, floor float64) {
	if !(ceiling > 0) || math.IsInf(ceiling, 0) {
		ceiling = minRate
	}
	if !(floor > 0) {
		floor = DefaultFloor(ceiling)
	}
	a.ceiling = ceiling
	a.floor = math.Min(floor, ceiling)
	a.rate = a.clamp(a.rate)
}

func (a *AIMD) clamp(r float64) float64 {
	if math.IsNaN(r) {
		return a.floor
	}
	return math.Max(a.floor, math.Min(a.ceiling, r))
}

// Rate returns the current effective rate in tokens per second.
func (a *AIMD) Rate() float64 { return a.rate }

// Ceiling returns the configured ceiling.
func (a *AIMD) Ceiling() float64 { return a.ceiling }

// Floor returns the floor.
func (a *AIMD) Floor() float64 { return a.floor }

// Throttled records a 429 at now with the provider's Retry-After (0 when
// absent) and returns the new rate. The first throttle of a window
// multiplies the rate by the decrease factor and opens a hold of
// max(retryAfter, 1s) during which further throttles change nothing.
func (a *AIMD) Throttled(now time.Time, retryAfter time.Duration) float64 {
	if now.Before(a.holdUntil) {
		return a.rate
	}
	a.rate = a.clamp(a.rate * a.decrease)
	a.holdUntil = now.Add(max(retryAfter, minHold))
	return a.rate
}

// Succeeded records a non-throttled answer at now and returns the new rate:
// the rate grows by Increase×ceiling per second since the later of the last
// increase and the end of the hold, counting at most one second per call so
// idle time does not count as success.
func (a *AIMD) Succeeded(now time.Time) float64 {
	if now.Before(a.holdUntil) {
		return a.rate
	}
	since := a.increasedAt
	if a.holdUntil.After(since) {
		since = a.holdUntil
	}
	if !since.IsZero() {
		elapsed := math.Min(1, math.Max(0, now.Sub(since).Seconds()))
		a.rate = a.clamp(a.rate + a.increase*a.ceiling*elapsed)
	}
	a.increasedAt = now
	return a.rate
}

// Follow sets the rate to r (the recovery curve's rate), within [floor,
// ceiling], in place of the additive increase, and returns the new rate.
// The additive increase resumes from now when the curve ends.
func (a *AIMD) Follow(now time.Time, r float64) float64 {
	a.rate = a.clamp(r)
	a.increasedAt = now
	return a.rate
}

// Cap lowers the rate to at most r (a rate implied by the provider's
// headers), never below the floor, and returns the new rate. It does not
// open a hold: successes keep probing upwards, and the next header caps again.
func (a *AIMD) Cap(r float64) float64 {
	if r < a.rate {
		a.rate = a.clamp(r)
	}
	return a.rate
}
