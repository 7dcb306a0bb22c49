package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/provider"
)

// ReasonCircuitOpen is the reason recorded for a call that failed while the
// provider's circuit was open, and for a message put back until the next
// probe: the attempt does not count against the item.
const ReasonCircuitOpen = "circuit_open"

// ReasonNotFoundHeld is the reason recorded for an item answered "not
// found" in a shape that is not the provider's own among the first items of
// a run not yet proven (see circuit.NotFound): it is asked again shortly,
// without counting an attempt, rather than recorded as missing.
const ReasonNotFoundHeld = "not_found_held"

// judge completes o with the provider's answer to its call (resp, or the
// call's error): it feeds l's limiter and circuit, asks decision what the
// answer means, and sets the message's fate from the decision, or from the
// circuit when the provider as a whole is down.
func (c *Consumer) judge(ctx context.Context, l *lane, o outcome, resp provider.Response, callErr error) outcome {
	// An item whose account the account map lacks is not asked about, nor
	// one its run's listing answered for.
	called := provider.KindOf(callErr) != provider.KindUnmappedAccount
	if called && !o.fromList {
		c.observe(l, resp, callErr, o.at)
	}
	dec := decision.Decide(c.cfg.Policy, decisionInput(o.job, resp, callErr, o.at), c.random)
	if dec.Throttled || dec.Penalty > 0 {
		if err := l.Limiter.Throttled(ctx, dec.Penalty, limiter.ThrottleKindOf(resp.Header)); err != nil {
			o.logger.Warn("throttle not shared with other consumers", "err", err)
		}
	}
	kind, cause := circuit.Classify(resp, callErr)
	if dec.Throttled || dec.Action == decision.Stop {
		kind, cause = circuit.Busy, "" // the provider is up, and said nothing about the item
	}
	ended := c.cfg.Now()
	var verdict circuit.Verdict
	var st circuit.State
	if !o.fromList { // a listed record says nothing new of the provider's health
		verdict, st = l.record(ended, circuit.Event{Kind: kind, Item: o.job.d.TransactionID, Cause: cause, Probe: o.probe,
			Retry: o.job.item.Attempts > 0, Run: o.job.d.RunID.String(), RunItems: o.job.item.RunItems})
		if verdict.Change != circuit.Unchanged {
			c.persistCircuit(ctx, l, st, ended)
		}
	}

	if called {
		o.call = &answer{status: resp.Status, throttled: dec.CountsThrottle, differences: dec.Differences}
		if resp.Status >= 200 && resp.Status < 300 && callErr == nil {
			o.call.record = &ledger.Provider{AmountMinor: resp.Record.AmountMinor, Currency: resp.Record.Currency, Status: resp.Record.Status}
		}
	}
	o.reason, o.detail, o.delay = dec.Reason, dec.Detail, dec.Delay
	switch {
	case dec.Action == decision.Stop:
		o.fate = stop
		o.err = fmt.Errorf("%w: %s answered %d for transaction %q; %s and run again (every message is still queued)",
			ErrProviderAuth, l.Client.BaseURL(), resp.Status, o.job.d.TransactionID, l.credentialsHint())
	case verdict.Systemic:
		// The provider is down, not this item: try again after the next
		// probe, without using up one of the item's attempts.
		o.fate, o.to = retryLater, ledger.RetryScheduled
		o.reason, o.detail, o.delay = ReasonCircuitOpen, cause, max(st.NextProbe.Sub(o.at), 0)
		if o.call != nil {
			o.call.record = nil // an answer blamed on the outage says nothing of the item
		}
		c.stats.systemic.Add(1)
	case verdict.Hold:
		// A "not found" among the run's first answers, in a shape that is
		// not the provider's own: asked again once the run's other first
		// answers have proven it, or stopped it; nothing recorded yet.
		o.fate, o.to = retryLater, ledger.RetryScheduled
		o.reason, o.detail, o.delay = ReasonNotFoundHeld, cause, verdict.HoldFor
	case dec.Action == decision.Ack:
		o.fate, o.to = ack, dec.Outcome
	case dec.Action == decision.Retry:
		// Throttles do not use up the failure budget.
		o.fate, o.to, o.countsAttempt = retryLater, ledger.RetryScheduled, dec.CountsAttempt
	case dec.Action == decision.DeadLetter:
		o.fate, o.to = deadLetter, ledger.DeadLettered
	}
	return o
}

// decisionInput is what decision looks at for j's call, answered by resp
// or failed with err, started at now.
func decisionInput(j job, resp provider.Response, err error, now time.Time) decision.Input {
	firstAttempt := j.item.FirstAttemptAt
	if firstAttempt.IsZero() {
		firstAttempt = now
	}
	return decision.Input{
		Expected:     provider.Record{ID: j.item.TransactionID, AmountMinor: j.item.AmountMinor, Currency: j.item.Currency, Status: j.item.Status},
		Response:     resp,
		Err:          err,
		Attempt:      j.d.Attempt + 1,
		Throttles:    j.item.Throttles,
		FirstAttempt: firstAttempt,
		Now:          now,
	}
}

// observe feeds l's limiter and the counters with the result of a call sent
// at sent.
func (c *Consumer) observe(l *lane, resp provider.Response, err error, sent time.Time) {
	c.stats.calls.Add(1)
	class := 0
	if err == nil || resp.Status != 0 {
		class = min(max(resp.Status/100, 0), 5)
	}
	c.stats.byClass[class].Add(1)
	if resp.Status != 0 {
		l.Limiter.Answered(c.cfg.Now().Sub(sent))
		if resp.Status == 429 {
			c.stats.throttles.Add(1)
		} else {
			l.Limiter.Succeeded()
		}
	}
	if resp.Header != nil {
		l.Limiter.Observe(limiter.ParseHints(resp.Header, sent))
	}
}

// random is the decision's jitter source; it is safe for concurrent use.
func (c *Consumer) random() float64 {
	c.rndMu.Lock()
	defer c.rndMu.Unlock()
	return c.rnd.Float64()
}
