package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	// PenaltyUntil is when the latest penalty ends (zero if none), on this
	// process's clock (Config.Now).
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
	// Accepted counts the calls the provider accepted, reported by all
	// processes.
	Accepted int64
	// Estimate is the provider's rate as this process's discovery
	// estimates it, requests per second; 0 when unknown or off.
	Estimate float64
	// ProviderBurst is the provider's burst as estimated; 0 when unknown.
	ProviderBurst float64
	// Latency is the median time this process's latest answers took
	// (see Answered); 0 when unknown or the discovery is off.
	Latency time.Duration
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
	local    *local        // leased slots, penalty, pacing, demand, report
	fetching chan struct{} // closed when the lease in flight returns
	waiters  int           // callers inside Wait
	disc     *discovery    // nil when Recovery is negative
	seenAt   time.Time     // throttled_at of the row last applied
	// follows: another process counted the row's latest throttle, and
	// leads the discovery until the next one, or until it stops setting
	// the rate (see takeoverAfter): this process leaves the row's rate
	// and estimate to it (see steer).
	follows bool
	// counting is how many of this process's penalties that may count a
	// throttle are on their way (see apply).
	counting int
	// settingsAt is settings_updated_at of the row last applied: a change
	// (limit set) starts the discovery afresh.
	settingsAt time.Time
	// readOwn is this process's reported answers when the row was last
	// applied: its count holds them, and the answers since are added to
	// it (see Succeeded).
	readOwn int64
	clock   dbClock    // the database's clock against Config.Now
	resets  resetBound // the reset of the provider's quota window
	snap    Snapshot

	stop   context.CancelFunc
	polled sync.WaitGroup
	closed sync.Once
}

// Open creates the limiter's row with the default settings if it does not
// exist, reads it and starts the background poll. Close stops it.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Shared, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("open limiter %s: %w", cfg.Name, err)
	}
	l := &Shared{pool: pool, cfg: cfg, local: newLocal(cfg.LeaseWindow)}
	if cfg.Recovery > 0 {
		l.disc = newDiscovery(cfg.Decrease, cfg.LeaseWindow)
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
	s := l.snap
	s.Expired = l.local.expired
	if l.disc != nil {
		s.Estimate, s.ProviderBurst, s.Latency = l.disc.estimate, l.disc.burst, l.disc.latency.get()
	}
	return s
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
	// Accepted counts calls accepted fleet-wide; ThrottledAt and
	// ThrottledAccepted are the latest counted throttle and the count then.
	Accepted          int64
	ThrottledAt       *time.Time
	ThrottledAccepted int64
	// SettingsAt is when rate and burst were set; Refusals counts the
	// throttles counted since.
	SettingsAt time.Time
	Refusals   int
	// Estimate and EstimateBurst are the provider's rate and bucket as
	// stored by the discovery; nil when unknown.
	Estimate, EstimateBurst *float64
	// SteeredAt is when a lease last set the rate (increased_at: the
	// leading process's discovery, or the additive increase without
	// one); nil when no lease has.
	SteeredAt *time.Time
	// Now is the statement's time: the database's clock, or the @now a
	// test passed. The row's times (PenaltyUntil, ThrottledAt) are on the
	// same clock.
	Now time.Time
}

// resume is when the pause of the row's last counted throttle ends: its
// penalty's end, or the throttle itself without one. ThrottledAt must be
// set.
func (r rowState) resume() time.Time {
	if r.PenaltyUntil != nil {
		return maxTime(*r.ThrottledAt, *r.PenaltyUntil)
	}
	return *r.ThrottledAt
}

// dest scans rowColumns followed by the statement's time.
func (r *rowState) dest() []any {
	return []any{&r.Rate, &r.Burst, &r.EffectiveRate, &r.PenaltyUntil, &r.Throttles,
		&r.Accepted, &r.ThrottledAt, &r.ThrottledAccepted, &r.SettingsAt, &r.Refusals, &r.Estimate, &r.EstimateBurst, &r.SteeredAt, &r.Now}
}

const rowColumns = `rate, burst, effective_rate, penalty_until, throttles, accepted, throttled_at, throttled_accepted,
       settings_updated_at, refusals, estimate, estimate_burst, increased_at`

// stmtNow is the @now of a statement issued at local time now: nil, so
// the statement takes the database's clock, unless Config.LocalClock.
func (l *Shared) stmtNow(now time.Time) *time.Time {
	if l.cfg.LocalClock {
		return &now
	}
	return nil
}

// answerNow is the @now of a statement that dates a penalty from local
// time now, when the 429 was answered: the database's clock then, as
// learned, plus half the round trip it was learned from (the most the
// estimate can be early by); stmtNow's under Config.LocalClock or before
// the clock is learned. Taken from the statement's own clock instead, a
// penalty that waited for a pool connection behind the others of one
// burst of 429s (one statement each) started when it ran: the 45 of one
// burst pushed the fleet's pause 0.75 s past the last Retry-After. Called
// with l.mu held.
func (l *Shared) answerNow(now time.Time) *time.Time {
	if l.cfg.LocalClock || !l.clock.known {
		return l.stmtNow(now)
	}
	t := l.clock.toDB(now).Add(l.clock.rtt / 2)
	return &t
}

// learnClock records a round trip sent and received at local times whose
// statement ran at db, unless Config.LocalClock: the clocks are then one.
// Called with l.mu held.
func (l *Shared) learnClock(sent, received, db time.Time) {
	if !l.cfg.LocalClock {
		l.clock.sample(sent, received, db)
	}
}

// apply records a row read at now (local). The discovery works on the
// database's clock; local's slots and penalties on the local one. Called
// with l.mu held.
func (l *Shared) apply(r rowState, now time.Time) {
	if r.Rate != l.snap.Rate || r.Burst != l.snap.Burst {
		if l.snap.Rate != 0 {
			l.cfg.Logger.Info("limiter settings changed", "limiter", l.cfg.Name,
				"rate", r.Rate, "burst", r.Burst, "previous_rate", l.snap.Rate, "previous_burst", l.snap.Burst)
		}
		l.local.resettle()
	}
	if l.disc != nil {
		l.startDiscovery(r)
		if r.ThrottledAt != nil && r.ThrottledAt.After(l.seenAt) && (r.ThrottledAt.Equal(r.Now) || l.counting == 0) {
			// A throttle counted by the row, of this process or another:
			// every process measures from the same ones. The statement
			// that counted it returns it at its own time: that process
			// leads. Another statement may bring it first (a lease or a
			// read just after it, or another 429 of the same pause,
			// which the row did not count): while one of this process's
			// own that may count is on its way, the throttle may be
			// that one's, and its answer says. (An answer older than the
			// throttle last applied, overtaken on its way back, brings
			// nothing new.)
			l.follows = !r.ThrottledAt.Equal(r.Now)
			l.disc.throttled(*r.ThrottledAt, r.ThrottledAccepted, l.local.reported, r.resume(), r.Refusals, !l.follows)
			l.seenAt = *r.ThrottledAt
		}
		if l.follows && r.ThrottledAt != nil && r.ThrottledAt.Equal(l.seenAt) && leaderSilence(r) > takeoverAfter {
			l.follows = false
			l.cfg.Logger.Info("limiter lead taken over: no process has set the rate since the last throttle's pause",
				"limiter", l.cfg.Name, "throttled_at", *r.ThrottledAt, "silent_for", leaderSilence(r))
		}
		if r.PenaltyUntil != nil {
			l.disc.paused(*r.PenaltyUntil)
		}
		l.disc.observe(r.Now, r.Accepted, l.local.reported, r.Rate, r.EffectiveRate)
	}
	l.snap.Rate, l.snap.Burst, l.snap.EffectiveRate, l.snap.Throttles = r.Rate, r.Burst, r.EffectiveRate, r.Throttles
	l.snap.Accepted = r.Accepted
	l.readOwn = l.local.reported
	l.snap.ReadAt = now
	if r.PenaltyUntil != nil {
		until := l.clock.toLocal(*r.PenaltyUntil)
		l.snap.PenaltyUntil = until
		l.local.penalised(until)
	}
}

// takeoverAfter is how long the row may go without a rate set, its last
// pause aside, before a process that follows the fleet's leader takes the
// lead: the leader sets the rate with every lease, and leases while it
// sends (at least once a lease window, or once a call when its share of
// the rate is less), so a row left for a probe period has lost its leader
// (it stopped, or has no more work). Without the takeover no process would
// set the rate until the next 429, which a fleet held under the
// provider's rate never draws. A leader only slow to lease loses the lead
// to the first follower that takes it until the next throttle, whose
// counting process leads again.
const takeoverAfter = firstProbe

// leaderSilence is how long the row r has gone without a rate set since
// the later of the last one and its last throttle's pause (ThrottledAt
// must be set).
func leaderSilence(r rowState) time.Duration {
	since := r.resume()
	if r.SteeredAt != nil {
		since = maxTime(since, *r.SteeredAt)
	}
	return r.Now.Sub(since)
}

// startDiscovery starts the discovery afresh at the first row read and
// after the settings changed (limit set). A throttle counted before is
// history when its pause has ended by the first read, and always after a
// change of the settings: the process starts from the estimate stored (once
// the limit set was refused trustedRefusals times) or from the limit set,
// at full rate. A throttle whose pause is still running is news, and
// counts as one. Called with l.mu held.
func (l *Shared) startDiscovery(r rowState) {
	if r.SettingsAt.Equal(l.settingsAt) {
		return
	}
	first := l.settingsAt.IsZero()
	l.settingsAt = r.SettingsAt
	if !first {
		l.disc = newDiscovery(l.cfg.Decrease, l.cfg.LeaseWindow)
	}
	l.follows = false
	if r.ThrottledAt == nil {
		return
	}
	if first && r.resume().After(r.Now) {
		return
	}
	l.seenAt = *r.ThrottledAt
	if first && r.Refusals >= trustedRefusals && r.Estimate != nil && r.EstimateBurst != nil {
		l.disc.startFrom(r.Now, r.Accepted, l.local.reported, *r.Estimate, *r.EstimateBurst, r.Rate)
	}
}

// read re-reads the row.
func (l *Shared) read(ctx context.Context) error {
	now := l.cfg.Now()
	var r rowState
	err := l.pool.QueryRow(ctx, `SELECT `+rowColumns+`, coalesce(@now::timestamptz, clock_timestamp()) FROM rate_limiters WHERE name = @name`,
		pgx.StrictNamedArgs{"name": l.cfg.Name, "now": l.stmtNow(now)}).Scan(r.dest()...)
	received := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap.RoundTrips++
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read limiter %s: row deleted", l.cfg.Name)
	}
	if err != nil {
		return fmt.Errorf("read limiter %s: %w", l.cfg.Name, err)
	}
	l.learnClock(now, received, r.Now)
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
