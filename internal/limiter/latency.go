package limiter

import (
	"slices"
	"time"
)

// latencyKept is how many of the latest answers the latency is the median
// of: an odd count, so that the median is one of them; enough that a few
// slow answers (a timeout among them) do not move it; few enough that it
// follows a change of the provider's latency within a second at 63 calls
// per second.
const latencyKept = 63

// latencies is the median time the provider's latest answers took. The
// provider counts a call against its limit when it takes it, about when it
// was sent, while the fleet's count of accepted calls grows when the
// answers come back: the count at t holds the calls sent by t minus the
// latency. The discovery dates its counts by it, so that a clump of calls
// sent at once, or the calls in flight when a 429 was sent, fall where the
// provider saw them. The zero value is ready to use and reads 0.
type latencies struct {
	kept   [latencyKept]time.Duration
	n      int // answers recorded, at most latencyKept
	next   int // where the next one goes
	median time.Duration
	stale  bool // answers came since median was computed
}

// add records an answer that took took (a negative one, from clocks
// that disagree, as 0).
func (l *latencies) add(took time.Duration) {
	l.kept[l.next] = max(took, 0)
	l.next = (l.next + 1) % latencyKept
	l.n = min(l.n+1, latencyKept)
	l.stale = true
}

// get returns the median of the latest answers' latencies, 0 before the
// first.
func (l *latencies) get() time.Duration {
	if l.stale {
		s := l.kept // a copy: kept stays in arrival order
		slices.Sort(s[:l.n])
		l.median, l.stale = s[l.n/2], false
	}
	return l.median
}
