package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// history appends the discovery's changes to rate_limiter_history. A
// failure is logged, not returned: the history is for people, and a lease
// must not wait for it.
func (l *Shared) history(ctx context.Context, changes []change) {
	if len(changes) == 0 {
		return
	}
	at := make([]time.Time, len(changes))
	causes := make([]string, len(changes))
	rates := make([]float64, len(changes))
	estimates := make([]*float64, len(changes))
	bursts := make([]*float64, len(changes))
	details := make([]string, len(changes))
	for i, c := range changes {
		at[i], causes[i], rates[i], details[i] = c.at, c.cause, c.rate, c.detail
		if c.estimate > 0 {
			estimates[i] = &changes[i].estimate
		}
		if c.burst > 0 {
			bursts[i] = &changes[i].burst
		}
	}
	_, err := l.pool.Exec(ctx, `
		INSERT INTO rate_limiter_history (limiter, recorded_at, cause, rate, estimate, burst, detail)
		SELECT $1::text, a, c, r, e, b, d
		  FROM unnest($2::timestamptz[], $3::text[], $4::float8[], $5::float8[], $6::float8[], $7::text[]) AS u(a, c, r, e, b, d)`,
		l.cfg.Name, at, causes, rates, estimates, bursts, details)
	l.mu.Lock()
	l.snap.RoundTrips++
	l.mu.Unlock()
	if err != nil {
		l.cfg.Logger.Warn("limiter history not recorded", "limiter", l.cfg.Name, "changes", len(changes), "err", err)
	}
}

// Change is one row of a limiter's history: a change of its effective rate
// and its cause.
type Change struct {
	// At is when the change took effect.
	At time.Time
	// Cause is throttle, probe, hint, limit set or estimate.
	Cause string
	// Rate is the effective rate from then on, requests per second.
	Rate float64
	// Estimate is the provider's estimated rate then; 0 when unknown.
	Estimate float64
	// Burst is the provider's estimated burst then; 0 when unknown.
	Burst float64
	// Detail is a sentence for people.
	Detail string
}

// LoadHistory returns the last n changes of limiter name recorded before
// until, oldest first, walking rate_limiter_history_limiter_recorded_at
// (limiter, recorded_at) backwards from until.
func LoadHistory(ctx context.Context, db Querier, name string, until time.Time, n int) ([]Change, error) {
	var (
		at               []time.Time
		causes, details  []string
		rates            []float64
		estimates, burst []*float64
	)
	err := db.QueryRow(ctx, `
		SELECT coalesce(array_agg(recorded_at ORDER BY id), '{}'), coalesce(array_agg(cause ORDER BY id), '{}'),
		       coalesce(array_agg(rate ORDER BY id), '{}'), coalesce(array_agg(estimate ORDER BY id), '{}'),
		       coalesce(array_agg(burst ORDER BY id), '{}'), coalesce(array_agg(detail ORDER BY id), '{}')
		  FROM (SELECT * FROM rate_limiter_history
		         WHERE limiter = $1::text AND recorded_at < $2::timestamptz
		         ORDER BY recorded_at DESC, id DESC LIMIT $3::int) AS last`,
		name, until, n).Scan(&at, &causes, &rates, &estimates, &burst, &details)
	if err != nil {
		return nil, fmt.Errorf("load history of limiter %s: %w", name, err)
	}
	out := make([]Change, len(at))
	for i := range at {
		out[i] = Change{At: at[i], Cause: causes[i], Rate: rates[i], Detail: details[i]}
		if estimates[i] != nil {
			out[i].Estimate = *estimates[i]
		}
		if burst[i] != nil {
			out[i].Burst = *burst[i]
		}
	}
	return out, nil
}

// PruneHistory deletes the history rows of every limiter recorded before
// before, or with dryRun only counts them, and returns how many. The rows
// of `limit set` are kept: they are a person's action, with who and why.
func PruneHistory(ctx context.Context, db DB, before time.Time, dryRun bool) (int64, error) {
	const where = `recorded_at < @before AND cause <> 'limit set'`
	args := pgx.StrictNamedArgs{"before": before}
	if dryRun {
		var n int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM rate_limiter_history WHERE `+where, args).Scan(&n); err != nil {
			return 0, fmt.Errorf("count limiter history before %s: %w", before.Format(time.RFC3339), err)
		}
		return n, nil
	}
	tag, err := db.Exec(ctx, `DELETE FROM rate_limiter_history WHERE `+where, args)
	if err != nil {
		return 0, fmt.Errorf("prune limiter history before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
