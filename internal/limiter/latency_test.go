package limiter

import (
	"testing"
	"time"
)

func TestLatenciesMedian(t *testing.T) {
	t.Parallel()
	var l latencies
	if got := l.get(); got != 0 {
		t.Fatalf("before any answer: %v, want 0", got)
	}
	for i := range latencyKept {
		took := 200 * time.Millisecond
		if i%10 == 0 {
			took = 30 * time.Second // a timeout now and then
		}
		l.add(took)
	}
	if got := l.get(); got != 200*time.Millisecond {
		t.Errorf("200 ms answers among timeouts: median %v, want 200ms", got)
	}
	// The oldest go first: 31 faster answers (one of them read from
	// clocks that disagree) are fewer than half of those kept.
	l.add(-time.Second)
	for range latencyKept/2 - 1 {
		l.add(20 * time.Millisecond)
	}
	if got := l.get(); got != 200*time.Millisecond {
		t.Errorf("after %d faster answers of %d kept: %v, want still 200ms", latencyKept/2, latencyKept, got)
	}
	l.add(20 * time.Millisecond)
	l.add(20 * time.Millisecond)
	if got := l.get(); got != 20*time.Millisecond {
		t.Errorf("after %d faster answers: %v, want 20ms", latencyKept/2+2, got)
	}
}

// TestDiscoveryDatesCallsBySend runs a night against a bucket of 20 calls
// refilled at 200/s whose answers take 200 ms. Counted when answered, the
// 20 calls the bucket let through at once after a pause reach the row in a
// clump 200 ms after they were sent, the calls in flight when a 429 was
// sent seem accepted after it, and the first 429 seems to come 200 ms after
// the calls before it: the burst was learned as one call, the rate as
// 550/s, and the night ran at 35% in a cycle of 429s and halvings. Dated by
// when they were sent, the counts give the provider's bucket and rate.
func TestDiscoveryDatesCallsBySend(t *testing.T) {
	t.Parallel()
	c := matrixCell{family: familyUnknown, shape: shapeNamed("bucket-0.1s"), rate: 200, ra: matrixRetryAfter[1],
		latency: 200 * time.Millisecond, procs: 1, pattern: matrixPatterns[0]}
	r := simulateNight(c.spec())
	first := r.firstMeasure()
	if first == nil || first.burst < 15 || first.burst > 25 || first.estimate < 180 || first.estimate > 210 {
		t.Errorf("%s: first measure %+v, want about 200/s with a bucket of about 20\n%s", c, first, formatChanges(r.changes))
	}
	if e := r.efficiency(); e < 0.8 {
		t.Errorf("%s: efficiency %.1f%%, want >= 80%%\n%s", c, 100*e, formatChanges(r.changes))
	}
}

func TestLatenciesJitter(t *testing.T) {
	t.Parallel()
	var l latencies
	if got := l.jitter(); got != 0 {
		t.Fatalf("before any answer: %v, want 0", got)
	}
	for range latencyKept {
		l.add(200 * time.Millisecond)
	}
	if got := l.jitter(); got != 0 {
		t.Errorf("answers that all took 200 ms: jitter %v, want 0", got)
	}
	// 100 answers from 100 to 199 ms, the latest 63 kept: 137 to 199 ms,
	// whose 10th and 90th percentiles are 6 and 56 answers in: 143 and
	// 193 ms.
	for i := range 100 {
		l.add(time.Duration(100+i) * time.Millisecond)
	}
	if got, want := l.jitter(), 50*time.Millisecond; got != want {
		t.Errorf("answers spread from 137 to 199 ms: jitter %v, want %v", got, want)
	}
	if got := l.get(); got != 168*time.Millisecond {
		t.Errorf("median %v, want 168ms", got)
	}
}
