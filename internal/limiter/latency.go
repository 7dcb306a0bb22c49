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
	spread time.Duration
	stale  bool // answers came since median and spread were computed
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
	l.update()
	return l.median
}

// jitter returns how far apart the latest answers' latencies are: the
// 90th percentile less the 10th, 0 before the first. A count dated by the
// median is off by up to about that much for most calls.
func (l *latencies) jitter() time.Duration {
	l.update()
	return l.spread
}

// update sorts a copy of the answers kept for the median and the jitter
// when answers came since they were last computed.
func (l *latencies) update() {
	if !l.stale {
		return
	}
	s := l.kept // a copy: kept stays in arrival order
	slices.Sort(s[:l.n])
	l.median, l.spread, l.stale = s[l.n/2], s[l.n*9/10]-s[l.n/10], false
}
