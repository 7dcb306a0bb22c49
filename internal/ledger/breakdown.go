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
	// Matched, Mismatched, Missing, DeadLettered and Unexpected count its
	// terminal items by outcome (Unexpected: records the provider listed
	// that the file lacks, list mode); Open those not terminal yet.
	Matched      int `json:"matched"`
	Mismatched   int `json:"mismatched"`
	Missing      int `json:"missing"`
	DeadLettered int `json:"dead_lettered"`
	Unexpected   int `json:"unexpected"`
	Open         int `json:"open"`
	// ProviderCalls and Throttles count the calls made for its items and
	// those answered 429.
	ProviderCalls int64 `json:"provider_calls"`
	Throttles     int64 `json:"throttles"`
}

// ProviderTotals breaks a run's items down by provider, ordered by name
// (the default provider first), from the run's counter rows, which are
// kept per shard and provider (run_shards' primary key (run_id, shard,
// provider)): a few rows per run, open or complete, whatever its size.
func ProviderTotals(ctx context.Context, db Querier, runID uuid.UUID) ([]ProviderTotal, error) {
	items := `sum(remaining + ` + perTerminal(`%s`, ` + `) + `)`
	rows, err := db.Query(ctx, `
		SELECT provider, `+items+`, sum(matched), sum(mismatched), sum(missing),
		       sum(dead_lettered), sum(unexpected), sum(remaining), sum(provider_calls)::bigint, sum(throttles)::bigint
		  FROM run_shards WHERE run_id = $1
		 GROUP BY provider
		HAVING `+items+` > 0
		 ORDER BY provider`, runID)
	if err != nil {
		return nil, fmt.Errorf("total items of run %s by provider: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ProviderTotal])
	if err != nil {
		return nil, fmt.Errorf("total items of run %s by provider: %w", runID, err)
	}
	return out, nil
}

// Breakdown is what a run's items of one provider and currency came to:
// the outcomes of those that did not match and their amounts at stake.
type Breakdown struct {
	RunID    uuid.UUID
	Provider string
	Currency string
	// Items counts the items; Mismatched, Missing, DeadLettered,
	// Cancelled and Unexpected those that ended so (a match is not
	// counted: the matched items of a complete run are the others'
	// complement).
	Items, Mismatched, Missing, DeadLettered, Cancelled, Unexpected int64
	// MismatchedMinor, MissingMinor and DeadLetteredMinor sum the expected
	// amounts of those items, in minor units of Currency; UnexpectedMinor
	// sums the provider's amounts of the unexpected ones (the file has
	// none).
	MismatchedMinor, MissingMinor, DeadLetteredMinor, UnexpectedMinor int64
}

// Breakdowns returns the breakdown of each of the runs by provider and
// currency, summed over their run_breakdown rows (the primary key's range
// of each run: a few rows per shard).
func Breakdowns(ctx context.Context, db Querier, runIDs []uuid.UUID) ([]Breakdown, error) {
	rows, err := db.Query(ctx, `
		SELECT run_id, provider, currency, sum(item_count), sum(mismatched), sum(missing), sum(dead_lettered),
		       sum(cancelled), sum(unexpected), sum(mismatched_minor), sum(missing_minor), sum(dead_lettered_minor),
		       sum(unexpected_minor)
		  FROM run_breakdown WHERE run_id = ANY ($1)
		 GROUP BY run_id, provider, currency
		 ORDER BY run_id, provider, currency`, runIDs)
	if err != nil {
		return nil, fmt.Errorf("read breakdown of %d runs: %w", len(runIDs), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Breakdown])
	if err != nil {
		return nil, fmt.Errorf("read breakdown of %d runs: %w", len(runIDs), err)
	}
	return out, nil
}
