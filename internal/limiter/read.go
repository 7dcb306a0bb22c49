package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The limiter's tables for people: its rows (rate_limiters) and the
// history of their changes (rate_limiter_history), read by status, the
// console and `limit show`. The package owns both tables; nothing else runs
// SQL on them.

// Querier is what the read functions need: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it, and so does a wrapper that counts a page's
// queries.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// stateColumns are the columns of a limiter's row scanState reads. The
// penalty left is measured by the database's clock.
const stateColumns = `name, rate, burst, effective_rate, penalty_until,
	coalesce(greatest(extract(epoch FROM penalty_until - clock_timestamp()) * 1e6, 0), 0)::bigint,
	throttles, refusals, coalesce(estimate, 0), coalesce(estimate_burst, 0),
	settings_updated_at, settings_expire_at, restore_rate, restore_burst`

func scanState(row pgx.Row) (State, error) {
	s := State{Stored: true}
	var penalty, expires *time.Time
	var restoreRate *float64
	var restoreBurst *int
	var leftUS int64
	err := row.Scan(&s.Name, &s.Rate, &s.Burst, &s.EffectiveRate, &penalty, &leftUS, &s.Throttles,
		&s.Refusals, &s.Estimate, &s.EstimateBurst, &s.SettingsUpdatedAt, &expires, &restoreRate, &restoreBurst)
	if err != nil {
		return State{}, err
	}
	if penalty != nil {
		s.PenaltyUntil, s.PenaltyLeft = *penalty, time.Duration(leftUS)*time.Microsecond
	}
	if expires != nil && restoreRate != nil && restoreBurst != nil {
		s.ExpiresAt, s.Restore = *expires, Settings{Rate: *restoreRate, Burst: *restoreBurst}
	}
	return s, nil
}

// States returns every limiter's row, by name: the default limiter's and
// one per provider of a providers file, a few rows read whole.
func States(ctx context.Context, db Querier) ([]State, error) {
	rows, err := db.Query(ctx, `SELECT `+stateColumns+` FROM rate_limiters ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read limiters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (State, error) { return scanState(row) })
	if err != nil {
		return nil, fmt.Errorf("read limiters: %w", err)
	}
	return out, nil
}

// Record is a row of a limiter's history: a change and, for `limit set`,
// who made it and why.
type Record struct {
	// ID is the order of recording.
	ID      int64
	Limiter string
	Change
	// Actor and Reason are the operator's for `limit set`; empty for the
	// consumers' own changes.
	Actor, Reason string
}

// HistoryKey is a record's place in the history's (recorded_at, id) order.
type HistoryKey struct {
	At time.Time
	ID int64
}

// History returns the records strictly before before (nil: the newest),
// newest first, at most limit: of limiter name along
// rate_limiter_history_limiter_recorded_at (limiter, recorded_at), or of
// every limiter ("") along rate_limiter_history_recorded_at.
func History(ctx context.Context, db Querier, name string, before *HistoryKey, limit int) ([]Record, error) {
	// Only the conditions given are written, and the limit as a literal,
	// so that a statement without parameters keeps its plan.
	var where []string
	args := pgx.StrictNamedArgs{}
	if before != nil {
		where = append(where, `(recorded_at, id) < (@before_at, @before_id)`)
		args["before_at"], args["before_id"] = before.At, before.ID
	}
	if name != "" {
		where = append(where, `limiter = @name`)
		args["name"] = name
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	rows, err := db.Query(ctx, `
		SELECT id, limiter, recorded_at, cause, rate, coalesce(estimate, 0), coalesce(burst, 0), detail,
		       coalesce(actor, ''), coalesce(reason, '')
		  FROM rate_limiter_history
		 `+cond+`
		 ORDER BY recorded_at DESC, id DESC LIMIT `+strconv.Itoa(limit), args)
	if err != nil {
		return nil, fmt.Errorf("read limiter history: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) {
		var r Record
		err := row.Scan(&r.ID, &r.Limiter, &r.At, &r.Cause, &r.Rate, &r.Estimate, &r.Burst, &r.Detail, &r.Actor, &r.Reason)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read limiter history: %w", err)
	}
	return out, nil
}

// CauseLimitSet is the history's cause of an operator's `limit set`.
const CauseLimitSet = "limit set"

// RateSetBefore returns the rate of limiter name's last `limit set` before
// t; false when none is kept. It walks rate_limiter_history_limiter_recorded_at
// (limiter, recorded_at) backwards from t; the consumers' own rows in
// between are at most the retention's.
func RateSetBefore(ctx context.Context, db Querier, name string, t time.Time) (float64, bool, error) {
	var rate float64
	err := db.QueryRow(ctx, `
		SELECT rate FROM rate_limiter_history
		 WHERE limiter = $1 AND recorded_at < $2 AND cause = $3
		 ORDER BY recorded_at DESC LIMIT 1`, name, t, CauseLimitSet).Scan(&rate)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the rate of limiter %s set before %s: %w", name, t.Format(time.RFC3339), err)
	}
	return rate, true, nil
}
