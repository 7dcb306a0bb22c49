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

// SetBy says who changes a limiter's settings and why, for its history,
// and for how long.
type SetBy struct {
	// Actor names the person or process: user@host, user@console.
	Actor string
	// Reason is why, in their words; may be empty.
	Reason string
	// For, when positive, makes the settings temporary: after this long the
	// settings in force before them come back (see [ExpireSettings]).
	// Defaults to 0: they stay until changed.
	For time.Duration
}

// SaveSettings sets the rate and burst of limiter name in one statement,
// creating its row if needed. Running Shared limiters apply the change
// within a second. The adaptive rate restarts at the new rate: the operator
// has said what the provider allows. Tokens above the new burst are dropped.
// The change is recorded in the limiter's history.
//
// With by.For set the settings are temporary: the ones in force before them
// (the defaults for a new row) are kept to be restored then, and a second
// temporary change keeps the same ones to return to. Settings without For
// cancel a pending restore.
func SaveSettings(ctx context.Context, db DB, name string, s Settings, by SetBy) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("save settings of limiter %s: %w", name, err)
	}
	if by.For < 0 {
		return fmt.Errorf("save settings of limiter %s: For %s: want a positive duration or 0", name, by.For)
	}
	var forUS *int64
	detail := "rate %s/s, burst %s set"
	if by.For > 0 {
		forUS = new(by.For.Microseconds())
		detail = "rate %s/s, burst %s set until %s"
	}
	_, err := db.Exec(ctx, `
		WITH saved AS (
		    INSERT INTO rate_limiters AS r (name, rate, burst, effective_rate, tokens,
		                                    settings_expire_at, restore_rate, restore_burst)
		    VALUES (@name, @rate::float8, @burst::int, @rate::float8, @burst::int,
		            now() + @for_us::bigint * interval '1 microsecond',
		            CASE WHEN @for_us::bigint IS NOT NULL THEN @default_rate::float8 END,
		            CASE WHEN @for_us::bigint IS NOT NULL THEN @default_burst::int END)
		    ON CONFLICT (name) DO UPDATE
		       SET rate = excluded.rate, burst = excluded.burst, effective_rate = excluded.rate,
		           tokens = least(r.tokens, excluded.burst), settings_updated_at = now(),
		           refusals = 0, estimate = NULL, estimate_burst = NULL,
		           settings_expire_at = excluded.settings_expire_at,
		           restore_rate = CASE WHEN @for_us::bigint IS NOT NULL THEN coalesce(r.restore_rate, r.rate) END,
		           restore_burst = CASE WHEN @for_us::bigint IS NOT NULL THEN coalesce(r.restore_burst, r.burst) END
		    RETURNING name, rate, settings_expire_at
		)
		INSERT INTO rate_limiter_history (limiter, cause, rate, detail, actor, reason)
		SELECT name, 'limit set', rate, format(@detail::text, rate, @burst::int, settings_expire_at), @actor::text,
		       nullif(@reason::text, '')
		  FROM saved`,
		pgx.StrictNamedArgs{"name": name, "rate": s.Rate, "burst": s.Burst, "for_us": forUS,
			"default_rate": DefaultRate, "default_burst": DefaultBurst, "detail": detail,
			"actor": by.Actor, "reason": by.Reason})
	if err != nil {
		return fmt.Errorf("save settings of limiter %s: %w", name, err)
	}
	return nil
}

// ExpireSettings restores the settings of every limiter whose temporary
// ones (SetBy.For) have expired, records each restore in the history, and
// returns how many it restored. Running consumers call it every few
// seconds; whichever gets there first restores, the others find nothing.
func ExpireSettings(ctx context.Context, db DB) (int, error) {
	tag, err := db.Exec(ctx, `
		WITH due AS (
		    UPDATE rate_limiters r
		       SET rate = r.restore_rate, burst = r.restore_burst, effective_rate = r.restore_rate,
		           tokens = least(r.tokens, r.restore_burst), settings_updated_at = now(),
		           refusals = 0, estimate = NULL, estimate_burst = NULL,
		           settings_expire_at = NULL, restore_rate = NULL, restore_burst = NULL
		     WHERE r.settings_expire_at <= now()
		    RETURNING r.name, r.rate, r.burst)
		INSERT INTO rate_limiter_history (limiter, cause, rate, detail, actor, reason)
		SELECT name, 'limit set', rate, format('rate %s/s, burst %s restored: the temporary limit expired', rate, burst),
		       'reconcile', 'expiry of a limit set for a while'
		  FROM due`)
	if err != nil {
		return 0, fmt.Errorf("restore expired limiter settings: %w", err)
	}
	return int(tag.RowsAffected()), nil
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
	// PenaltyUntil is when the latest penalty ends (zero if none), on the
	// database's clock.
	PenaltyUntil time.Time
	// PenaltyLeft is how much of that penalty was left when the row was
	// read, by the database's clock: whether the limiter is paused is this,
	// not PenaltyUntil against a local clock that may be seconds off.
	PenaltyLeft time.Duration
	// Throttles counts the throttles reported by all processes.
	Throttles int64
	// Refusals counts the throttles counted since rate and burst were
	// set: from trustedRefusals on, the consumers measure the provider's
	// limit.
	Refusals int
	// Estimate and EstimateBurst are the provider's rate and bucket as the
	// consumers last measured them; 0 when unknown.
	Estimate, EstimateBurst float64
	// SettingsUpdatedAt is when rate and burst were last set.
	SettingsUpdatedAt time.Time
	// ExpiresAt, when not zero, is when the settings give way to Restore.
	ExpiresAt time.Time
	// Restore is what comes back at ExpiresAt.
	Restore Settings
}

// Unstored is the state of limiter name before any process stored a row:
// the defaults, with Stored false.
func Unstored(name string) State {
	return State{Name: name, Settings: Settings{Rate: DefaultRate, Burst: DefaultBurst}, EffectiveRate: DefaultRate}
}

// LoadState reads the row of limiter name (the primary key). Without a row
// it returns the defaults with Stored false.
func LoadState(ctx context.Context, db Querier, name string) (State, error) {
	s, err := scanState(db.QueryRow(ctx, `SELECT `+stateColumns+` FROM rate_limiters WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return Unstored(name), nil
	}
	if err != nil {
		return State{}, fmt.Errorf("load state of limiter %s: %w", name, err)
	}
	return s, nil
}
