package report

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
)

// CircuitStatus is the circuit of one provider as a consumer last changed
// it (table provider_circuits).
type CircuitStatus struct {
	// Provider is the providers file's name; empty for a single provider.
	Provider string `json:"provider"`
	URL      string `json:"url"`
	// Open is true while calls to the provider are stopped but for a probe.
	Open bool `json:"open"`
	// OpenedAt and NextProbeAt are omitted when closed.
	OpenedAt    *time.Time `json:"opened_at,omitempty"`
	NextProbeAt *time.Time `json:"next_probe_at,omitempty"`
	// Cause is what opened the circuit, or the latest failure since.
	Cause string `json:"cause,omitempty"`
	// Probes and Failures count since the circuit opened.
	Probes   int `json:"probes"`
	Failures int `json:"failures"`
	// ChangedAt and ChangedBy say when and which consumer last changed it.
	ChangedAt time.Time `json:"changed_at"`
	ChangedBy string    `json:"changed_by"`
}

// loadCircuits reads every provider's circuit.
func loadCircuits(ctx context.Context, db DB) ([]CircuitStatus, error) {
	rows, err := consume.Circuits(ctx, db)
	if err != nil {
		return nil, err
	}
	var out []CircuitStatus
	for _, c := range rows {
		out = append(out, CircuitStatus{Provider: c.Provider, URL: c.URL, Open: c.Open, OpenedAt: c.OpenedAt,
			NextProbeAt: c.NextProbeAt, Cause: c.Cause, Probes: c.Probes, Failures: c.Failures,
			ChangedAt: c.ChangedAt, ChangedBy: c.ChangedBy})
	}
	return out, nil
}

// providerLimiterPrefix starts the limiter rows of a providers file's
// providers (provider:stripe).
const providerLimiterPrefix = "provider:"

// providerLimiters returns the statuses of the limiters of a providers
// file's providers among states.
func providerLimiters(states []limiter.State) []LimiterStatus {
	var out []LimiterStatus
	for _, ls := range states {
		if !strings.HasPrefix(ls.Name, providerLimiterPrefix) {
			continue
		}
		s := LimiterStatus{Name: ls.Name, ConfiguredRate: ls.Rate, Burst: ls.Burst, EffectiveRate: ls.EffectiveRate, Throttles: ls.Throttles}
		s.pause(ls)
		out = append(out, s)
	}
	return out
}

// providerTotals reads a run's totals by provider as a report shows them:
// nil when its items name no provider (a night of one provider).
func providerTotals(ctx context.Context, db DB, runID uuid.UUID) ([]ledger.ProviderTotal, error) {
	t, err := ledger.ProviderTotals(ctx, db, runID)
	if err != nil || len(t) == 1 && t[0].Provider == "" {
		return nil, err
	}
	return t, nil
}

// providerName shows the default provider of items that name none.
func providerName(p string) string { return cmp.Or(p, "(default)") }

// writeProviderTotals writes one line per provider of a run.
func writeProviderTotals(bw *bufio.Writer, indent string, totals []ledger.ProviderTotal) {
	for _, p := range totals {
		fmt.Fprintf(bw, "%sprovider %s: %s items: %s matched, %s mismatched, %s missing, %s dead-lettered%s, %s open; %s provider calls, %s throttled\n",
			indent, providerName(p.Provider), count(p.Items), count(p.Matched), count(p.Mismatched), count(p.Missing),
			count(p.DeadLettered), UnexpectedCount(p.Unexpected), count(p.Open), human.Count(p.ProviderCalls), human.Count(p.Throttles))
	}
}

// writeProviders writes the provider limiters and circuits of a status.
func (st Status) writeProviders(bw *bufio.Writer) {
	for _, l := range st.ProviderLimiters {
		fmt.Fprintf(bw, "limiter %s: configured %s (burst %d), effective %s, %s throttles",
			l.Name, human.Rate(l.ConfiguredRate), l.Burst, human.Rate(l.EffectiveRate), human.Count(l.Throttles))
		if l.PenaltyUntil != nil {
			fmt.Fprintf(bw, ", paused until %s", fmtTime(*l.PenaltyUntil))
		}
		bw.WriteString("\n")
	}
	for _, c := range st.Circuits {
		name := c.Provider
		if name == "" {
			name = c.URL
		} else {
			name += " (" + c.URL + ")"
		}
		if !c.Open {
			fmt.Fprintf(bw, "provider %s: circuit closed (last change %s by %s)\n", name, fmtTime(c.ChangedAt), c.ChangedBy)
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "provider %s: CIRCUIT OPEN since %s (%s): calls stopped, %d probes, %d failures",
			name, fmtTimePtr(c.OpenedAt), c.Cause, c.Probes, c.Failures)
		if c.NextProbeAt != nil {
			fmt.Fprintf(&b, ", next probe %s", fmtTime(*c.NextProbeAt))
		}
		bw.WriteString(b.String() + "\n")
	}
}
