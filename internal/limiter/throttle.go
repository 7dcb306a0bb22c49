package limiter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// minHold is the shortest time between two multiplicative decreases.
const minHold = time.Second

// ThrottleKind says what a throttle means for the rate.
type ThrottleKind int

const (
	// RateLimited is a 429 of the provider's rate limit: every process
	// pauses for its Retry-After and the rate is lowered (or measured).
	RateLimited ThrottleKind = iota
	// ConcurrencyLimited is a 429 of a lock or concurrency limit (Stripe's
	// lock_timeout, `Stripe-Rate-Limited-Reason: … concurrency`): every
	// process pauses for its Retry-After, but the rate estimate stays.
	ConcurrencyLimited
)

// ThrottleKindOf classifies a 429 by its response headers:
// ConcurrencyLimited when Stripe-Rate-Limited-Reason names a concurrency or
// lock limit, else RateLimited. A classification from the body (Stripe's
// lock_timeout code) belongs to the caller.
func ThrottleKindOf(h http.Header) ThrottleKind {
	reason := strings.ToLower(h.Get("Stripe-Rate-Limited-Reason"))
	if strings.Contains(reason, "concurren") || strings.Contains(reason, "lock") {
		return ConcurrencyLimited
	}
	return RateLimited
}

// Throttled reports a 429 with the provider's Retry-After (0 when absent):
// every process stops leasing until now+retryAfter; when the 429 is
// RateLimited the shared effective rate is also multiplied by Decrease
// unless a throttle window (max(Retry-After, 1s) from the first throttle) is
// already open, and the throttle is counted for the discovery. When the
// pause ends the provider's bucket has refilled, and (with the discovery
// on) as many tokens as it estimates are released at once. This process
// stops at once, even if the database cannot be reached; the error says the
// row was not updated.
func (l *Shared) Throttled(ctx context.Context, retryAfter time.Duration, kind ThrottleKind) error {
	if err := l.applyPenalty(l.throttle(retryAfter, kind).send(ctx)); err != nil {
		return fmt.Errorf("record throttle on limiter %s: %w", l.cfg.Name, err)
	}
	return nil
}

// throttle stops this process at once for a 429 with the given Retry-After
// and returns the penalty that writes it to the row (Throttled sends it).
func (l *Shared) throttle(retryAfter time.Duration, kind ThrottleKind) penalty {
	now := l.cfg.Now()
	retryAfter = max(retryAfter, 0)
	until := now.Add(retryAfter)
	factor := l.cfg.Decrease
	if kind == ConcurrencyLimited {
		factor = 1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.local.stop(until)
	refill := 1.0
	if l.disc != nil && kind == RateLimited {
		refill = l.disc.refused(l.clock.toDB(now), retryAfter)
	}
	return l.preparePenalty(now, until, factor, refill, l.local.takeAccepted())
}

// Succeeded reports an answer that was not a throttle. It is reported to
// the row with the next lease; the discovery counts it at once, with the
// row's last count and this process's answers since.
func (l *Shared) Succeeded() {
	l.mu.Lock()
	l.local.succeeded()
	if l.disc != nil {
		own := l.local.answered()
		l.disc.succeeded(l.clock.toDB(l.cfg.Now()), l.snap.Accepted+own-l.readOwn, own)
	}
	l.mu.Unlock()
}

// Answered reports that the provider answered a call, whatever it answered,
// took after it was sent; the caller reports it just before Succeeded or
// Throttled. The discovery dates the fleet's count of accepted calls by
// it: the provider counted a call when it was sent, the fleet counts it
// when its answer comes back. The outcome that follows is dated by it too:
// the first accepted call starts the span that gives the provider's bucket,
// and an answer that comes back after a 429 counts before it when its call
// was sent before the refused one.
func (l *Shared) Answered(took time.Duration) {
	l.mu.Lock()
	if l.disc != nil {
		l.disc.answered(took)
	}
	l.mu.Unlock()
}

// Observe takes the rate-limit hints of a response. The rate implied by
// the latest of them caps the effective rate (with the next lease, for
// every process), unless the limit set is trusted and within the quota
// the hints' policy states (see withinQuota); an exhausted quota stops
// this process at once until the reset (at most MaxHintPenalty) and the
// others at their next lease.
func (l *Shared) Observe(h Hints) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	h = l.resets.refine(h)
	r, ok := h.Rate(now)
	within := l.withinQuota(h)
	ok = ok && !within
	if ok {
		l.local.hinted(r, h.sentBy(now))
	}
	if ok && l.disc != nil {
		l.disc.hinted(l.clock.toDB(now), r)
	}
	if until, ok := h.Exhausted(now); ok {
		l.local.exhausted(minTime(until, now.Add(l.cfg.MaxHintPenalty)), within)
	}
}

// withinQuota reports whether the limit set is trusted (the provider has
// not refused it trustedRefusals times) and no faster than the quota the
// policy of h states (Quota per Window): the fleet then paces at or under
// the provider's own rate, and the pace the count left implies could only
// slow it. That pace is read from a reset given in whole seconds, which for
// a window of a second or two says little of where in it the call fell
// (resetBound narrows it by as much as one process's calls are dense), and
// the told limit fell to 93.8% of it (fixed windows of a second, 5/s, four
// processes). A quota spent by others too still stops the fleet when it
// runs out: Observe keeps the exhaustion. Called with l.mu held.
func (l *Shared) withinQuota(h Hints) bool {
	trusted := l.disc == nil || l.disc.phase <= phaseRefused
	return trusted && h.Quota > 0 && h.Window > 0 && l.snap.Rate > 0 && l.snap.Rate <= float64(h.Quota)/h.Window.Seconds()
}

// penaliseSQL stops every lease for @pause_us microseconds from its time
// (@now: when the 429 was answered, on the database's clock; or the
// statement's own), leaving the bucket at most @refill tokens
// then (at least one), adds @accepted to the fleet's count, and (when
// @factor < 1 and no throttle window is open) counts the throttle for the
// discovery (throttled_at, throttled_accepted) and as a refusal of the
// limit set, opens a throttle window of the pause but at least @min_hold_us
// and, from the @trust-th refusal on, multiplies the effective rate by
// @factor, not below @floor. The test model (bucket.Penalise and
// aimd.Throttled in the test files) follows the same rules and is checked
// against this statement.
const penaliseSQL = `
WITH t AS (
    SELECT clock_now, clock_now + @pause_us::bigint * interval '1 microsecond' AS until,
           clock_now + greatest(@pause_us::bigint, @min_hold_us::bigint) * interval '1 microsecond' AS hold,
           @factor::float8 < 1 AS lowers
      FROM (SELECT coalesce(@now::timestamptz, clock_timestamp()) AS clock_now) AS clock
)
UPDATE rate_limiters
   SET tokens = CASE WHEN updated_at IS NULL THEN least(greatest(1, @refill::float8), burst)::float8
                     WHEN t.until > updated_at THEN least(greatest(1, @refill::float8), burst, tokens + effective_rate *
                          extract(epoch FROM (t.until - updated_at))::float8)
                     ELSE tokens END,
       updated_at = greatest(updated_at, t.until),
       penalty_until = greatest(penalty_until, t.until),
       effective_rate = CASE WHEN t.lowers AND coalesce(decrease_hold_until <= t.clock_now, true) AND refusals + 1 >= @trust
                             THEN greatest(least(@floor::float8, rate), effective_rate * @factor::float8) ELSE effective_rate END,
       decrease_hold_until = CASE WHEN t.lowers AND coalesce(decrease_hold_until <= t.clock_now, true)
                                  THEN t.hold ELSE decrease_hold_until END,
       throttles = throttles + CASE WHEN t.lowers THEN 1 ELSE 0 END,
       refusals = refusals + CASE WHEN t.lowers AND coalesce(decrease_hold_until <= t.clock_now, true) THEN 1 ELSE 0 END,
       accepted = accepted + @accepted::bigint,
       throttled_at = CASE WHEN t.lowers AND coalesce(decrease_hold_until <= t.clock_now, true)
                           THEN t.clock_now ELSE throttled_at END,
       throttled_accepted = CASE WHEN t.lowers AND coalesce(decrease_hold_until <= t.clock_now, true)
                                 THEN accepted + @accepted::bigint ELSE throttled_accepted END
  FROM t
 WHERE name = @name
RETURNING ` + rowColumns + `, t.clock_now`

// penalty is a statement of penaliseSQL on its way: a penalty seen at now
// (local) until until (local: the pause is their difference, from the
// database's clock), with the effective rate multiplied by factor (1: no
// decrease, not a throttle), refill tokens released when it ends and
// accepted calls to count; then its answer, which applyPenalty applies.
type penalty struct {
	l             *Shared
	args          pgx.StrictNamedArgs
	now, received time.Time
	accepted      int64
	// counts: the statement may count a throttle (it decreases the rate);
	// Shared.counting holds it while it is on its way.
	counts bool
	row    rowState
	err    error
}

// preparePenalty prepares a penalty (see the type) and, when it may count a
// throttle, holds it in l.counting until applyPenalty. Called with l.mu
// held.
func (l *Shared) preparePenalty(now, until time.Time, factor, refill float64, accepted int64) penalty {
	// Without the discovery every throttle lowers the rate; with it the
	// limit set is trusted until refused trustedRefusals times.
	trust := 1
	if l.disc != nil {
		trust = trustedRefusals
	}
	p := penalty{l: l, now: now, accepted: accepted, counts: factor < 1}
	p.args = pgx.StrictNamedArgs{
		"trust":       trust,
		"name":        l.cfg.Name,
		"now":         l.answerNow(now),
		"pause_us":    max(until.Sub(now), 0).Microseconds(),
		"min_hold_us": minHold.Microseconds(),
		"factor":      factor,
		"refill":      refill,
		"accepted":    accepted,
		"floor":       l.floor(),
	}
	if p.counts {
		l.counting++
	}
	return p
}

// send runs the penalty's statement and keeps its answer.
func (p penalty) send(ctx context.Context) penalty {
	p.err = p.l.pool.QueryRow(ctx, penaliseSQL, p.args).Scan(p.row.dest()...)
	p.received = p.l.cfg.Now()
	return p
}

// applyPenalty applies the answer of a penalty sent. When the statement
// failed, the accepted calls it carried wait for the next one.
func (l *Shared) applyPenalty(p penalty) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.counts {
		l.counting--
	}
	l.snap.RoundTrips++
	err := p.err
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("limiter row %s deleted", l.cfg.Name)
	}
	if err != nil {
		l.local.restore(report{accepted: p.accepted})
		return err
	}
	l.learnClock(p.now, p.received, p.row.Now)
	l.apply(p.row, p.now)
	return nil
}

// penalise sends a penalty (see the type) and applies its answer.
func (l *Shared) penalise(ctx context.Context, now, until time.Time, factor, refill float64, accepted int64) error {
	l.mu.Lock()
	p := l.preparePenalty(now, until, factor, refill, accepted)
	l.mu.Unlock()
	return l.applyPenalty(p.send(ctx))
}
