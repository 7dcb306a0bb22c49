package limiter

import (
	"math"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/human"
)

// The matrix's processes call from the instant they first read the row and
// every answer takes the same time. A consumer does neither: it claims its
// first messages before its first call, and when all its workers start at
// once the first answers come back unevenly, some after the 429 of a call
// sent later. Both once made the start-up learn a bucket of one call and a
// rate up to three times the provider's (the real consumer against a bucket
// of 20 at 200/s with 200 ms answers: 46% of the limit), from which no later
// 429 recovered. These nights add each to a steady cell of the matrix, one
// process, a bucket's shape: its first measure must find the provider's
// bucket, and the night must reach what it reaches without them.

// unevenCells are the cells the start-ups are checked on: buckets of 0.1 s
// (where a bucket learned a call short costs most) and of 1 s, at each
// rate and latency.
func unevenCells() []matrixCell {
	return steadyCells(familyUnknown, []string{"bucket-0.1s", "bucket-1s"}, []float64{20, 200, 1000}, matrixLatencies, []int{1})
}

// checkUneven runs each cell with and without what uneven does to its spec,
// and fails a cell whose first measure's bucket is off the provider's by
// more than a tenth (or a call), or that loses more than lose of its
// efficiency to it.
func checkUneven(t *testing.T, lose float64, uneven func(*nightSpec)) {
	t.Helper()
	for _, c := range unevenCells() {
		even := simulateNight(c.spec())
		sp := c.spec()
		uneven(&sp)
		got := simulateNight(sp)
		m := got.firstMeasure()
		if m == nil {
			t.Errorf("%v: no measure", c)
			continue
		}
		want := float64(c.bucket())
		if math.Abs(m.burst-want) > math.Max(1, want/10) {
			t.Errorf("%v: first measure %s with a bucket of %.1f, want about %g", c, human.Rate(m.estimate), m.burst, want)
		}
		if got.efficiency() < even.efficiency()-lose {
			t.Errorf("%v: %.1f%% of the limit, %.1f%% with even answers from the first instant", c, 100*got.efficiency(),
				100*even.efficiency())
		}
	}
}

// TestDiscoveryIdleStartUp: the process reads the row 85 ms before its
// first call (what a consumer took to claim its first messages against a
// local database). The row's reads come a lease apart, so the last one
// that counted nothing dated the start of the first span that much early,
// and the calls before the first 429 read as a bucket of one call; the
// first accepted call's own answer dates it.
func TestDiscoveryIdleStartUp(t *testing.T) {
	t.Parallel()
	checkUneven(t, 0.02, func(sp *nightSpec) { sp.idle = 85 * time.Millisecond })
}

// TestDiscoveryAnswersOutOfOrder: the answers to the first second's calls
// take up to 60 ms more, spread evenly (the real consumer's first answers
// spread over 32 ms between their 10th and 90th percentiles), so some come
// back after the 429 of a call sent after theirs. Counted after it, they
// read as calls accepted while the provider's bucket was empty; an answer
// whose call was sent before the refused one (by its own latency, and the
// refused one's) counts before it. The span after the first 429 is still
// dated by the median latency, and the first measure of the rate comes out
// low (a lower bound: 93/s of 200/s), which the first probe corrects: up to
// 3.1 points of the night, hence 5.
func TestDiscoveryAnswersOutOfOrder(t *testing.T) {
	t.Parallel()
	checkUneven(t, 0.05, func(sp *nightSpec) { sp.coldSpread = 60 * time.Millisecond })
}
