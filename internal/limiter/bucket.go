// Package limiter paces calls to the payment provider.
//
// It has three layers:
//
//   - Bucket, a pure token bucket (rate, burst) refilled on read, in the
//     reservation style of golang.org/x/time/rate: taking a token may put the
//     bucket in debt and tells the caller how long to wait. Penalise drives it
//     into debt so that nothing is granted before a deadline.
//   - AIMD, the pure adaptive effective rate: multiplicative decrease on a
//     throttle, additive increase on sustained success, between a floor and
//     the configured ceiling. ParseHints reads the provider's rate-limit
//     headers so the rate can come down before a 429.
//   - Shared, the limiter the consumer uses: the bucket and the adaptive rate
//     live in one PostgreSQL row per limiter name (table rate_limiters), so
//     every worker of every process draws from the same budget. Tokens are
//     leased in small batches with one atomic UPDATE, penalties and rate
//     changes are written to the row so every process honours them, and
//     `reconcile limit set` (SaveSettings) reaches running processes within a
//     second.
//
// Every clock-dependent function takes the time as an argument or an
// injected clock, so the logic is tested without sleeping.
package limiter

import (
	"math"
	"time"
)

// Bucket is a token bucket refilled on read: it holds at most burst tokens
// and gains rate tokens per second. Reserve always takes a token and reports
// how long the caller must wait before using it, so the bucket may go into
// debt; grants therefore never exceed burst + rate×t in any window of length
// t.
//
// The zero value is not usable; call NewBucket. A Bucket is not safe for
// concurrent use: callers serialise access.
type Bucket struct {
	rate   float64   // tokens per second, > 0
	burst  float64   // capacity, >= 1
	tokens float64   // tokens at last; negative is debt
	last   time.Time // instant tokens refers to; after a penalty it is in the future
	// penaltyUntil is the latest deadline given to Penalise.
	penaltyUntil time.Time
}

// NewBucket returns a full bucket with the given rate (tokens per second,
// > 0) and burst (>= 1) as of now. Out-of-range values are raised to the
// smallest valid one (a tiny positive rate, burst 1).
func NewBucket(rate float64, burst int, now time.Time) *Bucket {
	b := &Bucket{last: now}
	b.setLimit(rate, burst)
	b.tokens = b.burst
	return b
}

func (b *Bucket) setLimit(rate float64, burst int) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = minRate
	}
	b.rate = rate
	b.burst = float64(max(burst, 1))
}

// minRate is the smallest rate a bucket accepts: one token a day.
const minRate = 1.0 / 86400

// Rate returns the refill rate in tokens per second.
func (b *Bucket) Rate() float64 { return b.rate }

// Burst returns the capacity in tokens.
func (b *Bucket) Burst() int { return int(b.burst) }

// PenaltyUntil returns the latest deadline given to Penalise (zero if none).
func (b *Bucket) PenaltyUntil() time.Time { return b.penaltyUntil }

// advance refills the bucket up to now. Before last (during a penalty)
// nothing is refilled.
func (b *Bucket) advance(now time.Time) {
	if !now.After(b.last) {
		return
	}
	b.tokens = math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	b.last = now
}

// Tokens returns the number of tokens available at now (negative: debt).
func (b *Bucket) Tokens(now time.Time) float64 {
	if !now.After(b.last) {
		return b.tokens
	}
	return math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
}

// Reserve takes one token at now and returns how long the caller must wait
// before acting on it: 0 when a token was available, otherwise the time the
// debt takes to refill (and at least until a pending penalty ends).
func (b *Bucket) Reserve(now time.Time) time.Duration {
	b.advance(now)
	base := now
	if b.last.After(now) {
		base = b.last
	}
	b.tokens--
	wait := base.Sub(now)
	if b.tokens < 0 {
		wait += durationOf(-b.tokens / b.rate)
	}
	return wait
}

// Penalise makes the bucket grant nothing before now+d (a provider's
// Retry-After): tokens reserved after this call wait at least until then,
// and the bucket holds at most one token at the deadline, so the deadline
// does not release a burst. A deadline earlier than the current debt changes
// nothing.
func (b *Bucket) Penalise(now time.Time, d time.Duration) {
	b.advance(now)
	until := now.Add(d)
	if until.After(b.penaltyUntil) {
		b.penaltyUntil = until
	}
	if !until.After(b.last) {
		return
	}
	// The tokens the bucket would hold at the deadline, capped at one: a
	// penalty only ever takes tokens away, so the rate bound still holds.
	at := math.Min(b.burst, b.tokens+b.rate*until.Sub(b.last).Seconds())
	b.tokens = math.Min(at, 1)
	b.last = until
}

// SetLimit changes rate and burst at now. Tokens earned so far are kept up to
// the new burst.
func (b *Bucket) SetLimit(now time.Time, rate float64, burst int) {
	b.advance(now)
	b.setLimit(rate, burst)
	b.tokens = math.Min(b.tokens, b.burst)
}

// durationOf converts seconds to a Duration, rounding up so a caller never
// wakes before its token exists.
func durationOf(seconds float64) time.Duration {
	if seconds <= 0 {
		return 0
	}
	if seconds >= math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(seconds * float64(time.Second)))
}
