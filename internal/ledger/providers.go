package ledger

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ProviderTotal is what a run's items of one provider came to.
type ProviderTotal struct {
	// Provider is the providers file's name; empty for the default
	// provider of items that named none.
	Provider string `json:"provider"`
	// Items counts the run's items of the provider.
	Items int `json:"items"`
	// Matched, Mismatched, Missing and DeadLettered count its terminal
	// items by outcome; Open those not terminal yet.
	Matched      int `json:"matched"`
	Mismatched   int `json:"mismatched"`
	Missing      int `json:"missing"`
	DeadLettered int `json:"dead_lettered"`
	Open         int `json:"open"`
	// ProviderCalls and Throttles count the calls made for its items and
	// those answered 429.
	ProviderCalls int64 `json:"provider_calls"`
	Throttles     int64 `json:"throttles"`
}

// ProviderTotals breaks a run's items down by provider, ordered by name
// (the default provider first). It reads the run's items (one index range),
// so it is for summaries, not for every call.
func ProviderTotals(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, runID uuid.UUID) ([]ProviderTotal, error) {
	rows, err := db.Query(ctx, `
		SELECT provider, count(*),
		       count(*) FILTER (WHERE state = 'matched'), count(*) FILTER (WHERE state = 'mismatched'),
		       count(*) FILTER (WHERE state = 'missing'), count(*) FILTER (WHERE state = 'dead_lettered'),
		       count(*) FILTER (WHERE state IN `+sqlList(OpenStates())+`),
		       coalesce(sum(attempts), 0), coalesce(sum(throttles), 0)
		  FROM items WHERE run_id = $1
		 GROUP BY provider ORDER BY provider`, runID)
	if err != nil {
		return nil, fmt.Errorf("total items of run %s by provider: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ProviderTotal])
	if err != nil {
		return nil, fmt.Errorf("total items of run %s by provider: %w", runID, err)
	}
	return out, nil
}
