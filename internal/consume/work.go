package consume

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// process handles one delivery of lane l and hands its result to rec. It
// returns an error only when consuming must stop (the provider refused the
// credentials); other failures leave the message to come back. A call
// starts only when l's circuit allows it, after a token of l's limiter, and
// holds one of slots while it runs.
func (c *Consumer) process(ctx, claimCtx context.Context, rec *recorder, l *lane, slots chan struct{}, j job) error {
	logger := c.cfg.Logger.With("run_id", j.d.RunID, "transaction_id", j.d.TransactionID)
	switch {
	case !j.ok:
		// A message without an item cannot be reconciled; keep it visible
		// for an operator rather than acking it away.
		rec.submit(ctx, logger, j, settlement{fate: deadLetter, reason: "no_item", detail: "no ledger item for this message"})
		return nil
	case j.item.State.Terminal():
		// The outcome is recorded already (a redelivery): just ack.
		rec.submit(ctx, logger, j, settlement{fate: ack})
		return nil
	case j.d.Poison:
		rec.submit(ctx, logger, j, settlement{fate: deadLetter, to: ledger.DeadLettered, reason: "poison",
			detail: fmt.Sprintf("claimed %d times without a result", j.d.Deliveries)})
		return nil
	}

	// An open circuit lets one probe through; everyone else puts the
	// message back until the next probe, uncalled and uncounted, rather
	// than sit on its lease.
	gate := l.allow(c.cfg.Now())
	if gate.Action == circuit.Wait {
		c.deferForCircuit(ctx, rec, logger, j, gate.Until)
		return nil
	}
	probe := gate.Action == circuit.Probe
	abandon := func() {
		if probe {
			l.record(c.cfg.Now(), circuit.Event{Kind: circuit.Ignored, Probe: true})
		}
	}
	if err := l.Limiter.Wait(claimCtx); err != nil {
		// Stopping while waiting for a token: nothing was called.
		abandon()
		c.release(ctx, j.d)
		return nil
	}
	if st := l.circuitState(); st.Open && !probe {
		// The circuit opened while this call waited for its token.
		c.deferForCircuit(ctx, rec, logger, j, st.NextProbe)
		return nil
	}
	if err := c.keepLease(ctx, j); err != nil {
		abandon()
		logger.Debug("lease lost before the call", "err", err)
		c.stats.stale.Add(1)
		return nil
	}
	select {
	case slots <- struct{}{}:
	case <-claimCtx.Done():
		abandon()
		c.release(ctx, j.d)
		return nil
	}
	now := c.cfg.Now()
	stopRenewal := c.renewLease(ctx, logger, j.d)
	resp, callErr := l.Client.Get(ctx, provider.Lookup{TransactionID: j.d.TransactionID, IdempotencyKey: j.d.IdempotencyKey,
		Kind: j.item.Kind, AccountID: j.item.AccountID})
	stopRenewal()
	<-slots
	if provider.KindOf(callErr) == provider.KindCanceled {
		abandon()
		c.release(context.WithoutCancel(ctx), j.d)
		return nil
	}
	// An item whose account the account map lacks is not asked about.
	called := provider.KindOf(callErr) != provider.KindUnmappedAccount
	if called {
		c.observe(l, resp, callErr, now)
	}

	firstAttempt := j.item.FirstAttemptAt
	if firstAttempt.IsZero() {
		firstAttempt = now
	}
	dec := decision.Decide(c.cfg.Policy, decision.Input{
		Expected:     provider.Record{ID: j.item.TransactionID, AmountMinor: j.item.AmountMinor, Currency: j.item.Currency, Status: j.item.Status},
		Response:     resp,
		Err:          callErr,
		Attempt:      j.d.Attempt + 1,
		Throttles:    j.item.Throttles,
		FirstAttempt: firstAttempt,
		Now:          now,
	}, c.random)
	if dec.Throttled || dec.Penalty > 0 {
		if err := l.Limiter.Throttled(ctx, dec.Penalty, limiter.ThrottleKindOf(resp.Header)); err != nil {
			logger.Warn("throttle not shared with other consumers", "err", err)
		}
	}
	kind, cause := circuit.Classify(resp, callErr)
	if dec.Throttled || dec.Action == decision.Stop {
		kind, cause = circuit.Busy, "" // the provider is up, and said nothing about the item
	}
	ended := c.cfg.Now()
	verdict, st := l.record(ended, circuit.Event{Kind: kind, Item: j.d.TransactionID, Cause: cause, Probe: probe,
		Retry: j.item.Attempts > 0, Run: j.d.RunID.String(), RunItems: j.item.RunItems})
	if verdict.Change != circuit.Unchanged {
		c.persistCircuit(ctx, l, st, ended)
	}
	if dec.Action == decision.Stop {
		return fmt.Errorf("%w: %s answered %d for transaction %q; %s and run again (every message is still queued)",
			ErrProviderAuth, l.Client.BaseURL(), resp.Status, j.d.TransactionID, l.credentialsHint())
	}
	s := settlement{called: called, throttled: dec.CountsThrottle, status: resp.Status, reason: dec.Reason,
		detail: dec.Detail, differences: dec.Differences, delay: dec.Delay, at: now}
	if resp.Status >= 200 && resp.Status < 300 && callErr == nil {
		s.provider = &ledger.Provider{AmountMinor: resp.Record.AmountMinor, Currency: resp.Record.Currency, Status: resp.Record.Status}
	}
	switch {
	case verdict.Systemic:
		// The provider is down, not this item: try again after the next
		// probe, without using up one of the item's attempts.
		s.fate, s.to, s.countsAttempt = retryLater, ledger.RetryScheduled, false
		s.reason, s.detail = ReasonCircuitOpen, cause
		s.delay = max(st.NextProbe.Sub(now), 0)
		s.provider = nil
		c.stats.systemic.Add(1)
	case verdict.Hold:
		// A "not found" among the run's first answers, in a shape that is
		// not the provider's own: asked again once the run's other first
		// answers have proven it, or stopped it; nothing recorded yet.
		s.fate, s.to, s.countsAttempt = retryLater, ledger.RetryScheduled, false
		s.reason, s.detail, s.delay = ReasonNotFoundHeld, cause, verdict.HoldFor
	case dec.Action == decision.Ack:
		s.fate = ack
		s.to = dec.Outcome
	case dec.Action == decision.Retry:
		s.fate = retryLater
		s.to = ledger.RetryScheduled
		// Throttles do not use up the failure budget.
		s.countsAttempt = dec.CountsAttempt
	case dec.Action == decision.DeadLetter:
		s.fate = deadLetter
		s.to = ledger.DeadLettered
	}
	rec.submit(ctx, logger, j, s)
	return nil
}

// ReasonCircuitOpen is the reason recorded for a call that failed while the
// provider's circuit was open, and for a message put back until the next
// probe: the attempt does not count against the item.
const ReasonCircuitOpen = "circuit_open"

// ReasonNotFoundHeld is the reason recorded for an item answered "not
// found" in a shape that is not the provider's own among the first items of
// a run not yet proven (see circuit.NotFound): it is asked again shortly,
// without counting an attempt, rather than recorded as missing.
const ReasonNotFoundHeld = "not_found_held"

// deferForCircuit puts j's message back until the circuit's next probe at
// until, without a call, a ledger change or a counted attempt.
func (c *Consumer) deferForCircuit(ctx context.Context, rec *recorder, logger *slog.Logger, j job, until time.Time) {
	now := c.cfg.Now()
	c.stats.deferred.Add(1)
	rec.submit(ctx, logger, j, settlement{fate: retryLater, reason: ReasonCircuitOpen, delay: max(until.Sub(now), 0), at: now})
}

// credentialsHint says what to fix when l's provider refuses the
// credentials.
func (l *lane) credentialsHint() string {
	if l.Name == "" {
		return "fix the provider's credentials (RECONCILE_PROVIDER_TOKEN or the profile's variables)"
	}
	return fmt.Sprintf("fix the credentials of provider %q (the environment variables its providers file entry names)", l.Name)
}

// observe feeds l's limiter and the counters with a call's result.
func (c *Consumer) observe(l *lane, resp provider.Response, err error, now time.Time) {
	c.stats.calls.Add(1)
	class := 0
	if err == nil || resp.Status != 0 {
		class = min(max(resp.Status/100, 0), 5)
	}
	c.stats.byClass[class].Add(1)
	if resp.Status == 429 {
		c.stats.throttles.Add(1)
	} else if resp.Status != 0 {
		l.Limiter.Succeeded()
	}
	if resp.Header != nil {
		l.Limiter.Observe(limiter.ParseHints(resp.Header, now))
	}
}

// random is the decision's jitter source; it is safe for concurrent use.
func (c *Consumer) random() float64 {
	c.rndMu.Lock()
	defer c.rndMu.Unlock()
	return c.rnd.Float64()
}

// keepLease extends the delivery's lease when the wait for a token ate into
// half of it, so the call and the recording fit in what remains. Most
// deliveries are called long before that and cost no extra round trip.
func (c *Consumer) keepLease(ctx context.Context, j job) error {
	visibility := c.queue.Visibility()
	if time.Since(j.claimedAt) < visibility/2 {
		return nil
	}
	return c.queue.Extend(ctx, j.d, visibility)
}

// renewLease extends d's lease every LeaseRenewal until the returned stop
// function is called.
func (c *Consumer) renewLease(ctx context.Context, logger *slog.Logger, d queue.Delivery) (stop func()) {
	every := c.cfg.LeaseRenewal
	if every < 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := c.queue.Extend(ctx, d, c.queue.Visibility()); err != nil {
					logger.Debug("lease not extended", "err", err)
					return
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
