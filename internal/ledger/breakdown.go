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
	// Queued and RetryScheduled split Open by state, for a run's own
	// split (see Summary.AddOpen); they are not shown by provider.
	Queued         int64 `json:"-"`
	RetryScheduled int64 `json:"-"`
}

// AddOpen gives a summary read without RunFilter.Live the figures Live
// reads, from the run's totals by provider, which hold them already: the
// split of its open items and the calls made for those. A caller that
// reads both saves reading the open items twice.
func (s *Summary) AddOpen(totals []ProviderTotal) {
	s.Queued, s.RetryScheduled, s.ProviderCalls, s.Throttles = 0, 0, 0, 0
	for _, t := range totals {
		s.Queued += t.Queued
		s.RetryScheduled += t.RetryScheduled
		s.ProviderCalls += t.ProviderCalls
		s.Throttles += t.Throttles
	}
}

// ProviderTotals breaks a run's items down by provider, ordered by name
// (the default provider first). The terminal items' figures come from the
// run's counter rows, which are kept per shard and provider (run_shards'
// primary key (run_id, shard, provider)); while the run has open items,
// the calls made for those are added and their states counted from their
// range of items' primary key (run_id, transaction_id), so a complete run
// is summed from its counters alone.
func ProviderTotals(ctx context.Context, db Querier, runID uuid.UUID) ([]ProviderTotal, error) {
	rows, err := db.Query(ctx, `
		WITH s AS (
		    SELECT provider, sum(remaining + `+perTerminal(`%s`, ` + `)+`) AS items,
		           sum(matched) AS matched, sum(mismatched) AS mismatched, sum(missing) AS missing,
		           sum(dead_lettered) AS dead_lettered, sum(unexpected) AS unexpected, sum(remaining) AS open,
		           sum(provider_calls) AS calls, sum(throttles) AS throttles
		      FROM run_shards WHERE run_id = $1
		     GROUP BY provider),
		o AS (
		    SELECT provider, sum(attempts) AS calls, sum(throttles) AS throttles,
		           count(*) FILTER (WHERE state = `+Queued.literal()+`) AS queued,
		           count(*) FILTER (WHERE state = `+RetryScheduled.literal()+`) AS retry_scheduled
		      FROM items
		     WHERE run_id = $1 AND state IN `+sqlList(OpenStates())+` AND (SELECT sum(open) FROM s) > 0
		     GROUP BY provider)
		SELECT s.provider, s.items, s.matched, s.mismatched, s.missing, s.dead_lettered, s.unexpected, s.open,
		       (s.calls + coalesce(o.calls, 0))::bigint, (s.throttles + coalesce(o.throttles, 0))::bigint,
		       coalesce(o.queued, 0), coalesce(o.retry_scheduled, 0)
		  FROM s LEFT JOIN o USING (provider)
		 WHERE s.items > 0
		 ORDER BY s.provider`, runID)
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
