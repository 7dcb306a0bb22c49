package limiter

import (
	"math"
	"time"
)

// The test model: a plain token bucket and an AIMD rate, in memory, that
// follow the rules the row's statements apply in SQL. TestStatementsMatchModel
// drives both with the same sequence and compares them after every step.

// bucket is a token bucket refilled on read, in the reservation style of
// golang.org/x/time/rate: it holds at most burst tokens and gains rate
// tokens per second. Reserve always takes a token and reports how long the
// caller must wait before using it, so the bucket may go into debt; grants
// therefore never exceed burst + rate×t in any window of length t. Lease is
// the row's lease (leaseSQL), Penalise its penalty (penaliseSQL).
//
// The zero value is not usable; call newBucket. Not safe for concurrent use.
type bucket struct {
	rate   float64   // tokens per second, > 0
	burst  float64   // capacity, >= 1
	tokens float64   // tokens at last; negative is debt
	last   time.Time // instant tokens refers to; after a penalty it is in the future
	// penaltyUntil is the latest deadline given to Penalise.
	penaltyUntil time.Time
}

// newBucket returns a full bucket with the given rate (tokens per second,
// > 0) and burst (>= 1) as of now. Out-of-range values are raised to the
// smallest valid one (a tiny positive rate, burst 1).
func newBucket(rate float64, burst int, now time.Time) *bucket {
	b := &bucket{last: now}
	b.setLimit(rate, burst)
	b.tokens = b.burst
	return b
}

func (b *bucket) setLimit(rate float64, burst int) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = minRate
	}
	b.rate = rate
	b.burst = float64(max(burst, 1))
}

// Burst returns the capacity in tokens.
func (b *bucket) Burst() int { return int(b.burst) }

// PenaltyUntil returns the latest deadline given to Penalise (zero if none).
func (b *bucket) PenaltyUntil() time.Time { return b.penaltyUntil }

// advance refills the bucket up to now. Before last (during a penalty)
// nothing is refilled.
func (b *bucket) advance(now time.Time) {
	if !now.After(b.last) {
		return
	}
	b.tokens = b.Tokens(now)
	b.last = now
}

// Tokens returns the number of tokens available at now (negative: debt).
func (b *bucket) Tokens(now time.Time) float64 {
	if !now.After(b.last) {
		return b.tokens
	}
	return math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
}

// Reserve takes one token at now and returns how long the caller must wait
// before acting on it: 0 when a token was available, otherwise the time the
// debt takes to refill (and at least until a pending penalty ends).
func (b *bucket) Reserve(now time.Time) time.Duration {
	b.advance(now)
	base := maxTime(now, b.last)
	b.tokens--
	wait := base.Sub(now)
	if b.tokens < 0 {
		wait += durationOf(-b.tokens / b.rate)
	}
	return wait
}

// Lease takes, at now, as many tokens as Reserve would grant with a wait of
// at most window, up to want, and none during a penalty, at the rate the
// lease sets (rate): a debt is recounted at it first, being the time until
// the slots granted before have passed. The bucket holds at most capacity
// tokens when it is positive (the provider's learned bucket). It returns
// how many, the tokens available before (at the new rate), and the instant
// they refer to.
func (b *bucket) Lease(now time.Time, want int, window time.Duration, capacity, rate float64) (n int, avail float64, at time.Time) {
	b.advance(now)
	if capacity > 0 {
		b.tokens = math.Min(b.tokens, capacity)
	}
	if b.tokens < 0 {
		b.tokens *= rate / b.rate
	}
	b.rate = rate
	avail, at = b.tokens, maxTime(now, b.last)
	if now.Before(b.penaltyUntil) {
		return 0, avail, at
	}
	n = min(want, max(0, int(math.Floor(avail+b.rate*window.Seconds()))))
	b.tokens -= float64(n)
	return n, avail, at
}

// Penalise makes the bucket grant nothing before now+d (a provider's
// Retry-After): tokens reserved after this call wait at least until then,
// and the bucket holds at most refill tokens (at least one) at the deadline:
// what the provider's bucket refilled during the pause, released at once. A
// deadline earlier than the current debt changes nothing.
func (b *bucket) Penalise(now time.Time, d time.Duration, refill float64) {
	until := now.Add(d)
	b.penaltyUntil = maxTime(b.penaltyUntil, until)
	if !until.After(b.last) {
		return
	}
	// The tokens the bucket would hold at the deadline, capped at the
	// refill: a penalty only ever takes tokens away, so the rate bound
	// still holds.
	b.tokens = math.Min(b.Tokens(until), math.Max(1, refill))
	b.last = until
}

// SetLimit changes rate and burst at now. Tokens earned so far are kept up to
// the new burst.
func (b *bucket) SetLimit(now time.Time, rate float64, burst int) {
	b.advance(now)
	b.setLimit(rate, burst)
	b.tokens = math.Min(b.tokens, b.burst)
}

// aimd is the adaptive effective rate: additive increase, multiplicative
// decrease. A throttle multiplies the rate by decrease, at most once per
// Retry-After window (so the 429s of calls already in flight count once);
// every second of throttle-free success adds increase×ceiling. The rate
// stays within [floor, ceiling].
//
// The zero value is not usable; call newAIMD. Not safe for concurrent use.
type aimd struct {
	ceiling  float64
	floor    float64
	decrease float64
	increase float64

	rate        float64
	holdUntil   time.Time // no decrease and no increase before this
	increasedAt time.Time // last additive increase
}

// newAIMD returns an adaptive rate starting at ceiling. floor <= 0 means
// DefaultFloor(ceiling); decrease outside (0, 1) means DefaultDecrease;
// increase <= 0 means DefaultIncrease.
func newAIMD(ceiling, floor, decrease, increase float64) *aimd {
	a := &aimd{decrease: decrease, increase: increase}
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
// newAIMD) and clamps the current rate into the new range.
func (a *aimd) SetCeiling(ceiling, floor float64) {
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

func (a *aimd) clamp(r float64) float64 {
	if math.IsNaN(r) {
		return a.floor
	}
	return math.Max(a.floor, math.Min(a.ceiling, r))
}

// Rate returns the current effective rate in tokens per second.
func (a *aimd) Rate() float64 { return a.rate }

// Ceiling returns the configured ceiling.
func (a *aimd) Ceiling() float64 { return a.ceiling }

// Floor returns the floor.
func (a *aimd) Floor() float64 { return a.floor }

// Throttled records a 429 at now with the provider's Retry-After (0 when
// absent) and returns the new rate. The first throttle of a window
// multiplies the rate by the decrease factor and opens a hold of
// max(retryAfter, 1s) during which further throttles change nothing.
func (a *aimd) Throttled(now time.Time, retryAfter time.Duration) float64 {
	if now.Before(a.holdUntil) {
		return a.rate
	}
	a.rate = a.clamp(a.rate * a.decrease)
	a.holdUntil = now.Add(max(retryAfter, minHold))
	return a.rate
}

// Succeeded records a non-throttled answer at now and returns the new rate:
// the rate grows by increase×ceiling per second since the later of the last
// increase and the end of the hold, counting at most one second per call so
// idle time does not count as success.
func (a *aimd) Succeeded(now time.Time) float64 {
	if now.Before(a.holdUntil) {
		return a.rate
	}
	since := maxTime(a.increasedAt, a.holdUntil)
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
func (a *aimd) Follow(now time.Time, r float64) float64 {
	a.rate = a.clamp(r)
	a.increasedAt = now
	return a.rate
}

// Cap lowers the rate to at most r (a rate implied by the provider's
// headers), never below the floor, and returns the new rate. It does not
// open a hold: successes keep probing upwards, and the next header caps again.
func (a *aimd) Cap(r float64) float64 {
	if r < a.rate {
		a.rate = a.clamp(r)
	}
	return a.rate
}
