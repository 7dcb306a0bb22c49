package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/ledger"
)

// A run's outcomes by provider and its amounts at stake by currency are not
// kept in any counter row: items has no index on state or provider, so an
// exact figure reads every item of the run (ledger.ProviderTotals does, for
// report and status). A page reads the run's first Config.Window items by
// transaction id instead, one index range, and says so when the run has
// more: the figures are then those of that slice, not of the run.

// providerOutcomes counts the items of one provider in the slice read.
type providerOutcomes struct {
	// Provider is the providers file's name; empty for the default
	// provider of items that named none.
	Provider     string
	Items        int64
	Matched      int64
	Mismatched   int64
	Missing      int64
	DeadLettered int64
	Cancelled    int64
	Open         int64
	Calls        int64
	Throttles    int64
}

// Name is the provider's name as pages show and filter it.
func (p providerOutcomes) Name() string { return providerLabel(p.Provider) }

// defaultProvider is how pages name the provider of items that name none.
const defaultProvider = "(default)"

func providerLabel(p string) string { return cmp.Or(p, defaultProvider) }

// atStake sums the expected amounts of the items in one currency that did
// not match, by outcome, in minor units.
type atStake struct {
	Currency                           string
	Mismatched, Missing, DeadLettered  int64
	NMismatched, NMissing, NDeadLetter int64
}

// Total is the amount of the currency's items that did not match.
func (a atStake) Total() int64 { return a.Mismatched + a.Missing + a.DeadLettered }

// breakdown is a run's outcomes by provider and its amounts at stake by
// currency, from the first Scanned items of the run.
type breakdown struct {
	Providers []providerOutcomes
	AtStake   []atStake
	// Scanned is how many items were read; Partial is true when the run
	// has more, and the figures are those of its first Scanned items.
	Scanned int64
	Partial bool
}

// loadBreakdown reads the first window items of a run (by transaction id,
// the items' primary key range) in one statement and groups them by
// provider, state and currency.
func loadBreakdown(ctx context.Context, rd *reader, runID uuid.UUID, items int64, window int) (breakdown, error) {
	var b breakdown
	rows, err := rd.Query(ctx, `
		SELECT provider, state, currency, count(*), coalesce(sum(amount_minor), 0)::bigint,
		       coalesce(sum(attempts), 0)::bigint, coalesce(sum(throttles), 0)::bigint
		  FROM (SELECT provider, state, currency, amount_minor, attempts, throttles FROM items
		         WHERE run_id = $1 ORDER BY transaction_id LIMIT $2) w
		 GROUP BY 1, 2, 3`, runID, window)
	if err != nil {
		return b, fmt.Errorf("break down items of run %s: %w", runID, err)
	}
	byProvider := map[string]*providerOutcomes{}
	byCurrency := map[string]*atStake{}
	var provider, state, currency string
	var n, amount, calls, throttles int64
	_, err = pgx.ForEachRow(rows, []any{&provider, &state, &currency, &n, &amount, &calls, &throttles}, func() error {
		b.Scanned += n
		p := byProvider[provider]
		if p == nil {
			p = &providerOutcomes{Provider: provider}
			byProvider[provider] = p
		}
		p.Items += n
		p.Calls += calls
		p.Throttles += throttles
		a := byCurrency[currency]
		if a == nil {
			a = &atStake{Currency: currency}
			byCurrency[currency] = a
		}
		switch ledger.State(state) {
		case ledger.Matched:
			p.Matched += n
		case ledger.Mismatched:
			p.Mismatched += n
			a.Mismatched += amount
			a.NMismatched += n
		case ledger.Missing:
			p.Missing += n
			a.Missing += amount
			a.NMissing += n
		case ledger.DeadLettered:
			p.DeadLettered += n
			a.DeadLettered += amount
			a.NDeadLetter += n
		case ledger.Cancelled:
			p.Cancelled += n
		default:
			p.Open += n
		}
		return nil
	})
	if err != nil {
		return b, fmt.Errorf("break down items of run %s: %w", runID, err)
	}
	for _, p := range byProvider {
		b.Providers = append(b.Providers, *p)
	}
	slices.SortFunc(b.Providers, func(x, y providerOutcomes) int { return cmp.Compare(x.Provider, y.Provider) })
	for _, a := range byCurrency {
		if a.Total() != 0 || a.NMismatched+a.NMissing+a.NDeadLetter > 0 {
			b.AtStake = append(b.AtStake, *a)
		}
	}
	slices.SortFunc(b.AtStake, func(x, y atStake) int { return cmp.Compare(x.Currency, y.Currency) })
	b.Partial = b.Scanned < items
	return b, nil
}
