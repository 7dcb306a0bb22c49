package consume

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// work is one worker of lane l: it processes l's jobs until the claimer
// closes the channel, and settles each one's outcome. Once claiming has
// stopped, a job not started is handed back.
func (c *Consumer) work(lc *lifecycle, rec *recorder, l *lane, slots chan struct{}) {
	for j := range l.jobs {
		select {
		case l.taken <- struct{}{}:
		default:
		}
		o := outcome{job: j, logger: c.cfg.Logger.With("run_id", j.d.RunID, "transaction_id", j.d.TransactionID), at: c.cfg.Now()}
		if lc.claimCtx.Err() != nil {
			c.settle(lc, rec, l, o.handedBack())
			continue
		}
		l.busy.Add(1)
		c.settle(lc, rec, l, c.process(lc, l, slots, o))
		l.busy.Add(-1)
	}
}

// process takes the delivery of o from its claim to its outcome. A call
// starts only when l's circuit allows it, after a token of l's limiter, and
// holds one of slots while it runs; it runs until it ends or the grace
// after claiming stopped is over.
func (c *Consumer) process(lc *lifecycle, l *lane, slots chan struct{}, o outcome) outcome {
	j := o.job
	switch {
	case !j.ok:
		// A message without an item cannot be reconciled; keep it visible
		// for an operator rather than acking it away.
		return o.deadLettered("", "no_item", "no ledger item for this message")
	case j.item.State.Terminal():
		return o.acked() // the outcome is recorded already (a redelivery)
	case j.d.Poison:
		return o.deadLettered(ledger.DeadLettered, "poison", fmt.Sprintf("claimed %d times without a result", j.d.Deliveries))
	}
	if j.listed != nil {
		// The run's listing answered for the item: judged as a lookup's
		// answer would be, without a call.
		c.stats.fromList.Add(1)
		o.fromList = true
		return c.judge(lc.callCtx, l, o, provider.Response{Status: http.StatusOK, Record: *j.listed}, nil)
	}
	// An open circuit lets one probe through; everyone else puts the
	// message back until the next probe rather than sit on its lease.
	gate := l.allow(o.at)
	if gate.Action == circuit.Wait {
		return c.deferForCircuit(o, gate.Until)
	}
	o.probe = gate.Action == circuit.Probe
	if err := l.Limiter.Wait(lc.claimCtx); err != nil {
		return o.handedBack() // stopping while waiting for a token
	}
	if st := l.circuitState(); st.Open && !o.probe {
		return c.deferForCircuit(o, st.NextProbe) // it opened while this call waited
	}
	if err := c.keepLease(lc.callCtx, j); err != nil {
		return o.lostLease(err)
	}
	select {
	case slots <- struct{}{}:
	case <-lc.claimCtx.Done():
		return o.handedBack()
	}
	o.at = c.cfg.Now()
	stopRenewal := c.renewLease(lc.callCtx, o.logger, j.d)
	resp, err := l.Client.Get(lc.callCtx, provider.Lookup{TransactionID: j.d.TransactionID, IdempotencyKey: j.d.IdempotencyKey,
		Kind: j.item.Kind, AccountID: j.item.AccountID})
	stopRenewal()
	<-slots
	if provider.KindOf(err) == provider.KindCanceled {
		return o.handedBack() // the grace is over
	}
	return c.judge(lc.callCtx, l, o, resp, err)
}

// deferForCircuit puts o's message back until the circuit's next probe at
// until.
func (c *Consumer) deferForCircuit(o outcome, until time.Time) outcome {
	c.stats.deferred.Add(1)
	o.at = c.cfg.Now()
	return o.deferred(until)
}

// settle carries out o: the recorder records an ack, a retry or a dead
// letter; a message handed back returns to the queue at once; a fatal
// outcome also stops consuming. A probe that was never made is reported to
// the circuit, so that the next one goes out.
func (c *Consumer) settle(lc *lifecycle, rec *recorder, l *lane, o outcome) {
	if o.probe && o.call == nil {
		l.record(c.cfg.Now(), circuit.Event{Kind: circuit.Ignored, Probe: true})
	}
	c.signals.settled.send(settledSignal{transactionID: o.job.d.TransactionID, fate: o.fate})
	switch o.fate {
	case handBack:
		c.release(lc.recordCtx, o.job.d)
	case leaseLost:
		o.logger.Debug("lease lost before the call", "err", o.err)
		c.stats.stale.Add(1)
	case stop:
		lc.fail(o.err)
		c.release(lc.recordCtx, o.job.d)
	default:
		rec.submit(lc.recordCtx, o)
	}
}

// keepLease extends the delivery's lease when the wait for a token ate into
// half of it, so the call and the recording fit in what remains. Most
// deliveries are called long before that and cost no extra round trip.
func (c *Consumer) keepLease(ctx context.Context, j job) error {
	visibility := c.queue.Visibility()
	if c.cfg.Now().Sub(j.claimedAt) < visibility/2 {
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
	wg.Go(func() {
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
	})
	return func() { close(done); wg.Wait() }
}
