package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// minHold is the shortest time between two multiplicative decreases.
const minHold = time.Second

// Throttled reports a 429 with the provider's Retry-After (0 when absent):
// every process stops leasing until now+retryAfter, and the shared effective
// rate is multiplied by Decrease unless a throttle window (max(Retry-After,
// 1s) from the first throttle) is already open. This process stops at once,
// even if the database cannot be reached; the error says the row was not
// updated.
func (l *Shared) Throttled(ctx context.Context, retryAfter time.Duration) error {
	now := l.cfg.Now()
	until := now.Add(max(retryAfter, 0))
	l.mu.Lock()
	l.local.stop(until)
	if l.curve != nil {
		// The 429s of calls already in flight belong to the same throttle.
		l.curve.throttled(now, l.snap.EffectiveRate, until)
	}
	l.mu.Unlock()
	if err := l.penalise(ctx, now, until, l.cfg.Decrease); err != nil {
		return fmt.Errorf("record throttle on limiter %s: %w", l.cfg.Name, err)
	}
	return nil
}

// Succeeded reports an answer that was not a throttle. It feeds the
// additive increase, applied with the next lease.
func (l *Shared) Succeeded() {
	l.mu.Lock()
	l.local.succeeded()
	l.mu.Unlock()
}

// Observe takes the rate-limit hints of a response. A rate implied by them
// below the effective rate lowers it (with the next lease, for every
// process); an exhausted quota stops this process at once until the reset
// (at most MaxHintPenalty) and the others at their next lease.
func (l *Shared) Observe(h Hints) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := h.Rate(now); ok && r < l.snap.EffectiveRate {
		l.local.hinted(r)
	}
	if until, ok := h.Exhausted(now); ok {
		l.local.exhausted(minTime(until, now.Add(l.cfg.MaxHintPenalty)))
	}
}

// penaliseSQL stops every lease before @until, leaving the bucket at most
// one token then, and (when @factor < 1 and no throttle window is open at
// @now) multiplies the effective rate by @factor, not below @floor, opening
// a throttle window until @hold. The test model (bucket.Penalise and
// aimd.Throttled in the test files) follows the same rules and is checked
// against this statement.
const penaliseSQL = `
UPDATE rate_limiters
   SET tokens = CASE WHEN updated_at IS NULL THEN least(1, burst)::float8
                     WHEN @until::timestamptz > updated_at THEN least(1, burst, tokens + effective_rate *
                          extract(epoch FROM (@until::timestamptz - updated_at))::float8)
                     ELSE tokens END,
       updated_at = greatest(updated_at, @until::timestamptz),
       penalty_until = greatest(penalty_until, @until::timestamptz),
       effective_rate = CASE WHEN @factor::float8 < 1 AND coalesce(decrease_hold_until <= @now::timestamptz, true)
                             THEN greatest(least(@floor::float8, rate), effective_rate * @factor::float8) ELSE effective_rate END,
       decrease_hold_until = CASE WHEN @factor::float8 < 1 AND coalesce(decrease_hold_until <= @now::timestamptz, true)
                                  THEN @hold::timestamptz ELSE decrease_hold_until END,
       throttles = throttles + CASE WHEN @factor::float8 < 1 THEN 1 ELSE 0 END
 WHERE name = @name
RETURNING ` + rowColumns

// penalise runs penaliseSQL: a penalty seen at now until until, with the
// effective rate multiplied by factor (1: no decrease, not a throttle).
func (l *Shared) penalise(ctx context.Context, now, until time.Time, factor float64) error {
	l.mu.Lock()
	floor := l.floor()
	l.mu.Unlock()
	args := pgx.StrictNamedArgs{
		"name":   l.cfg.Name,
		"now":    now,
		"until":  until,
		"factor": factor,
		"floor":  floor,
		"hold":   now.Add(max(until.Sub(now), minHold)),
	}
	var r rowState
	err := l.pool.QueryRow(ctx, penaliseSQL, args).Scan(r.dest()...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap.RoundTrips++
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("limiter row %s deleted", l.cfg.Name)
	}
	if err != nil {
		return err
	}
	l.apply(r, now)
	return nil
}
