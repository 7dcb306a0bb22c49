package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// fetch leases a batch of tokens. It is called and returns with l.mu held,
// releasing it during the round trip.
func (l *Shared) fetch(ctx context.Context, now time.Time) error {
	ch := make(chan struct{})
	l.fetching = ch
	defer func() {
		l.fetching = nil
		close(ch)
	}()
	want := l.local.leaseSize(now, l.waiters, l.snap.EffectiveRate, l.snap.Burst)
	rep := l.local.takeReport()
	floor := l.floor()
	var follow float64
	var changes []change
	var store stored
	if l.disc != nil {
		follow, store = l.steer(l.clock.toDB(now))
		changes = l.disc.takeChanges()
		if follow == 0 {
			// The row's rate is the leader's: no additive increase
			// either.
			rep.success = false
		}
	}
	l.mu.Unlock()
	l.history(ctx, changes)

	var err error
	if !rep.hintStop.IsZero() {
		err = l.penalise(ctx, now, rep.hintStop, 1, 1, 0)
	}
	var res leaseResult
	if err == nil {
		res, err = l.lease(ctx, now, want, rep, follow, floor, store)
	}

	l.mu.Lock()
	if err != nil {
		// Keep what the round trip did not deliver for the next one.
		l.local.restore(rep)
		return fmt.Errorf("lease tokens of limiter %s: %w", l.cfg.Name, err)
	}
	l.apply(res.row, now)
	l.local.leased(now, want, res)
	return nil
}

// steer returns the discovery's rate to set in the row with a lease at now
// (on the database's clock) and the estimate to store, both only when this
// process leads the fleet's discovery (follow 0 and nothing stored
// otherwise): the row's rate follows one process's measurements, not each
// process's in turn. A rate read from the provider's headers is the
// provider's word, not a measurement: every process that has one sends it.
// The discovery advances either way, so that a process that counts the
// next throttle leads from where it stands. Called with l.mu held.
func (l *Shared) steer(now time.Time) (follow float64, store stored) {
	follow = l.disc.rate(now)
	store.estimate, store.burst = l.disc.stored()
	store.settingsAt = l.settingsAt
	store.capacity = l.disc.capacity(now)
	store.led = l.seenAt
	if l.follows {
		store.estimate, store.burst = 0, 0
		if !l.disc.hintFresh(now) {
			follow = 0
		}
	}
	return follow, store
}

// stored is the discovery's estimate to store in the row with a lease, for
// the processes started later, as measured under the settings of
// settingsAt; estimate 0 stores nothing.
type stored struct {
	estimate, burst float64
	settingsAt      time.Time
	// capacity is the most tokens the row holds (the provider's bucket as
	// stored, at a stored start); 0 none.
	capacity float64
	// led is the row's throttle the discovery last counted from (zero:
	// none): the row takes the rate and the estimate only while it is
	// still the row's latest, so a process that has not yet read a newer
	// throttle does not set them from what it knew before.
	led time.Time
}

// leaseResult is the row's answer to a lease.
type leaseResult struct {
	row          rowState
	n            int       // tokens granted
	avail        float64   // tokens in the bucket at t0 before the grant, at the rate after it
	t0           time.Time // instant the grant refers to, on the local clock
	penalised    bool
	penaltyUntil time.Time // on the local clock
}

// leaseSQL refills the bucket to its time (@now, or the database's clock) at
// the old effective rate, sets the effective rate to the discovery's rate
// (@curve) when @led is the row's latest throttle (keeping it otherwise), or
// without a @curve applies the additive increase (@success: a success was
// seen), applies the header cap (@hint), keeps the effective rate within
// [@floor, rate], grants at the new rate up to @want tokens that are due
// within @window seconds (none during a penalty), adds @accepted to the
// fleet's count of accepted calls, holds at most @capacity tokens (when set:
// what the provider lets through at once), stores the discovery's @estimate
// and @estimate_burst when @led is the row's latest throttle unless the
// settings changed since @settings_at (limit set cleared them), and returns
// the grant (the tokens due at its time: avail) with the row and its time.
// The increase is @increase of the rate per second since the later of the
// last increase and the end of the hold, counting at most one second.
//
// A debt (tokens below zero) is the time until the slots already granted
// have passed, counted in tokens of the rate they were spaced at: when the
// rate changes it is recounted at the new one (due), so that the slots of
// this grant follow the last one granted before it. Counted at the new
// rate as it stood, a rise would put them among the earlier ones, two
// processes' calls closer together than the rate spaces them, and a
// provider whose bucket holds a call or two answers 429.
//
// The test model (aimd and bucket in the test files) follows the same rules
// and is checked against this statement.
const leaseSQL = `
WITH clock AS (
    SELECT coalesce(@now::timestamptz, clock_timestamp()) AS clock_now
), cur AS (
    SELECT name, rate, burst, effective_rate, decrease_hold_until, increased_at, clock_now,
           @led::timestamptz IS NOT DISTINCT FROM throttled_at AS leads,
           greatest(coalesce(updated_at, clock_now), clock_now) AS t0,
           least(coalesce(@capacity::float8, 'Infinity'::float8),
                 CASE WHEN updated_at IS NULL THEN burst::float8
                      ELSE least(burst::float8, tokens + effective_rate *
                           greatest(0, extract(epoch FROM (clock_now - updated_at)))::float8) END) AS avail,
           coalesce(penalty_until > clock_now, false) AS penalised,
           coalesce(decrease_hold_until > clock_now, false) AS held
      FROM rate_limiters, clock
     WHERE name = @name
       FOR UPDATE OF rate_limiters
), rated AS (
    SELECT cur.*,
           (@success::bool AND NOT penalised AND NOT held) AS grow,
           (@curve::float8 IS NOT NULL AND leads) AS steers
      FROM cur
), priced AS (
    SELECT rated.*,
           greatest(least(@floor::float8, rate), least(rate,
               CASE WHEN steers THEN @curve::float8
                    WHEN @curve::float8 IS NOT NULL THEN effective_rate
                    ELSE effective_rate + CASE WHEN grow THEN rate * @increase::float8 * least(1, greatest(0,
                   extract(epoch FROM (clock_now - coalesce(greatest(increased_at, decrease_hold_until), clock_now))))::float8)
                   ELSE 0 END END,
               coalesce(@hint::float8, 'Infinity'::float8))) AS new_rate
      FROM rated
), debt AS (
    SELECT priced.*,
           CASE WHEN avail < 0 THEN avail * new_rate / effective_rate ELSE avail END AS due
      FROM priced
), next AS (
    SELECT debt.*,
           CASE WHEN penalised THEN 0
                ELSE least(@want::int, greatest(0, floor(due + new_rate * @window::float8)))::int END AS n
      FROM debt
)
UPDATE rate_limiters r
   SET tokens = next.due - next.n,
       updated_at = next.t0,
       effective_rate = next.new_rate,
       increased_at = CASE WHEN next.steers OR next.grow AND @curve::float8 IS NULL THEN next.clock_now ELSE r.increased_at END,
       accepted = r.accepted + @accepted::bigint,
       estimate = CASE WHEN @estimate::float8 IS NOT NULL AND r.settings_updated_at = @settings_at::timestamptz AND next.leads
                       THEN @estimate::float8 ELSE r.estimate END,
       estimate_burst = CASE WHEN @estimate::float8 IS NOT NULL AND r.settings_updated_at = @settings_at::timestamptz AND next.leads
                             THEN @estimate_burst::float8 ELSE r.estimate_burst END
  FROM next
 WHERE r.name = next.name
RETURNING next.n, next.due, next.t0, next.penalised, r.rate, r.burst, r.effective_rate, r.penalty_until, r.throttles,
          r.accepted, r.throttled_at, r.throttled_accepted, r.settings_updated_at, r.refusals, r.estimate,
          r.estimate_burst, r.increased_at, next.clock_now`

// lease runs leaseSQL at now for want tokens with what rep tells the row.
// follow is 0 when the discovery has no rate to set.
func (l *Shared) lease(ctx context.Context, now time.Time, want int, rep report, follow, floor float64, store stored) (leaseResult, error) {
	var res leaseResult
	hintRate := rep.hintRate
	var hint, curve *float64
	if hintRate > 0 {
		hint = &hintRate
	}
	if follow > 0 {
		curve = &follow
	}
	var estimate, estimateBurst, capacity *float64
	if store.estimate > 0 && store.burst > 0 {
		estimate, estimateBurst = &store.estimate, &store.burst
	}
	if store.capacity > 0 {
		capacity = &store.capacity
	}
	var led *time.Time
	if !store.led.IsZero() {
		led = &store.led
	}
	args := pgx.StrictNamedArgs{
		"name":     l.cfg.Name,
		"now":      l.stmtNow(now),
		"want":     want,
		"window":   l.cfg.LeaseWindow.Seconds(),
		"success":  rep.success,
		"accepted": rep.accepted,
		"hint":     hint,
		"floor":    floor,
		"increase": l.cfg.Increase,
		"curve":    curve,

		"estimate":       estimate,
		"estimate_burst": estimateBurst,
		"settings_at":    store.settingsAt,
		"capacity":       capacity,
		"led":            led,
	}
	err := l.pool.QueryRow(ctx, leaseSQL, args).
		Scan(append([]any{&res.n, &res.avail, &res.t0, &res.penalised}, res.row.dest()...)...)
	received := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap.RoundTrips++
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("limiter row %s deleted", l.cfg.Name)
	}
	if err != nil {
		return res, err
	}
	// The grant's times are on the database's clock: local's are not.
	l.learnClock(now, received, res.row.Now)
	res.t0 = l.clock.toLocal(res.t0)
	if res.row.PenaltyUntil != nil {
		res.penaltyUntil = l.clock.toLocal(*res.row.PenaltyUntil)
	}
	return res, nil
}
