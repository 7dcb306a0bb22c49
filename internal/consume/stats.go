package consume

import (
	"sync"
	"sync/atomic"

	"github.com/reconcile/reconcile/internal/ledger"
)

// Stats counts what a consumer did. Read it with Snapshot; it is safe for
// concurrent use.
type Stats struct {
	calls, throttles, acked, retried, deadLettered, stale, conflicts, released atomic.Int64
	systemic, deferred, listCalls, fromList                                    atomic.Int64
	byClass                                                                    [6]atomic.Int64 // 0: no answer, 1..5: 1xx..5xx
	outcomes                                                                   sync.Map        // outcome word → *atomic.Int64
}

// Snapshot is a copy of a consumer's counters.
type Snapshot struct {
	// Calls is the number of provider calls made.
	Calls int64
	// Throttles is the number of calls answered 429.
	Throttles int64
	// ByClass counts calls by status class: "2xx" ... "5xx", and "error"
	// for calls without an answer.
	ByClass map[string]int64
	// Acked, Retried and DeadLettered count recorded decisions.
	Acked, Retried, DeadLettered int64
	// Outcomes counts terminal outcomes recorded by this consumer.
	Outcomes map[string]int64
	// Stale counts results dropped because the message had been redelivered
	// elsewhere; Conflicts those dropped because the item had moved on.
	Stale, Conflicts int64
	// Released counts deliveries handed back unprocessed at shutdown.
	Released int64
	// Systemic counts calls that failed while their provider's circuit was
	// open: rescheduled without using up one of the item's attempts.
	Systemic int64
	// Deferred counts messages put back uncalled because their provider's
	// circuit was open.
	Deferred int64
	// ListCalls counts the list pages this consumer requested (list mode);
	// FromList the items it judged from a listed record, without a call.
	ListCalls, FromList int64
}

// Snapshot returns the consumer's counters so far.
func (c *Consumer) Snapshot() Snapshot {
	s := &c.stats
	out := Snapshot{Calls: s.calls.Load(), Throttles: s.throttles.Load(), Acked: s.acked.Load(),
		Retried: s.retried.Load(), DeadLettered: s.deadLettered.Load(), Stale: s.stale.Load(),
		Conflicts: s.conflicts.Load(), Released: s.released.Load(), Systemic: s.systemic.Load(), Deferred: s.deferred.Load(),
		ListCalls: s.listCalls.Load(), FromList: s.fromList.Load(), ByClass: map[string]int64{}, Outcomes: map[string]int64{}}
	names := [6]string{"error", "1xx", "2xx", "3xx", "4xx", "5xx"}
	for i := range s.byClass {
		out.ByClass[names[i]] = s.byClass[i].Load()
	}
	s.outcomes.Range(func(k, v any) bool {
		out.Outcomes[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// count counts a recorded outcome by its message's fate and the item's new
// state.
func (s *Stats) count(o outcome) {
	switch o.fate {
	case retryLater:
		s.retried.Add(1)
	case deadLetter:
		s.deadLettered.Add(1)
		s.outcome(string(ledger.DeadLettered))
	case ack:
		s.acked.Add(1)
		if o.to != "" {
			s.outcome(string(o.to))
		}
	}
}

// outcome counts one terminal outcome.
func (s *Stats) outcome(word string) {
	v, _ := s.outcomes.LoadOrStore(word, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}
