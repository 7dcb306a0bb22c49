package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of a limiter whose row does not exist yet.
const (
	// DefaultName is the name of the provider's limiter.
	DefaultName = "provider"
	// DefaultRate is the configured rate (requests per second) of a new
	// limiter.
	DefaultRate = 10.0
	// DefaultBurst is the configured burst of a new limiter.
	DefaultBurst = 10
)

// DB is what the settings functions need: a pool, a connection or a
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Settings are the operator's configuration of a limiter.
type Settings struct {
	// Rate is the ceiling in requests per second, > 0.
	Rate float64
	// Burst is the most requests allowed at once after an idle period, >= 1.
	Burst int
}

// Validate reports a setting out of range, naming it.
func (s Settings) Validate() error {
	if !(s.Rate > 0) || math.IsInf(s.Rate, 0) {
		return fmt.Errorf("rate %v: must be a positive number of requests per second", s.Rate)
	}
	if s.Burst < 1 {
		return fmt.Errorf("burst %d: must be at least 1", s.Burst)
	}
	return nil
}

// LoadSettings returns the settings of limiter name, or the defaults
// (DefaultRate, DefaultBurst) when it has no row yet.
func LoadSettings(ctx context.Context, db DB, name string) (Settings, error) {
	var s Settings
	err := db.QueryRow(ctx, `SELECT rate, burst FROM rate_limiters WHERE name = $1`, name).Scan(&s.Rate, &s.Burst)
	if errors.Is(err, pgx.ErrNoRows) {
		return Settings{Rate: DefaultRate, Burst: DefaultBurst}, nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("load settings of limiter %s: %w", name, err)
	}
	return s, nil
}

// SetBy says who changes a limiter's settings and why, for its history.
type SetBy struct {
	// Actor names the person or process: user@host, user@console.
	Actor string
	// Reason is why, in their words; may be empty.
	Reason string
}

// SaveSettings sets the rate and burst of limiter name in one statement,
// creating its row if needed. Running Shared limiters apply the change
// within a second. The adaptive rate restarts at the new rate: the operator
// has said what the provider allows. Tokens above the new burst are dropped.
// The change is recorded in the limiter's history.
func SaveSettings(ctx context.Context, db DB, name string, s Settings, by SetBy) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("save settings of limiter %s: %w", name, err)
	}
	_, err := db.Exec(ctx, `
		WITH saved AS (
		    INSERT INTO rate_limiters AS r (name, rate, burst, effective_rate, tokens)
		    VALUES ($1::text, $2::float8, $3::int, $2::float8, $3::int)
		    ON CONFLICT (name) DO UPDATE
		       SET rate = excluded.rate, burst = excluded.burst, effective_rate = excluded.rate,
		           tokens = least(r.tokens, excluded.burst), settings_updated_at = now()
		    RETURNING name, rate
		)
		INSERT INTO rate_limiter_history (limiter, cause, rate, detail, actor, reason)
		SELECT name, 'limit set', rate, format('rate %s/s, burst %s set', rate, $3::int), $4::text, nullif($5::text, '')
		  FROM saved`,
		name, s.Rate, s.Burst, by.Actor, by.Reason)
	if err != nil {
		return fmt.Errorf("save settings of limiter %s: %w", name, err)
	}
	return nil
}

// State is a limiter's row as stored: its settings and its running state.
type State struct {
	Settings
	// Name of the limiter.
	Name string
	// Stored is false when the limiter has no row yet (Settings are then
	// the defaults).
	Stored bool
	// EffectiveRate is the adaptive rate in force, requests per second.
	EffectiveRate float64
	// PenaltyUntil is when the latest penalty ends (zero if none).
	PenaltyUntil time.Time
	// Throttles counts the throttles reported by all processes.
	Throttles int64
	// SettingsUpdatedAt is when rate and burst were last set.
	SettingsUpdatedAt time.Time
}

// LoadState reads the row of limiter name. Without a row it returns the
// defaults with Stored false.
func LoadState(ctx context.Context, db DB, name string) (State, error) {
	s := State{Name: name, Stored: true}
	var penalty *time.Time
	err := db.QueryRow(ctx, `
		SELECT rate, burst, effective_rate, penalty_until, throttles, settings_updated_at
		  FROM rate_limiters WHERE name = $1`, name).
		Scan(&s.Rate, &s.Burst, &s.EffectiveRate, &penalty, &s.Throttles, &s.SettingsUpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return State{Name: name, Settings: Settings{Rate: DefaultRate, Burst: DefaultBurst}, EffectiveRate: DefaultRate}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("load state of limiter %s: %w", name, err)
	}
	if penalty != nil {
		s.PenaltyUntil = *penalty
	}
	return s, nil
}
