package limiter

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"
)

// Defaults of Config.
const (
	// DefaultDecrease multiplies the effective rate on a throttle.
	DefaultDecrease = 0.5
	// DefaultIncrease is the fraction of the configured rate added per
	// second of throttle-free success.
	DefaultIncrease = 0.05
	// DefaultLeaseWindow bounds the tokens a process holds.
	DefaultLeaseWindow = 100 * time.Millisecond
	// DefaultPollInterval is how often an idle limiter re-reads its row.
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultRecovery turns the limit discovery on (see Config.Recovery).
	DefaultRecovery = 2 * time.Second
	// DefaultMaxHintPenalty caps the pause taken for an exhausted quota.
	DefaultMaxHintPenalty = 5 * time.Minute
)

// DefaultFloor returns the floor used when none is configured: ceiling/100,
// at least 0.5 tokens per second, never above the ceiling.
func DefaultFloor(ceiling float64) float64 {
	return math.Min(ceiling, math.Max(0.5, ceiling/100))
}

// Config configures a Shared limiter.
type Config struct {
	// Name selects the limiter's row. Defaults to DefaultName.
	Name string
	// Now is this process's clock, for sleeping until a slot. The row's
	// times (slots, penalties, the discovery's measurements) are on the
	// database's clock (clock_timestamp()), whose offset from Now the
	// limiter learns from each round trip, so processes whose clocks
	// disagree by seconds still share one budget and honour each other's
	// Retry-After. Defaults to time.Now.
	Now func() time.Time
	// LocalClock puts the row's times on Now instead of the database's
	// clock: for tests that drive Now by hand. Defaults to false.
	LocalClock bool
	// Logger receives settings changes and database errors of the
	// background poll. Defaults to discarding.
	Logger *slog.Logger
	// Floor is the lowest effective rate, in requests per second, never
	// above the configured rate, >= 0. Defaults to DefaultFloor(rate)
	// (rate/100, at least 0.5).
	Floor float64
	// Decrease multiplies the effective rate on a throttle, in (0, 1).
	// Defaults to DefaultDecrease (0.5).
	Decrease float64
	// Increase is the fraction of the configured rate added to the
	// effective rate per second of throttle-free success, > 0. Defaults to
	// DefaultIncrease (0.05).
	Increase float64
	// LeaseWindow bounds the tokens a process holds: a lease covers at most
	// this much of the effective rate (and at most burst), and leased tokens
	// nobody took expire this long after their slot. Defaults to
	// DefaultLeaseWindow (100ms).
	LeaseWindow time.Duration
	// PollInterval is how often an idle limiter re-reads its row, so
	// Snapshot and the next Wait see `limit set` changes and other
	// processes' penalties. Busy limiters read the row on every lease.
	// Defaults to DefaultPollInterval (250ms).
	PollInterval time.Duration
	// Recovery selects how the effective rate recovers after a throttle.
	// Positive: the limit discovery (see discovery) measures the provider's
	// rate between two throttles (from the calls accepted fleet-wide in
	// between), cruises just under it, and probes above it soon after it
	// changed and more rarely while it holds (from every 5 s, doubling up
	// to the period at which the probes' pauses cost 0.4% of the calls); a probe that outlives its due 429 doubles the rate every
	// 0.5 s until the next 429 measures the raised limit. Rate-limit
	// headers, when the provider sends them, pace the limiter instead.
	// Every process measures from the same throttles, counted in the row.
	// Negative turns the discovery off: plain additive increase. Defaults
	// to DefaultRecovery (on).
	Recovery time.Duration
	// MaxHintPenalty caps the pause taken when response headers say the
	// quota is exhausted until a reset time. Defaults to
	// DefaultMaxHintPenalty (5m).
	MaxHintPenalty time.Duration
}

// WithDefaults returns c with every zero field set to its default. Open
// applies it.
func (c Config) WithDefaults() Config {
	c.Name = cmp.Or(c.Name, DefaultName)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.Decrease = cmp.Or(c.Decrease, DefaultDecrease)
	c.Increase = cmp.Or(c.Increase, DefaultIncrease)
	c.LeaseWindow = cmp.Or(c.LeaseWindow, DefaultLeaseWindow)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.Recovery = cmp.Or(c.Recovery, DefaultRecovery)
	c.MaxHintPenalty = cmp.Or(c.MaxHintPenalty, DefaultMaxHintPenalty)
	return c
}

// validate reports a field out of range, naming it. It expects the defaults
// applied.
func (c Config) validate() error {
	switch {
	case c.Floor < 0 || math.IsNaN(c.Floor):
		return fmt.Errorf("config: Floor %v must be >= 0", c.Floor)
	case !(c.Decrease > 0 && c.Decrease < 1):
		return fmt.Errorf("config: Decrease %v must be in (0, 1)", c.Decrease)
	case !(c.Increase > 0) || math.IsInf(c.Increase, 1):
		return fmt.Errorf("config: Increase %v must be a finite number > 0", c.Increase)
	case c.LeaseWindow < 0:
		return fmt.Errorf("config: LeaseWindow %v must be >= 0", c.LeaseWindow)
	case c.PollInterval < 0:
		return fmt.Errorf("config: PollInterval %v must be >= 0", c.PollInterval)
	case c.MaxHintPenalty < 0:
		return fmt.Errorf("config: MaxHintPenalty %v must be >= 0", c.MaxHintPenalty)
	}
	return nil
}
