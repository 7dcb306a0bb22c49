package limiter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a Shared limiter.
type Config struct {
	// Name selects the limiter's row. Defaults to "provider".
	Name string
	// Now is the clock. Processes sharing a limiter need clocks in sync
	// (NTP): a clock behind the others gets fewer tokens, never more.
	// Defaults to time.Now.
	Now func() time.Time
	// Logger receives settings changes and database errors of the
	// background poll. Defaults to discarding.
	Logger *slog.Logger
	// Floor is the lowest effective rate, in requests per second, never
	// above the configured rate. Defaults to DefaultFloor(rate) (rate/100,
	// at least 0.5).
	Floor float64
	// Decrease multiplies the effective rate on a throttle, in (0, 1).
	// Defaults to 0.5.
	Decrease float64
	// Increase is the fraction of the configured rate added to the
	// effective rate per second of throttle-free success. Defaults to 0.05.
	Increase float64
	// LeaseWindow bounds the tokens a process holds: a lease covers at most
	// this much of the effective rate (and at most burst), and leased tokens
	// nobody took expire this long after their slot. Defaults to 100ms.
	LeaseWindow time.Duration
	// PollInterval is how often an idle limiter re-reads its row, so
	// Snapshot and the next Wait see `limit set` changes and other
	// processes' penalties. Busy limiters read the row on every lease.
	// Defaults to 250ms.
	PollInterval time.Duration
	// Recovery shapes the climb after a throttle. Each throttle teaches a
	// ceiling (the mean effective rate over the 2 s before it); after the
	// Retry-After pause the effective rate follows a curve, in place of
	// the additive increase: from Decrease×(the rate at the throttle) it
	// rises steeply at first and flattens onto a plateau 5% under the
	// ceiling, which it reaches after Recovery (after 1 s when the throttle
	// came while probing above a plateau that held), stays there for 5 s,
	// then probes beyond, slowly at first and ever faster (doubling in
	// 4 s). A steady limit thus costs one 429 and one pause about every
	// 9 s, and a raised one is found within about 10 s. Every process
	// follows the curve of the latest throttle of any process. Negative
	// turns the curve off: plain additive increase. Defaults to 2s.
	Recovery time.Duration
	// MaxHintPenalty caps the pause taken when response headers say the
	// quota is exhausted until a reset time. Defaults to 5m.
	MaxHintPenalty time.Duration
}

func (c Config) withDefaults() Config {
	c.Name = cmp.Or(c.Name, DefaultName)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if !(c.Decrease > 0 && c.Decrease < 1) {
		c.Decrease = DefaultDecrease
	}
	if !(c.Increase > 0) {
		c.Increase = DefaultIncrease
	}
	c.LeaseWindow = cmp.Or(c.LeaseWindow, 100*time.Millisecond)
	c.PollInterval = cmp.Or(c.PollInterval, 250*time.Millisecond)
	c.MaxHintPenalty = cmp.Or(c.MaxHintPenalty, 5*time.Minute)
	c.Recovery = cmp.Or(c.Recovery, defaultRecovery)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Floor < 0 || math.IsNaN(c.Floor):
		return fmt.Errorf("config: Floor %v must be >= 0", c.Floor)
	case c.LeaseWindow < 0:
		return fmt.Errorf("config: LeaseWindow %v must be >= 0", c.LeaseWindow)
	case c.PollInterval < 0:
		return fmt.Errorf("config: PollInterval %v must be >= 0", c.PollInterval)
	case c.MaxHintPenalty < 0:
		return fmt.Errorf("config: MaxHintPenalty %v must be >= 0", c.MaxHintPenalty)
	}
	return nil
}

// Snapshot is a limiter's state as last read from its row, plus this
// process's counters: for `status`, metrics and tests.
type Snapshot struct {
	// Name of the limiter.
	Name string
	// Rate is the configured rate (the ceiling), requests per second.
	Rate float64
	// Burst is the configured burst.
	Burst int
	// EffectiveRate is the adaptive rate in force, requests per second.
	EffectiveRate float64
	// PenaltyUntil is when the latest penalty ends (zero if none).
	PenaltyUntil time.Time
	// Throttles counts the throttles reported by all processes.
	Throttles int64
	// ReadAt is when this process last read the row.
	ReadAt time.Time
	// Grants counts the tokens this process handed to callers of Wait.
	Grants int64
	// RoundTrips counts the database statements this process issued.
	RoundTrips int64
	// Expired counts leased tokens that expired unused.
	Expired int64
}

// Shared is a token bucket with an adaptive rate, shared by every process
// using the same database and limiter name. It is safe for concurrent use:
// one Shared serves all workers of a process.
//
// Wait leases tokens from the row in batches of at most LeaseWindow of the
// effective rate (and at most as many as its callers are waiting for or
// took in the last LeaseWindow, so a slow process does not sit on tokens
// others could use), with one UPDATE …
// RETURNING per batch. The row debits every leased token at its slot time,
// so N processes together stay within burst + rate×t, give or take the
// timer latency of using a slot late (unused slots expire after
// LeaseWindow). Throttled writes the penalty and the multiplicative decrease
// to the row at once; other processes stop at their next lease, that is
// within LeaseWindow. Succeeded and Observe are recorded locally and travel
// with the next lease.
type Shared struct {
	pool *pgxpool.Pool
	cfg  Config

	mu       sync.Mutex
	slots    []time.Time   // leased, unclaimed token slots, earliest first
	fetching chan struct{} // closed when the lease in flight returns
	retryAt  time.Time     // no lease before this: the row said wait
	penalty  time.Time     // latest penalty known here
	waiters  int           // callers inside Wait
	success  bool          // a success since the last lease
	hintRate float64       // lowest rate implied by headers since the last lease; 0 none
	hintStop time.Time     // quota exhausted until this, not yet written to the row
	curve    *curve        // nil when Recovery is negative
	// lastGrant is the latest time handed to a caller, so late slots are
	// paced after it.
	lastGrant time.Time
	snap      Snapshot
	// Demand: grants in the current and the previous LeaseWindow, so a
	// lease covers what callers took lately, not only who waits now.
	demandStart time.Time
	demandNow   int
	demandPrev  int

	stop   context.CancelFunc
	polled sync.WaitGroup
	closed sync.Once
}

// Open creates the limiter's row with the default settings if it does not
// exist, reads it and starts the background poll. Close stops it.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Shared, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("open limiter %s: %w", cfg.Name, err)
	}
	l := &Shared{pool: pool, cfg: cfg}
	if cfg.Recovery > 0 {
		l.curve = newCurve(cfg.Decrease, cfg.Recovery)
	}
	l.snap.Name = cfg.Name
	_, err := pool.Exec(ctx, `
		INSERT INTO rate_limiters (name, rate, burst, effective_rate, tokens)
		VALUES ($1, $2::float8, $3::int, $2::float8, $3::int) ON CONFLICT (name) DO NOTHING`,
		cfg.Name, DefaultRate, DefaultBurst)
	if err != nil {
		return nil, fmt.Errorf("open limiter %s: %w", cfg.Name, err)
	}
	if err := l.read(ctx); err != nil {
		return nil, fmt.Errorf("open limiter %s: %w", cfg.Name, err)
	}
	pollCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = stop
	l.polled.Add(1)
	go l.poll(pollCtx)
	return l, nil
}

// Close stops the background poll. Leased tokens are not returned: they
// cover at most LeaseWindow, and handing back slots already debited could
// let the row grant them twice.
func (l *Shared) Close() error {
	l.closed.Do(func() {
		l.stop()
		l.polled.Wait()
	})
	return nil
}

// Snapshot returns the state last read from the row and this process's
// counters.
func (l *Shared) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap
}

// Wait blocks until a token is granted: after any penalty, at the shared
// effective rate. It returns ctx's error if ctx ends first, or a database
// error (the caller retries; nothing was granted).
func (l *Shared) Wait(ctx context.Context) error {
	l.mu.Lock()
	l.waiters++
	defer func() {
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
	}()
	for {
		now := l.cfg.Now()
		if now.Before(l.penalty) {
			l.slots = nil
			if l.penalty.After(l.retryAt) {
				l.retryAt = l.penalty
			}
		}
		for len(l.slots) > 0 && now.Sub(l.slots[0]) > l.cfg.LeaseWindow {
			l.slots = l.slots[1:]
			l.snap.Expired++
		}
		if len(l.slots) > 0 {
			slot := l.slots[0]
			l.slots = l.slots[1:]
			at := l.grantTime(slot, now)
			l.mu.Unlock()
			if err := sleep(ctx, at.Sub(now)); err != nil {
				l.mu.Lock()
				l.slots = append([]time.Time{slot}, l.slots...)
				l.mu.Unlock()
				return err
			}
			l.mu.Lock()
			if l.cfg.Now().Before(l.penalty) {
				continue // a penalty arrived while we slept: this slot is void
			}
			l.snap.Grants++
			l.noteGrant(l.cfg.Now())
			l.mu.Unlock()
			return nil
		}
		if ch := l.fetching; ch == nil && !l.hintStop.IsZero() {
			// An exhausted quota seen here must reach the row now, not
			// after the pause it causes.
			if err := l.fetch(ctx, now); err != nil {
				l.mu.Unlock()
				return err
			}
			continue
		}
		if now.Before(l.retryAt) {
			d := min(l.retryAt.Sub(now), l.cfg.PollInterval)
			l.mu.Unlock()
			if err := sleep(ctx, d); err != nil {
				return err
			}
			l.mu.Lock()
			continue
		}
		if ch := l.fetching; ch != nil {
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ch:
			}
			l.mu.Lock()
			continue
		}
		if err := l.fetch(ctx, now); err != nil {
			l.mu.Unlock()
			return err
		}
	}
}

// fetch leases a batch of tokens. It is called and returns with l.mu held,
// releasing it during the round trip.
func (l *Shared) fetch(ctx context.Context, now time.Time) error {
	ch := make(chan struct{})
	l.fetching = ch
	defer func() {
		l.fetching = nil
		close(ch)
	}()
	maxLease := int(math.Floor(l.snap.EffectiveRate * l.cfg.LeaseWindow.Seconds()))
	want := max(1, min(max(l.waiters, l.demand(now)), maxLease, l.snap.Burst))
	success, hintRate, hintStop := l.success, l.hintRate, l.hintStop
	l.success, l.hintRate, l.hintStop = false, 0, time.Time{}
	floor := l.floor()
	var follow float64
	if l.curve != nil {
		follow = l.curve.rate(now)
	}
	l.mu.Unlock()

	var err error
	if !hintStop.IsZero() {
		err = l.penalise(ctx, now, hintStop, 1)
	}
	var res leaseResult
	if err == nil {
		res, err = l.lease(ctx, now, want, success, hintRate, follow, floor)
	}

	l.mu.Lock()
	if err != nil {
		// Keep what the round trip did not deliver for the next one.
		l.success = l.success || success
		if hintRate > 0 && (l.hintRate == 0 || hintRate < l.hintRate) {
			l.hintRate = hintRate
		}
		if hintStop.After(l.hintStop) {
			l.hintStop = hintStop
		}
		return fmt.Errorf("lease tokens of limiter %s: %w", l.cfg.Name, err)
	}
	l.apply(res.row, now)
	if res.n == 0 {
		retry := res.penaltyUntil
		if !res.penalised {
			// Come back when the whole batch asked for is due within the
			// window, not for a single token: fewer, fuller round trips.
			need := (float64(want) - res.avail) / res.row.EffectiveRate
			retry = res.t0.Add(durationOf(need) - l.cfg.LeaseWindow)
		}
		if earliest := now.Add(time.Millisecond); retry.Before(earliest) {
			retry = earliest
		}
		l.retryAt = retry
		return nil
	}
	for i := 1; i <= res.n; i++ {
		l.slots = append(l.slots, res.t0.Add(durationOf((float64(i)-res.avail)/res.row.EffectiveRate)))
	}
	return nil
}

// noteGrant counts a grant at now for the demand estimate. Called with l.mu
// held.
// grantTime is when a leased slot may be used: at the slot, or, for a slot
// already past, no sooner than one interval at the effective rate after the
// previous grant. Spending late slots at once would squeeze calls closer
// together than the row spaced them, and a provider whose bucket is no larger
// than ours would answer 429; paced, lateness becomes headroom at the
// provider instead. Called with l.mu held; it reserves the time it returns.
func (l *Shared) grantTime(slot, now time.Time) time.Time {
	at := slot
	if now.After(slot) {
		at = now
		if rate := l.snap.EffectiveRate; rate > 0 {
			at = maxTime(at, l.lastGrant.Add(time.Duration(float64(time.Second)/rate)))
		}
	}
	l.lastGrant = maxTime(l.lastGrant, at)
	return at
}

func (l *Shared) noteGrant(now time.Time) {
	l.demand(now)
	l.demandNow++
}

// demand returns the grants of the last full LeaseWindow or the current
// one, whichever is larger, rolling the windows forward to now. Called with
// l.mu held.
func (l *Shared) demand(now time.Time) int {
	if elapsed := now.Sub(l.demandStart); elapsed >= l.cfg.LeaseWindow {
		l.demandPrev = l.demandNow
		if elapsed >= 2*l.cfg.LeaseWindow {
			l.demandPrev = 0
		}
		l.demandNow = 0
		l.demandStart = now
	}
	return max(l.demandNow, l.demandPrev)
}

// floor returns the effective rate's floor for the configured rate last
// read. Called with l.mu held.
func (l *Shared) floor() float64 {
	if l.cfg.Floor > 0 {
		return math.Min(l.cfg.Floor, l.snap.Rate)
	}
	return DefaultFloor(l.snap.Rate)
}

// rowState is what every statement returns about the row.
type rowState struct {
	Rate          float64
	Burst         int
	EffectiveRate float64
	PenaltyUntil  *time.Time
	Throttles     int64
}

func (r *rowState) dest() []any {
	return []any{&r.Rate, &r.Burst, &r.EffectiveRate, &r.PenaltyUntil, &r.Throttles}
}

// apply records a row read at now. Called with l.mu held.
func (l *Shared) apply(r rowState, now time.Time) {
	if r.Rate != l.snap.Rate || r.Burst != l.snap.Burst {
		if l.snap.Rate != 0 {
			l.cfg.Logger.Info("limiter settings changed", "limiter", l.cfg.Name,
				"rate", r.Rate, "burst", r.Burst, "previous_rate", l.snap.Rate, "previous_burst", l.snap.Burst)
		}
		// Slots leased under the old settings may be too dense now.
		l.slots = nil
	}
	if l.curve != nil && r.Throttles > l.snap.Throttles && !l.snap.ReadAt.IsZero() {
		// Another process was throttled (or this one, already counted):
		// follow the same curve, from the rate before the decrease.
		resume := now
		if r.PenaltyUntil != nil {
			resume = *r.PenaltyUntil
		}
		l.curve.throttled(now, l.snap.EffectiveRate, resume)
	}
	l.snap.Rate, l.snap.Burst, l.snap.EffectiveRate, l.snap.Throttles = r.Rate, r.Burst, r.EffectiveRate, r.Throttles
	l.snap.ReadAt = now
	if l.curve != nil {
		l.curve.observe(now, r.EffectiveRate)
	}
	if r.PenaltyUntil != nil {
		l.snap.PenaltyUntil = *r.PenaltyUntil
		if r.PenaltyUntil.After(l.penalty) {
			l.penalty = *r.PenaltyUntil
		}
	}
}

const rowColumns = `rate, burst, effective_rate, penalty_until, throttles`

// read re-reads the row.
func (l *Shared) read(ctx context.Context) error {
	now := l.cfg.Now()
	var r rowState
	err := l.pool.QueryRow(ctx, `SELECT `+rowColumns+` FROM rate_limiters WHERE name = $1`, l.cfg.Name).Scan(r.dest()...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap.RoundTrips++
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read limiter %s: row deleted", l.cfg.Name)
	}
	if err != nil {
		return fmt.Errorf("read limiter %s: %w", l.cfg.Name, err)
	}
	l.apply(r, now)
	return nil
}

// poll re-reads the row whenever nothing else has for PollInterval.
func (l *Shared) poll(ctx context.Context) {
	defer l.polled.Done()
	t := time.NewTicker(l.cfg.PollInterval)
	defer t.Stop()
	// During an outage the poll fails four times a second: warn at the
	// first failure and then every pollWarnEvery, with the count.
	var failures int
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		idle := l.cfg.Now().Sub(l.snap.ReadAt) >= l.cfg.PollInterval
		l.mu.Unlock()
		if !idle {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*l.cfg.PollInterval)
		err := l.read(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			if now := time.Now(); failures == 1 || now.Sub(warned) >= pollWarnEvery {
				l.cfg.Logger.Warn("limiter poll failed", "limiter", l.cfg.Name, "failures", failures, "err", err)
				warned = now
			}
		case failures > 0:
			l.cfg.Logger.Info("limiter poll recovered", "limiter", l.cfg.Name, "failures", failures)
			failures = 0
		}
	}
}

// pollWarnEvery spaces the warnings of a failing poll.
const pollWarnEvery = 30 * time.Second

type leaseResult struct {
	row          rowState
	n            int       // tokens granted
	avail        float64   // tokens in the bucket at t0 before the grant
	t0           time.Time // instant the grant refers to
	penalised    bool
	penaltyUntil time.Time
}

// leaseSQL refills the bucket to $2 at the old effective rate, grants up to
// $3 tokens that are due within $4 seconds (none during a penalty), sets the
// effective rate to the recovery curve's rate ($9, mirroring AIMD.Follow) or
// else applies the additive increase ($5: a success was seen), applies the
// header cap ($6), keeps the effective rate within [floor $7, rate] and
// returns the grant with the row. The increase mirrors AIMD.Succeeded: $8 of
// the rate per second since the later of the last increase and the end of
// the hold, counting at most one second.
const leaseSQL = `
WITH cur AS (
    SELECT name, rate, burst, effective_rate, decrease_hold_until, increased_at,
           greatest(coalesce(updated_at, $2::timestamptz), $2::timestamptz) AS t0,
           CASE WHEN updated_at IS NULL THEN burst::float8
                ELSE least(burst::float8, tokens + effective_rate *
                     greatest(0, extract(epoch FROM ($2::timestamptz - updated_at)))::float8) END AS avail,
           coalesce(penalty_until > $2::timestamptz, false) AS penalised,
           coalesce(decrease_hold_until > $2::timestamptz, false) AS held
      FROM rate_limiters
     WHERE name = $1
       FOR UPDATE
), next AS (
    SELECT cur.*,
           CASE WHEN penalised THEN 0
                ELSE least($3::int, greatest(0, floor(avail + effective_rate * $4::float8)))::int END AS n,
           ($5::bool AND NOT penalised AND NOT held) AS grow
      FROM cur
)
UPDATE rate_limiters r
   SET tokens = next.avail - next.n,
       updated_at = next.t0,
       effective_rate = greatest(least($7::float8, r.rate), least(r.rate,
           coalesce($9::float8, r.effective_rate + CASE WHEN next.grow THEN r.rate * $8::float8 * least(1, greatest(0,
               extract(epoch FROM ($2::timestamptz - coalesce(greatest(r.increased_at, r.decrease_hold_until), $2::timestamptz))))::float8)
               ELSE 0 END),
           coalesce($6::float8, 'Infinity'::float8))),
       increased_at = CASE WHEN next.grow OR $9::float8 IS NOT NULL THEN $2::timestamptz ELSE r.increased_at END
  FROM next
 WHERE r.name = next.name
RETURNING next.n, next.avail, next.t0, next.penalised, r.rate, r.burst, r.effective_rate, r.penalty_until, r.throttles`

func (l *Shared) lease(ctx context.Context, now time.Time, want int, success bool, hintRate, follow, floor float64) (leaseResult, error) {
	var res leaseResult
	var hint, curve *float64
	if hintRate > 0 {
		hint = &hintRate
	}
	if follow > 0 {
		curve = &follow
	}
	err := l.pool.QueryRow(ctx, leaseSQL, l.cfg.Name, now, want, l.cfg.LeaseWindow.Seconds(), success, hint, floor, l.cfg.Increase, curve).
		Scan(append([]any{&res.n, &res.avail, &res.t0, &res.penalised}, res.row.dest()...)...)
	l.mu.Lock()
	l.snap.RoundTrips++
	l.mu.Unlock()
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("limiter row %s deleted", l.cfg.Name)
	}
	if err != nil {
		return res, err
	}
	if res.row.PenaltyUntil != nil {
		res.penaltyUntil = *res.row.PenaltyUntil
	}
	return res, nil
}

// penaliseSQL mirrors Bucket.Penalise and AIMD.Throttled: nothing is leased
// before $3, the bucket holds at most one token then, and (when $4 < 1 and
// no throttle window is open at $2) the effective rate is multiplied by $4,
// not below the floor $5, opening a window until $6.
const penaliseSQL = `
UPDATE rate_limiters
   SET tokens = CASE WHEN updated_at IS NULL THEN least(1, burst)::float8
                     WHEN $3::timestamptz > updated_at THEN least(1, burst, tokens + effective_rate *
                          extract(epoch FROM ($3::timestamptz - updated_at))::float8)
                     ELSE tokens END,
       updated_at = greatest(updated_at, $3::timestamptz),
       penalty_until = greatest(penalty_until, $3::timestamptz),
       effective_rate = CASE WHEN $4::float8 < 1 AND coalesce(decrease_hold_until <= $2::timestamptz, true)
                             THEN greatest(least($5::float8, rate), effective_rate * $4::float8) ELSE effective_rate END,
       decrease_hold_until = CASE WHEN $4::float8 < 1 AND coalesce(decrease_hold_until <= $2::timestamptz, true)
                                  THEN $6::timestamptz ELSE decrease_hold_until END,
       throttles = throttles + CASE WHEN $4::float8 < 1 THEN 1 ELSE 0 END
 WHERE name = $1
RETURNING ` + rowColumns

func (l *Shared) penalise(ctx context.Context, now, until time.Time, factor float64) error {
	l.mu.Lock()
	floor := l.floor()
	l.mu.Unlock()
	hold := now.Add(max(until.Sub(now), minHold))
	var r rowState
	err := l.pool.QueryRow(ctx, penaliseSQL, l.cfg.Name, now, until, factor, floor, hold).Scan(r.dest()...)
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
	if until.After(l.penalty) {
		l.penalty = until
	}
	l.slots = nil
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
	l.success = true
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
	if r, ok := h.Rate(now); ok && r < l.snap.EffectiveRate && (l.hintRate == 0 || r < l.hintRate) {
		l.hintRate = math.Max(r, minRate)
	}
	if until, ok := h.Exhausted(now); ok {
		until = minTime(until, now.Add(l.cfg.MaxHintPenalty))
		if until.After(l.hintStop) {
			l.hintStop = until
		}
		if until.After(l.penalty) {
			l.penalty = until
		}
		l.slots = nil
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
