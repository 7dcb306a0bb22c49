package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A run's outcomes by provider and its amounts at stake by currency come
// from the ledger's run_breakdown rows (a few per shard: one per provider
// and currency), which the terminal transitions of the items that did not
// match keep; matches are not counted there, so the matched items of a
// provider are its items less the others once the run is complete.

// providerOutcomes counts the items of one provider in a run.
type providerOutcomes struct {
	// Provider is the providers file's name; empty for the default
	// provider of items that named none.
	Provider     string
	Items        int64
	Mismatched   int64
	Missing      int64
	DeadLettered int64
	Cancelled    int64
}

// Name is the provider's name as pages show and filter it.
func (p providerOutcomes) Name() string { return providerLabel(p.Provider) }

// MatchedOrOpen is the provider's items that are neither unmatched nor
// cancelled: matched, or still open while the run is.
func (p providerOutcomes) MatchedOrOpen() int64 {
	return p.Items - p.Mismatched - p.Missing - p.DeadLettered - p.Cancelled
}

// defaultProvider is how pages name the provider of items that name none.
const defaultProvider = "(default)"

func providerLabel(p string) string { return cmp.Or(p, defaultProvider) }

// atStake sums the expected amounts of a run's items in one currency that
// did not match, by outcome, in minor units, with their counts.
type atStake struct {
	Currency                           string
	Mismatched, Missing, DeadLettered  int64
	NMismatched, NMissing, NDeadLetter int64
}

// Total is the amount of the currency's items that did not match.
func (a atStake) Total() int64 { return a.Mismatched + a.Missing + a.DeadLettered }

// breakdown is a run's outcomes by provider and its amounts at stake by
// currency.
type breakdown struct {
	Providers []providerOutcomes
	AtStake   []atStake
}

// loadBreakdowns reads the breakdowns of runs in one statement over their
// run_breakdown rows (the primary key's range of each run).
func loadBreakdowns(ctx context.Context, rd *reader, runIDs []uuid.UUID) (map[uuid.UUID]*breakdown, error) {
	out := make(map[uuid.UUID]*breakdown, len(runIDs))
	if len(runIDs) == 0 {
		return out, nil
	}
	rows, err := rd.Query(ctx, `
		SELECT run_id, provider, currency, sum(item_count), sum(mismatched), sum(missing), sum(dead_lettered),
		       sum(cancelled), sum(mismatched_minor), sum(missing_minor), sum(dead_lettered_minor)
		  FROM run_breakdown WHERE run_id = ANY($1)
		 GROUP BY run_id, provider, currency`, runIDs)
	if err != nil {
		return nil, fmt.Errorf("read breakdown of %d runs: %w", len(runIDs), err)
	}
	type key struct {
		run      uuid.UUID
		provider string
	}
	providers := map[key]*providerOutcomes{}
	stakes := map[uuid.UUID]map[string]*atStake{}
	var run uuid.UUID
	var provider, currency string
	var items, mismatched, missing, dead, cancelled, mismatchedMinor, missingMinor, deadMinor int64
	_, err = pgx.ForEachRow(rows, []any{&run, &provider, &currency, &items, &mismatched, &missing, &dead, &cancelled,
		&mismatchedMinor, &missingMinor, &deadMinor}, func() error {
		p := providers[key{run, provider}]
		if p == nil {
			p = &providerOutcomes{Provider: provider}
			providers[key{run, provider}] = p
		}
		p.Items += items
		p.Mismatched += mismatched
		p.Missing += missing
		p.DeadLettered += dead
		p.Cancelled += cancelled
		if mismatched+missing+dead == 0 {
			return nil
		}
		if stakes[run] == nil {
			stakes[run] = map[string]*atStake{}
		}
		a := stakes[run][currency]
		if a == nil {
			a = &atStake{Currency: currency}
			stakes[run][currency] = a
		}
		a.Mismatched += mismatchedMinor
		a.Missing += missingMinor
		a.DeadLettered += deadMinor
		a.NMismatched += mismatched
		a.NMissing += missing
		a.NDeadLetter += dead
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read breakdown of %d runs: %w", len(runIDs), err)
	}
	for _, id := range runIDs {
		out[id] = &breakdown{}
	}
	for k, p := range providers {
		out[k.run].Providers = append(out[k.run].Providers, *p)
	}
	for run, byCurrency := range stakes {
		for _, a := range byCurrency {
			out[run].AtStake = append(out[run].AtStake, *a)
		}
	}
	for _, b := range out {
		slices.SortFunc(b.Providers, func(x, y providerOutcomes) int { return cmp.Compare(x.Provider, y.Provider) })
		slices.SortFunc(b.AtStake, func(x, y atStake) int { return cmp.Compare(x.Currency, y.Currency) })
	}
	return out, nil
}
