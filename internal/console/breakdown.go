package console

import (
	"cmp"
	"context"
	"slices"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/ledger"
)

// A run's outcomes by provider and its amounts at stake by currency come
// from the ledger's breakdown (a few rows per shard: one per provider and
// currency), which the terminal transitions of the items that did not
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
	// Unexpected counts the records the provider listed that the file
	// lacks (list mode): items of the run too.
	Unexpected int64
}

// Name is the provider's name as pages show and filter it.
func (p providerOutcomes) Name() string { return providerLabel(p.Provider) }

// MatchedOrOpen is the provider's items that are neither unmatched,
// cancelled nor unexpected: matched, or still open while the run is.
func (p providerOutcomes) MatchedOrOpen() int64 {
	return p.Items - p.Mismatched - p.Missing - p.DeadLettered - p.Cancelled - p.Unexpected
}

// defaultProvider is how pages name the provider of items that name none.
const defaultProvider = "(default)"

func providerLabel(p string) string { return cmp.Or(p, defaultProvider) }

// atStake sums the amounts of a run's items in one currency that did not
// match, by outcome, in minor units, with their counts: the expected
// amounts, and for unexpected records (the file has none) the provider's.
type atStake struct {
	Currency                                        string
	Mismatched, Missing, DeadLettered, Unexpected   int64
	NMismatched, NMissing, NDeadLetter, NUnexpected int64
}

// Total is the amount of the currency's items that did not match.
func (a atStake) Total() int64 { return a.Mismatched + a.Missing + a.DeadLettered + a.Unexpected }

// breakdown is a run's outcomes by provider and its amounts at stake by
// currency.
type breakdown struct {
	Providers []providerOutcomes
	AtStake   []atStake
}

// loadBreakdowns reads the breakdowns of runs in one statement
// (ledger.Breakdowns) and groups them by provider and by currency.
func loadBreakdowns(ctx context.Context, rd *reader, runIDs []uuid.UUID) (map[uuid.UUID]*breakdown, error) {
	out := make(map[uuid.UUID]*breakdown, len(runIDs))
	if len(runIDs) == 0 {
		return out, nil
	}
	rows, err := ledger.Breakdowns(ctx, rd, runIDs)
	if err != nil {
		return nil, err
	}
	for _, id := range runIDs {
		out[id] = &breakdown{}
	}
	type key struct {
		run      uuid.UUID
		provider string
	}
	providers := map[key]*providerOutcomes{}
	stakes := map[key]*atStake{} // by run and currency
	for _, b := range rows {
		p := providers[key{b.RunID, b.Provider}]
		if p == nil {
			p = &providerOutcomes{Provider: b.Provider}
			providers[key{b.RunID, b.Provider}] = p
		}
		p.Items += b.Items
		p.Mismatched += b.Mismatched
		p.Missing += b.Missing
		p.DeadLettered += b.DeadLettered
		p.Cancelled += b.Cancelled
		p.Unexpected += b.Unexpected
		if b.Mismatched+b.Missing+b.DeadLettered+b.Unexpected == 0 {
			continue
		}
		a := stakes[key{b.RunID, b.Currency}]
		if a == nil {
			a = &atStake{Currency: b.Currency}
			stakes[key{b.RunID, b.Currency}] = a
		}
		a.Mismatched += b.MismatchedMinor
		a.Missing += b.MissingMinor
		a.DeadLettered += b.DeadLetteredMinor
		a.Unexpected += b.UnexpectedMinor
		a.NMismatched += b.Mismatched
		a.NMissing += b.Missing
		a.NDeadLetter += b.DeadLettered
		a.NUnexpected += b.Unexpected
	}
	for k, p := range providers {
		out[k.run].Providers = append(out[k.run].Providers, *p)
	}
	for k, a := range stakes {
		out[k.run].AtStake = append(out[k.run].AtStake, *a)
	}
	for _, b := range out {
		slices.SortFunc(b.Providers, func(x, y providerOutcomes) int { return cmp.Compare(x.Provider, y.Provider) })
		slices.SortFunc(b.AtStake, func(x, y atStake) int { return cmp.Compare(x.Currency, y.Currency) })
	}
	return out, nil
}
