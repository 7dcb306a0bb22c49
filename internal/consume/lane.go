package consume

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/listing"
	"github.com/reconcile/reconcile/internal/logthrottle"
	"github.com/reconcile/reconcile/internal/provider"
)

// Provider is one provider a Consumer calls: the items routed to it (by
// the provider recorded on each item), the client that calls it and the
// shared limiter that paces those calls. Each provider also gets its own
// circuit, so one provider's outage or pause never holds up another's
// items.
type Provider struct {
	// Name is the provider's name in the providers file and on its items.
	// The first provider of a Consumer is the default one: it also takes
	// the items that name no provider. Empty for a Consumer of one
	// provider.
	Name string
	// Client calls the provider. Required.
	Client *provider.Client
	// Limiter paces the calls to the provider, shared with every process
	// calling it. Required.
	Limiter *limiter.Shared
}

// A lane is everything a Consumer keeps per provider: its claimer's
// buffer, its circuit and the warnings of an open circuit.
type lane struct {
	Provider
	// claim is what the lane's claimer asks the queue for: the providers
	// named on the messages it takes, "" for the items that name none (a
	// consumer of one unnamed provider takes only those: items routed to a
	// named provider are never sent to it).
	claim   []string
	jobs    chan job
	taken   chan struct{} // a worker took a job
	busy    atomic.Int64  // workers processing one of the lane's jobs
	runDone chan struct{} // a recorded result completed a run
	logger  *slog.Logger
	// lister lists the provider's records of a run first (list mode);
	// nil when the provider's profile has no list request. listsRun holds
	// whether each run seen is listed (its check mode, see
	// ledger.ChooseCheckMode) and settled the runs whose listing ended;
	// only the lane's claimer uses them.
	lister   *listing.Lister
	listsRun map[uuid.UUID]bool
	settled  map[uuid.UUID]bool

	mu        sync.Mutex // guards breaker and warn
	breaker   *circuit.Breaker
	warn      logthrottle.State // the open circuit's warnings
	warnEvery time.Duration
}

// label names the lane's provider in logs: its name, or its URL when the
// consumer has a single provider.
func (l *lane) label() string {
	if l.Name != "" {
		return l.Name
	}
	return l.Client.BaseURL()
}

// credentialsHint says what to fix when l's provider refuses the
// credentials.
func (l *lane) credentialsHint() string {
	if l.Name == "" {
		return "fix the provider's credentials (RECONCILE_PROVIDER_TOKEN or the profile's variables)"
	}
	return fmt.Sprintf("fix the credentials of provider %q (the environment variables its providers file entry names)", l.Name)
}

// allow asks the circuit whether a call may start at now.
func (l *lane) allow(now time.Time) circuit.Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.breaker.Allow(now)
}

// circuitState returns the circuit's state.
func (l *lane) circuitState() circuit.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.breaker.State()
}

// record reports a call's outcome to the circuit, logs what changed (a
// WARN at once when it opens, then one every Warnings interval with the
// count of failures, an INFO when it closes) and returns the verdict with
// the circuit's state after it.
func (l *lane) record(now time.Time, ev circuit.Event) (v circuit.Verdict, st circuit.State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v = l.breaker.Record(now, ev)
	st = l.breaker.State()
	switch {
	case v.Change == circuit.Opened:
		l.warn.Fail(now, l.warnEvery, st.Cause) // the outage's first warning is this one
		l.logger.Warn(openedMessage(st.Why)+": circuit open, calls stopped; probing with one call at a backed-off interval",
			"provider", l.label(), "url", l.Client.BaseURL(), "cause", st.Cause, "next_probe_in", st.NextProbe.Sub(now).Round(time.Millisecond))
	case v.Change == circuit.Closed:
		out, _ := l.warn.OK(now)
		l.logger.Info("provider reachable again: circuit closed, calls resume at the limiter's rate",
			"provider", l.label(), "url", l.Client.BaseURL(), "failures", out.Failures, "outage", out.Lasted.Round(time.Millisecond))
	case v.Systemic:
		if line, warn := l.warn.Fail(now, l.warnEvery, st.Cause); warn {
			l.logger.Warn(stillMessage(st.Why),
				"provider", l.label(), "url", l.Client.BaseURL(), "cause", st.Cause, "failures", line.Failures,
				"failures_total", line.Total,
				"open_for", now.Sub(st.OpenedAt).Round(time.Second), "probes", st.Probes,
				"next_probe_in", st.NextProbe.Sub(now).Round(time.Millisecond))
		}
	}
	return v, st
}

// openedMessage says why a circuit is open, for its warnings.
func openedMessage(why circuit.Kind) string {
	switch why {
	case circuit.NotFound:
		return "provider answers not found for every first item of a run, never in its own not-found shape (a wrong base URL?)"
	case circuit.WrongAccount:
		return "provider says the credentials are for another mode or account than the objects (a test key for live ids?)"
	default:
		return "provider unreachable"
	}
}

// stillMessage is the repeated warning of an open circuit.
func stillMessage(why circuit.Kind) string {
	if why == circuit.NotFound || why == circuit.WrongAccount {
		return openedMessage(why) + ": circuit still open"
	}
	return "provider still unreachable: circuit open"
}

// CircuitState is the circuit of one provider, for metrics and tests.
type CircuitState struct {
	// Provider is the provider's name (empty for a single provider).
	Provider string
	// URL is the provider's base URL.
	URL string
	circuit.State
}

// Circuits returns the state of every provider's circuit, in the order of
// the Consumer's providers. It is safe for concurrent use.
func (c *Consumer) Circuits() []CircuitState {
	out := make([]CircuitState, len(c.lanes))
	for i, l := range c.lanes {
		out[i] = CircuitState{Provider: l.Name, URL: l.Client.BaseURL(), State: l.circuitState()}
	}
	return out
}

// persistCircuit writes the circuit's state for `status`; a failure is
// logged, not fatal: the circuit works without it.
func (c *Consumer) persistCircuit(ctx context.Context, l *lane, st circuit.State, at time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := saveCircuit(ctx, c.pool, l.Name, l.Client.BaseURL(), st, c.cfg.Actor, at); err != nil {
		l.logger.Warn("circuit state not saved for status", "provider", l.label(), "err", err)
	}
}
