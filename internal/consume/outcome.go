package consume

import (
	"log/slog"
	"time"

	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
)

// fate is what becomes of a delivery's message. The first three are
// recorded, with the item's change, by the recorder; the others are carried
// out by the worker at once.
type fate int

const (
	// ack marks the message done: the item is settled, or was already.
	ack fate = iota
	// retryLater reschedules the message for outcome.at plus outcome.delay.
	retryLater
	// deadLetter sets the message aside for an operator.
	deadLetter
	// handBack returns the message to the queue unprocessed (consuming is
	// stopping, or the call was cut short): no attempt, no ledger change.
	handBack
	// leaseLost drops the delivery: its lease ran out and the message was
	// claimed again elsewhere.
	leaseLost
	// stop hands the message back and stops consuming: outcome.err says why
	// (the provider refused the credentials).
	stop
)

// String names the fate in logs and test failures.
func (f fate) String() string {
	return [...]string{"ack", "retry_later", "dead_letter", "hand_back", "lease_lost", "stop"}[f]
}

// An outcome is what became of one delivery, the one value that travels
// from the worker that called the provider (or decided there was no call to
// make) to the recorder and the counters: the message's fate and, when the
// item changes, its new state with what the provider answered.
type outcome struct {
	job    job
	logger *slog.Logger
	fate   fate
	// to is the item's new state; empty: the item is not changed (its
	// outcome is recorded already, there is no item, or the message is
	// only put back).
	to ledger.State
	// countsAttempt makes a retryLater use up one of the item's attempts
	// (throttles and outages do not).
	countsAttempt bool
	reason        string
	detail        string
	// delay is how long after at the message is due again (retryLater).
	delay time.Duration
	// at is when the outcome was reached: when the call started, or when
	// the message was looked at if there was no call. By Config.Now.
	at time.Time
	// probe is set when the delivery was let through an open circuit as its
	// probe.
	probe bool
	// call is the provider's answer the outcome rests on; nil when no call
	// was made or it was cut short.
	call *answer
	// fromList is set when the answer is the item's record from its run's
	// listing (list mode), not a call of its own.
	fromList bool
	// err is why consuming stops (fate stop), or why the lease was lost.
	err error
}

// answer is what the ledger keeps of a provider call.
type answer struct {
	status int
	// throttled: the answer counts as a throttle of the item.
	throttled   bool
	differences []decision.Difference
	// record is the provider's record, when a 2xx brought one.
	record *ledger.Provider
}

// The outcomes reached without a call.

func (o outcome) acked() outcome { o.fate = ack; return o }

func (o outcome) deadLettered(to ledger.State, reason, detail string) outcome {
	o.fate, o.to, o.reason, o.detail = deadLetter, to, reason, detail
	return o
}

func (o outcome) handedBack() outcome { o.fate = handBack; return o }

func (o outcome) lostLease(err error) outcome { o.fate, o.err = leaseLost, err; return o }

// deferred puts the message back until the circuit's next probe at until,
// uncalled and uncounted.
func (o outcome) deferred(until time.Time) outcome {
	o.fate, o.reason, o.delay = retryLater, ReasonCircuitOpen, max(until.Sub(o.at), 0)
	return o
}

// change returns the item's state change o records, if it records one;
// actor names the consumer.
func (o outcome) change(actor string) (ledger.Change, bool) {
	if o.to == "" {
		return ledger.Change{}, false
	}
	j := o.job
	ch := ledger.Change{
		RunID: j.d.RunID, TransactionID: j.d.TransactionID, From: j.item.State, To: o.to,
		Reason: o.reason, RetryAfter: o.delay, Actor: actor, At: o.at,
	}
	if o.call != nil {
		ch.Called, ch.Attempt = !o.fromList, j.d.Attempt+1
		ch.Throttled, ch.HTTPStatus, ch.Provider = o.call.throttled, o.call.status, o.call.record
		for _, d := range o.call.differences {
			ch.Differences = append(ch.Differences, ledger.Difference{Field: d.Field, Expected: d.Expected, Provider: d.Provider})
		}
	}
	if o.detail != "" || o.fate == retryLater || o.fromList {
		ch.Details = map[string]any{}
		if o.fromList {
			ch.Details["source"] = "list"
		}
		if o.detail != "" {
			ch.Details["detail"] = o.detail
		}
		if o.fate == retryLater {
			ch.Details["next_attempt_at"] = o.at.Add(o.delay).UTC().Format(time.RFC3339Nano)
		}
	}
	return ch, true
}
